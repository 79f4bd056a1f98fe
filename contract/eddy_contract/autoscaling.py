"""`spec.autoscaling`: the settings of the operator's autoscaler (eddy_operator.autoscaler;
docs/operations.md, "Autoscaling"), as typed, frozen values. Pure, like `eddy_contract.spec`,
which reads a manifest's `spec.autoscaling` with `parse_autoscaling`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from eddy_contract.units import parse_duration

__all__ = ["AutoscalingSpec", "parse_autoscaling"]


@dataclass(frozen=True)
class AutoscalingSpec:
    """The operator's autoscaler (eddy_operator.autoscaler; docs/operations.md, "Autoscaling").
    The defaults are the CRD's; an app that never mentions `spec.autoscaling` is not scaled."""

    enabled: bool = False
    min_replicas: int = 1
    max_replicas: int = 10
    #: percent of its time each executor should spend processing input
    target_utilization: int = 70
    #: the backlog is to be drained within this time, on top of the input's rate
    catch_up_s: float = 300.0
    #: rates and busy time are averaged over this window
    window_s: float = 60.0
    scale_out_stabilization_s: float = 60.0
    scale_in_stabilization_s: float = 300.0
    #: executors one decision may add or remove
    max_step: int = 2


def parse_autoscaling(a: Mapping[str, Any] | None) -> AutoscalingSpec:
    """`spec.autoscaling` as the CRD defaulted and checked it (None: not there, not scaled)."""
    if a is None:
        return AutoscalingSpec()
    return AutoscalingSpec(
        enabled=a["enabled"],
        min_replicas=a["minReplicas"],
        max_replicas=a["maxReplicas"],
        target_utilization=a["targetUtilization"],
        catch_up_s=parse_duration(a["catchUpDuration"]),
        window_s=parse_duration(a["metricsWindow"]),
        scale_out_stabilization_s=parse_duration(a["scaleOutStabilization"]),
        scale_in_stabilization_s=parse_duration(a["scaleInStabilization"]),
        max_step=a["maxStep"],
    )
