"""Task directory lock and the state directory inventory."""

from __future__ import annotations

import os
import select
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from eddy_runtime.state import ProcessorStateManager, StoreSpec, open_store
from eddy_runtime.state.checkpoint import OffsetCheckpoint
from eddy_runtime.state.task_directory import StateDirectory, TaskDirectory, TaskDirectoryLocked

pytestmark = pytest.mark.unit


def hold_lock_in_child(state_dir: Path, app: str, task: str) -> subprocess.Popen:
    """A child process that takes the task lock and keeps it until killed."""
    code = textwrap.dedent(f"""
        import sys, time
        from eddy_runtime.state.task_directory import TaskDirectory
        lock = TaskDirectory({str(state_dir)!r}, {app!r}, {task!r}).lock()
        print("locked", flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    ready, _, _ = select.select([child.stdout], [], [], 30)
    if not ready:
        child.kill()
        child.wait(10)
        pytest.fail("the child did not take the task lock within 30 s")
    assert child.stdout.readline().strip() == "locked"
    return child


def test_lock_held_by_another_process_is_refused_naming_its_pid_and_host(tmp_path) -> None:
    child = hold_lock_in_child(tmp_path, "app", "0_1")
    try:
        td = TaskDirectory(tmp_path, "app", "0_1")
        with pytest.raises(TaskDirectoryLocked) as err:
            td.lock()
        assert err.value.holder is not None
        assert err.value.holder.pid == child.pid
        assert f"pid {child.pid} on host {socket.gethostname()}" in str(err.value)
    finally:
        child.kill()
        child.wait(10)


def test_lock_of_a_killed_holder_is_free_at_once(tmp_path) -> None:
    child = hold_lock_in_child(tmp_path, "app", "0_1")
    child.kill()
    child.wait(10)
    td = TaskDirectory(tmp_path, "app", "0_1")
    assert td.holder() is None
    with td.lock():
        assert td.holder() is not None and td.holder().pid == os.getpid()
    assert td.holder() is None


def test_lock_waits_up_to_its_timeout(tmp_path) -> None:
    child = hold_lock_in_child(tmp_path, "app", "0_1")
    try:
        started = time.monotonic()
        with pytest.raises(TaskDirectoryLocked):
            TaskDirectory(tmp_path, "app", "0_1").lock(timeout=0.3)
        assert time.monotonic() - started >= 0.3
    finally:
        child.kill()
        child.wait(10)


def test_a_second_open_in_the_same_process_is_refused_too(tmp_path) -> None:
    td = TaskDirectory(tmp_path, "app", "0_1")
    with td.lock(), pytest.raises(TaskDirectoryLocked):
        TaskDirectory(tmp_path, "app", "0_1").lock()


def test_inventory_lists_tasks_stores_offsets_and_holders(tmp_path) -> None:
    for task, partition, offset in (("0_0", 0, 10), ("0_1", 1, 20)):
        td = TaskDirectory(tmp_path, "wc", task)
        store = open_store(StoreSpec.key_value("counts"), td.store_path("counts"))
        store.write([(b"a", b"1")], changelog_offset=offset)
        store.close()
        OffsetCheckpoint(td.path / ".checkpoint").write(
            {("wc-counts-changelog", partition): offset, ("words", partition): 99}
        )
    TaskDirectory(tmp_path, "other", "1_0").path.mkdir(parents=True)
    (tmp_path / "wc" / "not-a-task").mkdir()
    with TaskDirectory(tmp_path, "wc", "0_1").lock():
        inv = StateDirectory(tmp_path).inventory("wc")
        assert [t.task_id for t in inv] == ["0_0", "0_1"]
        first, second = inv
        assert first.locked_by is None and second.locked_by is not None
        assert [(s.name, s.changelog_topic, s.changelog_partition, s.changelog_offset) for s in second.stores] == [
            ("counts", "wc-counts-changelog", 1, 20)
        ]
        assert second.stores[0].size_bytes > 0
        assert second.input_offsets == ((("words", 1), 99),)
        assert second.input_offsets[0][0].topic == "words"  # a TopicPartition
    assert [t.app for t in StateDirectory(tmp_path).inventory()] == ["other", "wc", "wc"]


def test_inventory_reports_an_unreadable_checkpoint_instead_of_failing(tmp_path) -> None:
    td = TaskDirectory(tmp_path, "wc", "0_0")
    td.store_path("counts").mkdir(parents=True)
    (td.path / ".checkpoint").write_text("garbage")
    (inv,) = StateDirectory(tmp_path).inventory()
    assert inv.checkpoint_error is not None
    assert inv.stores[0].changelog_offset is None


def test_a_malformed_task_id_is_refused_naming_it(tmp_path) -> None:
    with pytest.raises(ValueError, match="task id 'x' is not of the form <subtopology>_<partition>"):
        ProcessorStateManager.open("app", "x", [], tmp_path, "127.0.0.1:9")
    assert not (tmp_path / "app" / "x").exists(), "nothing is created for a malformed task id"
