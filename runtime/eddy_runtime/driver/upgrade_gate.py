"""The topology compatibility gate, in the driver of a new version (docs/operations.md, "Upgrading
an app"): before it touches the executors, a starting driver compiles its pipeline, describes it
(dsl/describe.py) and compares it with the topology the app runs, which the driver before it
published beside its runtime state (`TOPOLOGY_KEY`). Under the app's upgrade mode
(eddy_contract.upgrade's `decide`) a change that would break the running state is refused: the
driver publishes the verdict (`UPGRADE_KEY`: its config hash, the differences) and stops, before
it started Spark, so the executors' task runners go on running the old version; the operator
turns the verdict into a condition and an Event, and rolls the driver back to the last version
that ran healthily. A driver that passes the gate publishes its own topology (`publish_topology`).
"""

from __future__ import annotations

import json
import logging
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eddy_contract.channel import UPGRADE_KEY
from eddy_contract.spec import StreamAppSpec
from eddy_contract.topology import TOPOLOGY_KEY, TopologyDescription, compare
from eddy_contract.upgrade import UpgradeDecision, decide
from eddy_runtime.driver.channel_io import ChannelLocation, read_channel_data, write_channel_data
from eddy_runtime.driver.outcomes import DriverError
from eddy_runtime.driver.startup import compile_app
from eddy_runtime.dsl.describe import describe
from eddy_runtime.dsl.pipeline import Topology
from eddy_runtime.dsl.subtopology import CompiledApp
from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka.client import KafkaClientConfig

__all__ = ["CONFIG_HASH_ENV", "UpgradeRefused", "check_upgrade", "gate_new_version", "publish_topology"]

log = logging.getLogger("eddy.driver")

#: the driver pod's config hash (the operator's `eddy.dev/config-hash`), named in a verdict
CONFIG_HASH_ENV = "EDDY_CONFIG_HASH"


class UpgradeRefused(DriverError):
    """The new version's topology would break the running state under the app's upgrade mode."""

    def __init__(self, decision: UpgradeDecision) -> None:
        self.decision = decision
        super().__init__("upgrade refused (spec.upgrade.mode " + str(decision.mode) + "): "
                         + "; ".join(decision.reasons))


def _sibling(where: ChannelLocation, key: str) -> ChannelLocation:
    """Local mode keeps each document in a file beside the runtime state's."""
    if where.path is None:
        return where
    return ChannelLocation(path=str(Path(where.path).with_name(key)))


def running_topology(where: ChannelLocation | None) -> TopologyDescription | None:
    """The topology the app runs, as its last driver published it (None: none yet)."""
    if where is None:
        return None
    text = read_channel_data(_sibling(where, TOPOLOGY_KEY), TOPOLOGY_KEY)
    return TopologyDescription.from_json(text) if text else None


def check_upgrade(compiled: CompiledApp, spec: StreamAppSpec, where: ChannelLocation | None) -> UpgradeDecision | None:
    """Compare `compiled` with the running topology; raises `UpgradeRefused` (after publishing the
    verdict) when the app's upgrade mode does not take the change, or when the change needs a
    state reset, which this driver does not carry out (it would have to stop every runner that
    holds the old stores first). None when nothing runs yet."""
    running = running_topology(where)
    if running is None or where is None:
        return None
    proposed = describe(compiled)
    decision = decide(compare(running, proposed), spec.upgrade.mode, proposed, spec.upgrade.reset_offsets)
    if decision.allowed and (decision.reset_subtopologies or decision.reset_stores or decision.input_positions):
        decision = UpgradeDecision(decision.mode, False, reasons=(
            *decision.reasons, f"the state reset that spec.upgrade.mode {decision.mode} asks for (stores "
            f"{list(decision.reset_stores)}) is not carried out by this version of Eddy; deploy the change under "
            "a new applicationId, or keep the stores compatible"))
    for note in decision.notes:
        log.info("upgrade: %s", note)
    verdict: dict[str, Any] = {"configHash": os.environ.get(CONFIG_HASH_ENV, ""), "mode": str(decision.mode),
                               "allowed": decision.allowed, "reasons": list(decision.reasons),
                               "notes": list(decision.notes),
                               "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    write_channel_data(_sibling(where, UPGRADE_KEY), {UPGRADE_KEY: json.dumps(verdict, sort_keys=True)})
    if not decision.allowed:
        raise UpgradeRefused(decision)
    log.info("upgrade gate passed: the new topology keeps the running state (%d difference(s))",
             len(decision.reasons) + len(decision.notes))
    return decision


def gate_new_version(spec: StreamAppSpec, topology: Topology, where: ChannelLocation | None) -> None:
    """`check_upgrade` of the pipeline `topology`, compiled against its topics here (before Spark
    starts); raises `UpgradeRefused`, or `DriverError` when Kafka or the topics are not there."""
    if running_topology(where) is None:
        return
    kafka = KafkaClientConfig.from_spec(spec)
    admins: list[Any] = []

    def admin() -> Any:
        if not admins:
            admins.append(kafka_client.admin(kafka))
        return admins[0]

    check_upgrade(compile_app(admin, kafka, topology, spec), spec, where)


def publish_topology(compiled: CompiledApp, where: ChannelLocation | None) -> None:
    """This driver's topology is the running one from now on."""
    if where is not None:
        write_channel_data(_sibling(where, TOPOLOGY_KEY), {TOPOLOGY_KEY: describe(compiled).to_json()})
