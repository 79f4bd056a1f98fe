"""The compatibility rules of the upgrade gate: which differences between the running topology
and the next one break the running state, and which are only said (eddy_contract.topology)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from eddy_contract.topology import (
    TOPOLOGY_KEY,
    RepartitionTopicDescription,
    StoreDescription,
    StoreKind,
    SubTopologyDescription,
    TopologyDescription,
    TopologyFormatError,
)
from eddy_contract.topology_compare import Difference, DifferenceKind, compare

pytestmark = pytest.mark.unit

APP = "wc"
REPARTITION = f"{APP}-words-repartition"


def store(name: str, kind: StoreKind = StoreKind.KEY_VALUE, key: str = "string", value: str = "int64",
          **extra: object) -> StoreDescription:
    return StoreDescription(name, kind, key, value, f"{APP}-{name}-changelog", **extra)  # type: ignore[arg-type]


def word_count(*, counts: StoreDescription | None = None, partitions: int = 4, repartition_partitions: int = 4,
               outputs: tuple[str, ...] = ("word-counts",), extra: tuple[SubTopologyDescription, ...] = ()
               ) -> TopologyDescription:
    """text -> (words) -> repartition -> count into `counts` -> word-counts."""
    return TopologyDescription(
        APP,
        (
            SubTopologyDescription(0, ("text",), partitions, (), (REPARTITION,)),
            SubTopologyDescription(1, (REPARTITION,), repartition_partitions,
                                   (counts or store("counts"),), outputs),
            *extra,
        ),
        (RepartitionTopicDescription(REPARTITION, repartition_partitions),),
        outputs,
    )


def kinds(differences: tuple[Difference, ...]) -> list[DifferenceKind]:
    return [d.kind for d in differences]


def only_breaking(running: TopologyDescription, proposed: TopologyDescription) -> Difference:
    (difference,) = [d for d in compare(running, proposed) if d.breaking]
    return difference


# -- the description as JSON ---------------------------------------------------------------------


def test_a_description_reads_back_from_its_json():
    d = word_count(counts=store("counts", StoreKind.WINDOW, window_size_ms=60_000, advance_ms=60_000,
                                grace_ms=5_000, retention_ms=65_000, generated=True))
    assert TopologyDescription.from_json(d.to_json()) == d


def test_the_json_is_stable_sorted_and_camel_cased():
    one = TopologyDescription(APP, (
        SubTopologyDescription(1, ("b",), 2, (store("z"), store("a")), ("out-2", "out-1")),
        SubTopologyDescription(0, ("a",), 2, (), ("out-1",)),
    ), (), ("out-2", "out-1"))
    other = TopologyDescription(APP, tuple(reversed(one.subtopologies)), (), ("out-1", "out-2"))
    assert one.to_json() == other.to_json()
    doc = json.loads(one.to_json())
    assert doc["format"] == 1 and doc["applicationId"] == APP
    assert [s["id"] for s in doc["subtopologies"]] == [0, 1]
    assert doc["subtopologies"][1]["stores"][0] == {
        "name": "a", "kind": "keyValue", "keySerde": "string", "valueSerde": "int64",
        "changelogTopic": "wc-a-changelog", "generated": False,
    }
    assert doc["subtopologies"][1]["stateful"] is True and doc["subtopologies"][1]["sinkTopics"] == ["out-1", "out-2"]
    assert doc["outputTopics"] == ["out-1", "out-2"]
    assert TOPOLOGY_KEY == "topology.json"


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d["subtopologies"][1].pop("partitions"), "(description).subtopologies[1].partitions"),
    (lambda d: d["subtopologies"][1]["stores"][0].update(kind="heap"), "(description).subtopologies[1].stores[0].kind"),
    (lambda d: d.update(format=2), "(description).format"),
    (lambda d: d["repartitionTopics"][0].update(partitions="4"), "(description).repartitionTopics[0].partitions"),
])
def test_a_description_that_cannot_be_read_names_the_field(change, field):
    doc = json.loads(word_count().to_json())
    change(doc)
    with pytest.raises(TopologyFormatError) as err:
        TopologyDescription.from_json(json.dumps(doc))
    assert str(err.value).startswith(field + ": ")


# -- compatible changes ---------------------------------------------------------------------------


def test_the_same_topology_has_no_difference():
    assert compare(word_count(), word_count()) == ()


def test_a_sink_added_is_compatible():
    differences = compare(word_count(), word_count(outputs=("word-counts", "word-counts-copy")))
    assert kinds(differences) == [DifferenceKind.OUTPUT_TOPIC_ADDED]
    assert not differences[0].breaking
    assert differences[0].message == "output topic 'word-counts-copy' is new"


def test_a_stateless_sub_topology_added_is_compatible():
    audit = SubTopologyDescription(2, ("audit",), 3, (), ("audit-copy",))
    differences = compare(word_count(), word_count(extra=(audit,)))
    assert not any(d.breaking for d in differences)
    assert DifferenceKind.SUBTOPOLOGY_ADDED in kinds(differences)


def test_a_new_sub_topology_with_new_stores_is_a_note_that_they_start_empty():
    clicks = SubTopologyDescription(2, ("clicks",), 3, (store("clicks-per-user"),), ("click-counts",))
    differences = compare(word_count(), word_count(extra=(clicks,)))
    assert not any(d.breaking for d in differences)
    (added,) = [d for d in differences if d.kind is DifferenceKind.SUBTOPOLOGY_ADDED]
    assert added.message == "sub-topology 2 reading 'clicks' is new: its stores 'clicks-per-user' start empty"


def test_a_store_added_to_a_running_sub_topology_starts_empty():
    running = word_count(counts=store("counts", StoreKind.WINDOW, window_size_ms=60_000, retention_ms=60_000))
    sub = running.subtopologies[1]
    buffer = store("counts-suppress", StoreKind.SUPPRESS_BUFFER, "bytes", "bytes")
    proposed = replace(running, subtopologies=(running.subtopologies[0], replace(sub, stores=(*sub.stores, buffer))))
    (difference,) = compare(running, proposed)
    assert difference.kind is DifferenceKind.STORE_ADDED and not difference.breaking
    assert "starts empty" in difference.message


def test_more_tasks_for_a_stateless_sub_topology_is_compatible():
    running, proposed = word_count(partitions=4), word_count(partitions=8)
    assert kinds(compare(running, proposed)) == [DifferenceKind.TASKS_CHANGED]


def test_a_renumbered_sub_topology_keeps_its_stores():
    running = word_count()
    first = SubTopologyDescription(0, ("audit",), 3, (), ("audit-copy",))
    proposed = replace(running, subtopologies=(
        first, *(replace(s, id=s.id + 1) for s in running.subtopologies)))
    differences = compare(running, proposed)
    assert not any(d.breaking for d in differences)
    assert DifferenceKind.SUBTOPOLOGY_RENUMBERED in kinds(differences)


# -- breaking changes -----------------------------------------------------------------------------


@pytest.mark.parametrize(("counts", "kind", "message"), [
    (store("counts", value="json"), DifferenceKind.VALUE_SERDE_CHANGED, "store 'counts': value serde int64 -> json"),
    (store("counts", key="json"), DifferenceKind.KEY_SERDE_CHANGED, "store 'counts': key serde string -> json"),
    (store("counts", StoreKind.SESSION, gap_ms=60_000, retention_ms=60_000), DifferenceKind.STORE_KIND_CHANGED,
     "store 'counts': kind keyValue -> session"),
])
def test_a_stores_kind_or_serdes_changed_breaks_it(counts, kind, message):
    difference = (
        [d for d in compare(word_count(), word_count(counts=counts)) if d.kind is kind][0])
    assert difference.breaking and difference.message == message
    assert difference.subject == "counts" and difference.subtopology == 1


@pytest.mark.parametrize(("field", "old", "new", "message"), [
    ("window_size_ms", 60_000, 120_000, "store 'counts': window size 1m -> 2m"),
    ("advance_ms", 60_000, 30_000, "store 'counts': window advance 1m -> 30s"),
    ("grace_ms", 5_000, 0, "store 'counts': grace 5s -> 0ms"),
    ("retention_ms", 65_000, 3_600_000, "store 'counts': retention 65s -> 1h"),
])
def test_a_stores_windows_changed_break_it(field, old, new, message):
    windows = {"window_size_ms": 60_000, "advance_ms": 60_000, "grace_ms": 5_000, "retention_ms": 65_000}
    running = word_count(counts=store("counts", StoreKind.WINDOW, **windows))
    proposed = word_count(counts=store("counts", StoreKind.WINDOW, **{**windows, field: new}))
    difference = only_breaking(running, proposed)
    assert difference.kind is DifferenceKind.WINDOW_CHANGED and difference.message == message


def test_a_store_removed_is_breaking():
    proposed = word_count(counts=store("totals"))
    differences = compare(word_count(), proposed)
    removed = only_breaking(word_count(), proposed)
    assert removed.kind is DifferenceKind.STORE_REMOVED and removed.subject == "counts"
    assert removed.subtopology == 1  # resetting the sub-topology that goes on rebuilds the renamed store
    assert "give it its old name" in removed.message
    assert [d.subject for d in differences if d.kind is DifferenceKind.STORE_ADDED] == ["totals"]


def test_more_partitions_for_a_sub_topology_with_state_is_breaking():
    differences = compare(word_count(), word_count(repartition_partitions=8))
    assert {d.kind for d in differences if d.breaking} == {
        DifferenceKind.PARTITIONS_CHANGED, DifferenceKind.REPARTITION_PARTITIONS_CHANGED}
    (partitions,) = [d for d in differences if d.kind is DifferenceKind.PARTITIONS_CHANGED]
    assert partitions.message == ("store 'counts': the sub-topology reading 'wc-words-repartition' goes from 4 to 8 "
                                  "partitions (the store's keys are spread over its tasks by partition)")


def test_a_store_moved_to_another_sub_topology_is_breaking():
    running = word_count()
    proposed = replace(running, subtopologies=(
        SubTopologyDescription(0, ("text",), 4, (store("counts"),), ("word-counts",)),
        SubTopologyDescription(1, (REPARTITION,), 4, (), ("word-counts",))))
    moved = only_breaking(running, proposed)
    assert moved.kind is DifferenceKind.STORE_MOVED and moved.subtopology == 0
    assert "from the sub-topology reading 'wc-words-repartition' to the one reading 'text'" in moved.message


def test_a_table_store_reading_another_topic_is_breaking():
    def joined(table_topic: str) -> TopologyDescription:
        users = store("users", StoreKind.TABLE, "bytes", "bytes", input_topic=table_topic)
        return TopologyDescription(APP, (SubTopologyDescription(0, ("clicks", table_topic), 4, (users,), ("out",)),),
                                   (), ("out",))

    difference = only_breaking(joined("users"), joined("users-v2"))
    assert difference.kind is DifferenceKind.STORE_INPUT_CHANGED
    assert difference.message == "store 'users': holds topic 'users-v2' instead of 'users'"


# -- generated names that shift -------------------------------------------------------------------


def counts_of(*topics: str) -> TopologyDescription:
    """One generated count per topic, numbered in order (as `Topology` names them)."""
    subs = tuple(SubTopologyDescription(i, (t,), 2, (store(f"count-{i}", generated=True),), (f"{t}-counts",))
                 for i, t in enumerate(topics))
    return TopologyDescription(APP, subs, (), tuple(f"{t}-counts" for t in topics))


def test_a_generated_store_name_that_shifts_is_refused_with_how_to_name_it():
    running, proposed = counts_of("a", "b"), counts_of("new", "a", "b")
    breaking = [d for d in compare(running, proposed) if d.breaking]
    assert [(d.kind, d.subject, d.subtopology) for d in breaking] == [
        (DifferenceKind.STORE_RENAMED, "count-0", 1), (DifferenceKind.STORE_RENAMED, "count-1", 2),
        # the new count took the first number: it would start from the running count-0's state
        (DifferenceKind.STORE_NAME_REUSED, "count-0", 0)]
    assert breaking[0].message == (
        "store 'count-0' would be renamed to 'count-1' by the new topology (a step before it was inserted or "
        "removed), and start empty; name it: .count(name=\"...\")")


def test_a_generated_name_left_to_another_step_when_one_before_it_goes_is_refused():
    running, proposed = counts_of("a", "b"), counts_of("b")
    breaking = [(d.kind, d.subject) for d in compare(running, proposed) if d.breaking]
    assert breaking == [(DifferenceKind.STORE_RENAMED, "count-1"), (DifferenceKind.STORE_NAME_REUSED, "count-0")]


def test_a_generated_name_that_stays_put_is_no_difference():
    assert [d.kind for d in compare(counts_of("a", "b"), counts_of("a", "b", "c")) if d.breaking] == []


def test_a_generated_repartition_topic_that_shifts_is_refused_with_how_to_name_it():
    def grouped(first: str) -> TopologyDescription:
        topic = f"{APP}-{first}-repartition"
        return TopologyDescription(APP, (
            SubTopologyDescription(0, ("text",), 2, (), (topic,)),
            SubTopologyDescription(1, (topic,), 2, (store("counts"),), ("out",)),
        ), (RepartitionTopicDescription(topic, 2, generated=True),), ("out",))

    differences = compare(grouped("group-by-0"), grouped("group-by-1"))
    assert [(d.kind, d.subject) for d in differences] == [
        (DifferenceKind.REPARTITION_TOPIC_RENAMED, "wc-group-by-0-repartition")]
    assert differences[0].message.endswith('name it: .group_by(key, name="...")')
