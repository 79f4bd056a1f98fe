"""`AssignmentWatch`: the driver learns that the operator published a new assignment without
waiting for its next sync: a file (looked at every 0.1 s) and a ConfigMap watched on the real
apiserver."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from eddy_runtime.driver import channel_io
from eddy_runtime.driver.channel_io import AssignmentWatch, ChannelLocation
from tests.servers import ControlPlane


def _changed_within(watch: AssignmentWatch, seconds: float) -> bool:
    return watch.changed.wait(seconds)


@pytest.mark.unit
def test_a_rewritten_assignment_file_is_noticed(tmp_path: Path) -> None:
    file = tmp_path / "assignment.json"
    file.write_text('{"generation": 1}')
    watch = AssignmentWatch(ChannelLocation(path=str(file)))
    try:
        assert not _changed_within(watch, 0.5), "nothing changed yet"
        file.write_text('{"generation": 2, "longer": true}')
        assert _changed_within(watch, 2.0)
        watch.changed.clear()
        assert not _changed_within(watch, 0.5)
        file.unlink()
        assert _changed_within(watch, 2.0), "a removed file is a change too"
    finally:
        watch.close()


@pytest.mark.integration
def test_a_patched_assignment_configmap_is_noticed(kube: ControlPlane, namespace: str,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kube.kubeconfig))
    monkeypatch.setattr(channel_io, "_api", None)  # a client for this apiserver, built from KUBECONFIG
    kube.kubectl("-n", namespace, "create", "configmap", "app-assignment", "--from-literal=assignment=1")
    other = "other-configmap"
    kube.kubectl("-n", namespace, "create", "configmap", other, "--from-literal=x=1")
    watch = AssignmentWatch(ChannelLocation(namespace=namespace, configmap="app-assignment"))
    try:
        time.sleep(1.0)  # the watch is open
        assert not watch.changed.is_set()
        kube.kubectl("-n", namespace, "patch", "configmap", other, "-p", '{"data": {"x": "2"}}')
        assert not _changed_within(watch, 1.0), "another ConfigMap's change is not this one's"
        started = time.monotonic()
        kube.kubectl("-n", namespace, "patch", "configmap", "app-assignment", "-p", '{"data": {"assignment": "2"}}')
        assert _changed_within(watch, 5.0)
        assert time.monotonic() - started < 5.0
    finally:
        watch.close()
