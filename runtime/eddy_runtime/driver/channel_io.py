"""Reading the operator's assignment and publishing the runtime state, on Kubernetes or in files.

The formats are the operator's (`eddy_contract.channel`); this module only moves the documents:
a ConfigMap in the driver's namespace (what the operator writes and reads), or a file (a mounted
ConfigMap, or tests). The driver's assignment source (driver/assignment_source.py) calls
`read_channel` before each batch, and its accounting (driver/accounting.py) `write_runtime_state`
after it; `AssignmentWatch` tells the source when the assignment changed, so that a new generation
reaches the executors without waiting for the next sync.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from eddy_contract.channel import (
    ASSIGNMENT_KEY,
    RUNTIME_STATE_KEY,
    AssignmentMessage,
    LiveSettings,
    RuntimeState,
    decode_assignment,
    decode_live_settings,
    encode_runtime_state,
)

__all__ = ["AssignmentWatch", "ChannelLocation", "read_channel", "read_channel_data",
           "write_channel_data", "write_runtime_state"]

log = logging.getLogger("eddy.driver")

#: a file is looked at this often; a ConfigMap watch is re-opened after this many seconds
FILE_POLL_S = 0.1
WATCH_TIMEOUT_S = 60


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


def read_channel(where: ChannelLocation,
                 hosts: Mapping[str, str] | None = None) -> tuple[AssignmentMessage | None, LiveSettings | None]:
    """The newest assignment message, None while the operator has not published one; and the spec's live
    settings beside it (None if none). `hosts` (executor id -> host, as this driver's executors
    registered): no assignment either while it names one of them on another host (it was made for
    an earlier driver's executor ids: a restarted driver hands ids out anew, and the operator
    publishes the same placement under the new ids soon)."""
    data: Mapping[str, str] | None
    if where.path is not None:
        path = Path(where.path)
        file = path / ASSIGNMENT_KEY if path.is_dir() else path
        if not file.is_file():
            return None, None
        data = {ASSIGNMENT_KEY: file.read_text()}
    else:
        from kubernetes.client.exceptions import ApiException

        try:
            cm = _core_api().read_namespaced_config_map(where.configmap, where.namespace)
        except ApiException as e:
            if e.status == 404:
                return None, None
            raise
        data = cm.data
    settings = decode_live_settings(data)
    if not data or ASSIGNMENT_KEY not in data:
        return None, settings
    message = decode_assignment(data)
    # stale: it names a live executor on another host, or a host of a live executor under another id
    by_host = {host: e for e, host in (hosts or {}).items()}
    stale = sorted(e for e, host in message.hosts.items()
                   if hosts and ((e in hosts and hosts[e] != host) or (e not in hosts and host in by_host)))
    if stale:
        log.info("assignment generation %d names executors %s on other hosts (an earlier driver's ids); waiting "
                 "for the operator's next", message.assignment.generation, stale)
        return None, settings
    return message, settings


def read_channel_data(where: ChannelLocation, key: str) -> str | None:
    """One entry of a channel ConfigMap's `data` (or the file at `where.path`); None if absent."""
    if where.path is not None:
        path = Path(where.path)
        return path.read_text() if path.is_file() else None
    from kubernetes.client.exceptions import ApiException

    try:
        cm = _core_api().read_namespaced_config_map(where.configmap, where.namespace)
    except ApiException as e:
        if e.status == 404:
            return None
        raise
    value: str | None = (cm.data or {}).get(key)
    return value


def write_channel_data(where: ChannelLocation, data: Mapping[str, str]) -> None:
    """Set entries of a channel ConfigMap's `data` (the others stay); a file takes the one value."""
    if where.path is not None:
        path = Path(where.path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text("".join(data.values()))
        tmp.replace(path)
        return
    _core_api().patch_namespaced_config_map(where.configmap, where.namespace, {"data": dict(data)})


def write_runtime_state(where: ChannelLocation, state: RuntimeState) -> None:
    data = encode_runtime_state(state)
    if where.path is not None:
        path = Path(where.path)
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_text(data[RUNTIME_STATE_KEY])
        tmp.replace(path)
        return
    _core_api().patch_namespaced_config_map(where.configmap, where.namespace, {"data": data})


class AssignmentWatch:
    """Sets `changed` whenever the assignment document may have changed: a watch on the ConfigMap
    (re-opened every minute, and 1 s after an error), or the file's size and modification time
    looked at every 0.1 s. The driver reads the document itself (`read_channel`)."""

    def __init__(self, where: ChannelLocation, on_change: Callable[[], None] | None = None) -> None:
        self.where = where
        self.changed = threading.Event()
        #: called on the watch's thread after each `changed.set()`
        self.on_change = on_change
        self._stop = threading.Event()
        target = self._poll_file if where.path is not None else self._watch_configmap
        self._thread = threading.Thread(target=target, name="eddy-assignment-watch", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _changed(self) -> None:
        self.changed.set()
        if self.on_change is not None:
            try:
                self.on_change()
            except Exception:  # noqa: BLE001 - the driver reads the document at its next sync anyway
                log.exception("reacting to a new assignment")

    def _poll_file(self) -> None:
        assert self.where.path is not None
        path = Path(self.where.path)
        last: tuple[int, int] | None = None
        while not self._stop.wait(FILE_POLL_S):
            file = path / ASSIGNMENT_KEY if path.is_dir() else path
            try:
                st = file.stat()
                seen = (st.st_mtime_ns, st.st_size)
            except FileNotFoundError:
                seen = (0, 0)
            if last is not None and seen != last:
                self._changed()
            last = seen

    def _watch_configmap(self) -> None:
        from kubernetes import watch

        version: str | None = None
        while not self._stop.is_set():
            w = watch.Watch()
            try:
                for event in w.stream(_core_api().list_namespaced_config_map, self.where.namespace,
                                      field_selector=f"metadata.name={self.where.configmap}",
                                      resource_version=version, timeout_seconds=WATCH_TIMEOUT_S):
                    seen = event["object"].metadata.resource_version
                    if version is not None and seen != version:
                        self._changed()
                    version = seen
                    if self._stop.is_set():
                        break
            except Exception as e:  # noqa: BLE001 - the driver still reads it every sync
                log.debug("watching the assignment ConfigMap: %s", e)
                version = None
                self._stop.wait(1.0)
            finally:
                w.stop()
