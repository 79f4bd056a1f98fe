"""The operator<->driver channel: round trips, and clear errors on documents that cannot be used."""

from __future__ import annotations

import json
from types import MappingProxyType

import pytest

from eddy_contract.assignor import Assignment, AssignorSettings, Executor, TaskAssignment, assign
from eddy_contract.channel import (
    ASSIGNMENT_KEY,
    RUNTIME_STATE_KEY,
    AssignmentMessage,
    ChannelError,
    ExecutorInventory,
    ExecutorLoad,
    RestoreProgress,
    RuntimeState,
    assignment_configmap_name,
    decode_assignment,
    decode_runtime_state,
    encode_assignment,
    encode_runtime_state,
    runtime_state_configmap_name,
)

pytestmark = pytest.mark.unit

EXECUTORS = (
    Executor("1", "wc-exec-1", "zone-a"),
    Executor("2", "wc-exec-2", "zone-b"),
    Executor("3", "wc-exec-3", None),
)


def message() -> AssignmentMessage:
    assignment = assign(EXECUTORS, {f"0_{p}": 100 * p for p in range(5)}, {}, None, AssignorSettings())
    return AssignmentMessage("wordcount", assignment, EXECUTORS, "2025-01-01T00:00:00Z", "executor 4 deleted")


def runtime_state() -> RuntimeState:
    return RuntimeState(
        app="wordcount",
        updated_at="2025-01-01T00:00:01Z",
        assignment_generation=3,
        changelog_end_offsets=MappingProxyType({"0_0": {"counts": 10, "windows": 5}, "1_0": {}}),
        executors=MappingProxyType(
            {
                "1": ExecutorInventory(
                    "1", "wc-exec-1", "10.0.0.1", MappingProxyType({"0_0": {"counts": 8, "windows": 5}})
                ),
                "2": ExecutorInventory("2", None, None, MappingProxyType({})),
            }
        ),
        restores=(RestoreProgress("0_0", "2", "standby", 3, 15),),
        input_lag=MappingProxyType({"0_0": 42}),
        batch_id=17,
        load=MappingProxyType({"1": ExecutorLoad(records=1200, busy_s=0.75, per_round_s=0.5), "2": ExecutorLoad()}),
        load_since="2025-01-01T00:00:00+00:00",
    )


def test_assignment_round_trips():
    m = message()
    assert decode_assignment(encode_assignment(m)) == m


def test_runtime_state_round_trips_and_sums_offsets_per_task():
    s = runtime_state()
    back = decode_runtime_state(encode_runtime_state(s))
    assert back == s
    assert back.end_offsets() == {"0_0": 15, "1_0": 0}
    assert back.held_offsets() == {"1": {"0_0": 13}, "2": {}}
    assert back.restores[0].remaining == 12


def test_encoding_is_byte_stable():
    assert encode_assignment(message()) == encode_assignment(message())
    assert encode_runtime_state(runtime_state()) == encode_runtime_state(runtime_state())


def test_configmap_names_derive_from_the_app():
    assert assignment_configmap_name("wc") == "wc-assignment"
    assert runtime_state_configmap_name("wc") == "wc-runtime-state"


def _tamper(data: dict[str, str], key: str, change) -> dict[str, str]:
    doc = json.loads(data[key])
    change(doc)
    return {key: json.dumps(doc)}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.update(version=2), "assignment.json: version: unsupported version 2"),
        (lambda d: d.pop("version"), "assignment.json: version: unsupported version None"),
        (lambda d: d.update(generation=0), "assignment.json: generation: must be at least 1"),
        (lambda d: d.update(generation="3"), "assignment.json: generation: must be a non-negative integer"),
        (lambda d: d["tasks"]["0_0"].update(active=""), "assignment.json: tasks.0_0.active: must be a non-empty"),
        (
            lambda d: d["tasks"]["0_0"].update(standbys=[d["tasks"]["0_0"]["active"]]),
            "assignment.json: tasks.0_0: names an executor twice",
        ),
        (
            lambda d: d["tasks"]["0_0"].update(warmups=["9"]),
            "assignment.json: tasks.0_0: names executors missing from `executors`",
        ),
        (lambda d: d.update(tasks=[]), "assignment.json: tasks: must be an object"),
    ],
)
def test_bad_assignment_documents_are_rejected_naming_the_field(change, expected):
    with pytest.raises(ChannelError) as err:
        decode_assignment(_tamper(encode_assignment(message()), ASSIGNMENT_KEY, change))
    assert str(err.value).startswith(expected)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d.update(version=99), "state.json: version: unsupported version 99"),
        (
            lambda d: d["executors"]["1"]["stores"]["0_0"].update(counts=-1),
            "state.json: executors.1.stores.0_0.counts: must be a non-negative integer",
        ),
        (
            lambda d: d["tasks"]["0_0"]["changelogEndOffsets"].update(counts=1.5),
            "state.json: tasks.0_0.changelogEndOffsets.counts: must be a non-negative integer",
        ),
        (lambda d: d["restores"][0].update(role="leader"), "state.json: restores[0].role: 'leader' is not one of"),
        (lambda d: d.pop("tasks"), "state.json: tasks: must be an object"),
        (lambda d: d.update(updatedAt=5), "state.json: updatedAt: must be a non-empty string"),
        (lambda d: d["load"]["1"].update(records=-3), "state.json: load.1.records: must be a non-negative integer"),
        (lambda d: d["load"]["1"].update(busyS="1s"), "state.json: load.1.busyS: must be a non-negative number"),
        (lambda d: d.update(load=[]), "state.json: load: must be an object"),
    ],
)
def test_bad_runtime_state_documents_are_rejected_naming_the_field(change, expected):
    with pytest.raises(ChannelError) as err:
        decode_runtime_state(_tamper(encode_runtime_state(runtime_state()), RUNTIME_STATE_KEY, change))
    assert str(err.value).startswith(expected)


