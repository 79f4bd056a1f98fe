"""Reading the operator's assignment and publishing the runtime state, on Kubernetes or in files.

The formats are the operator's (`eddy_contract.channel`); this module only moves the documents:
a ConfigMap in the driver's namespace (what the operator writes and reads), or a file (a mounted
ConfigMap, or tests). The driver (driver.py) calls `read_assignment` before each batch and
`write_runtime_state` after it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eddy_contract.assignor import Assignment
from eddy_contract.channel import (
    ASSIGNMENT_KEY,
    RUNTIME_STATE_KEY,
    RuntimeState,
    decode_assignment,
    encode_runtime_state,
)

__all__ = ["ChannelLocation", "read_assignment", "write_runtime_state"]


@dataclass(frozen=True)
class ChannelLocation:
    """Where a channel document lives: a file path, or a ConfigMap (namespace, name)."""

    path: str | None = None
    namespace: str | None = None
    configmap: str | None = None

    @classmethod
    def from_env(cls, name_var: str) -> ChannelLocation | None:
        """The ConfigMap named by `name_var` in ``EDDY_NAMESPACE`` (the operator's contract)."""
        name = os.environ.get(name_var)
        if not name:
            return None
        return cls(namespace=os.environ.get("EDDY_NAMESPACE", "default"), configmap=name)


_api: Any = None


def _core_api() -> Any:
    global _api
    if _api is None:
        from kubernetes import client

        from eddy_contract.kube import api_client

        _api = client.CoreV1Api(api_client())
    return _api


def read_assignment(where: ChannelLocation) -> Assignment | None:
    """The newest assignment, or None while the operator has not published one."""
    if where.path is not None:
        path = Path(where.path)
        file = path / ASSIGNMENT_KEY if path.is_dir() else path
        if not file.is_file():
            return None
        return decode_assignment({ASSIGNMENT_KEY: file.read_text()}).assignment
    from kubernetes.client.exceptions import ApiException

    try:
        cm = _core_api().read_namespaced_config_map(where.configmap, where.namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    if not cm.data or ASSIGNMENT_KEY not in cm.data:
        return None
    return decode_assignment(cm.data).assignment


def write_runtime_state(where: ChannelLocation, state: RuntimeState) -> None:
    data = encode_runtime_state(state)
    if where.path is not None:
        path = Path(where.path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(data[RUNTIME_STATE_KEY])
        tmp.replace(path)
        return
    _core_api().patch_namespaced_config_map(where.configmap, where.namespace, {"data": data})
