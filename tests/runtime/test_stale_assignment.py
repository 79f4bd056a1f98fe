"""A restarted driver hands executor ids out anew: an assignment made for an earlier driver's ids
is not for its executors, and it waits for the operator's next (driver/channel_io.py)."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType

import pytest

from eddy_contract.assignor import Assignment, Executor, TaskAssignment
from eddy_contract.channel import ASSIGNMENT_KEY, AssignmentMessage, encode_assignment
from eddy_runtime.driver.channel_io import ChannelLocation, read_channel

pytestmark = pytest.mark.unit


def published(tmp_path: Path, hosts: dict[str, str]) -> ChannelLocation:
    message = AssignmentMessage("wc", Assignment(3, MappingProxyType({"0_0": TaskAssignment("3", ("4",))})),
                                (Executor("3", "wc-0"), Executor("4", "wc-1")), "t", hosts=hosts)
    path = tmp_path / ASSIGNMENT_KEY
    path.write_text(encode_assignment(message)[ASSIGNMENT_KEY])
    return ChannelLocation(path=str(path))


def test_the_same_ids_on_the_same_hosts_are_this_driver_s_executors(tmp_path: Path) -> None:
    where = published(tmp_path, {"3": "10.0.0.1", "4": "10.0.0.2"})
    message, _ = read_channel(where, {"3": "10.0.0.1", "4": "10.0.0.2"})
    assert message is not None and message.assignment.generation == 3


def test_ids_swapped_between_hosts_or_hosts_under_new_ids_are_an_earlier_driver_s(tmp_path: Path) -> None:
    where = published(tmp_path, {"3": "10.0.0.1", "4": "10.0.0.2"})
    assert read_channel(where, {"3": "10.0.0.2", "4": "10.0.0.1"})[0] is None
    assert read_channel(where, {"1": "10.0.0.1", "2": "10.0.0.2"})[0] is None


def test_an_executor_that_died_since_does_not_make_it_stale(tmp_path: Path) -> None:
    where = published(tmp_path, {"3": "10.0.0.1", "4": "10.0.0.2"})
    assert read_channel(where, {"3": "10.0.0.1"})[0] is not None