def test_the_executors_load_is_encoded_per_executor_with_when_counting_started():
    doc = json.loads(encode_runtime_state(runtime_state())[RUNTIME_STATE_KEY])
    assert doc["load"] == {"1": {"records": 1200, "busyS": 0.75, "perRoundS": 0.5},
                           "2": {"records": 0, "busyS": 0.0, "perRoundS": 0.0}}
    assert doc["loadSince"] == "2025-01-01T00:00:00+00:00"


def test_a_runtime_state_without_load_from_an_older_driver_reads_as_no_load():
    def older(d):
        del d["load"], d["loadSince"]

    back = decode_runtime_state(_tamper(encode_runtime_state(runtime_state()), RUNTIME_STATE_KEY, older))
    assert back.load == {} and back.load_since is None
    assert back.executors == runtime_state().executors and back.batch_id == 17


def test_a_load_entry_missing_a_counter_reads_it_as_zero():
    data = _tamper(encode_runtime_state(runtime_state()), RUNTIME_STATE_KEY,
                   lambda d: d["load"].update({"3": {"records": 5}}))
    assert decode_runtime_state(data).load["3"] == ExecutorLoad(records=5, busy_s=0.0)


def test_missing_or_garbled_documents_are_rejected():
    with pytest.raises(ChannelError, match="state.json: missing"):
        decode_runtime_state({})
    with pytest.raises(ChannelError, match="assignment.json: not valid JSON"):
        decode_assignment({ASSIGNMENT_KEY: "{"})


def test_unknown_fields_within_a_version_are_ignored_for_forward_compatibility():
    data = _tamper(encode_runtime_state(runtime_state()), RUNTIME_STATE_KEY, lambda d: d.update(newField=1))
    assert decode_runtime_state(data) == runtime_state()


def test_a_hand_written_assignment_without_executors_is_accepted():
    doc = {
        "version": 1,
        "app": "wc",
        "generation": 2,
        "issuedAt": "now",
        "tasks": {"0_0": {"active": "7", "standbys": ["8"]}},
    }
    m = decode_assignment({ASSIGNMENT_KEY: json.dumps(doc)})
    assert m.assignment == Assignment(2, MappingProxyType({"0_0": TaskAssignment("7", ("8",), ())}))


def test_live_settings_round_trip_and_apply_to_a_spec() -> None:
    from eddy_contract.channel import LiveSettings, decode_live_settings, encode_live_settings
    from eddy_contract.spec import BadRecordPolicy, StreamAppSpec
    from tests.operator.manifests import minimal

    spec = StreamAppSpec.from_manifest(minimal())
    live = LiveSettings(2.5, BadRecordPolicy.DEAD_LETTER, "wordcount-dlq", 42)
    assert decode_live_settings(encode_live_settings(live)) == live
    assert decode_live_settings({}) is None
    changed = live.applied_to(spec)
    assert LiveSettings.of(changed) == live
    assert (changed.image, changed.pipeline) == (spec.image, spec.pipeline)


def test_an_assignment_keeps_the_hosts_of_its_executors() -> None:
    message = AssignmentMessage("wc", Assignment(1, MappingProxyType({"0_0": TaskAssignment("1", ("2",))})),
                                EXECUTORS[:2], "2025-01-01T00:00:00.000Z", hosts={"1": "10.0.0.7"})
    assert decode_assignment(encode_assignment(message)).hosts == {"1": "10.0.0.7"}


def test_unusable_live_settings_are_refused_with_the_field() -> None:
    from eddy_contract.channel import SETTINGS_KEY, decode_live_settings

    doc = {"version": 1, "triggerIntervalS": 0, "badRecordPolicy": "skip", "acceptableRecoveryLag": 1}
    with pytest.raises(ChannelError, match="triggerIntervalS"):
        decode_live_settings({SETTINGS_KEY: json.dumps(doc)})
    with pytest.raises(ChannelError, match="badRecordPolicy"):
        decode_live_settings({SETTINGS_KEY: json.dumps({**doc, "triggerIntervalS": 1, "badRecordPolicy": "x"})})
