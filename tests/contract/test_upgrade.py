"""The upgrade gate's decisions under each upgrade mode, and which spec changes apply in place
(eddy_contract.upgrade)."""

from __future__ import annotations

import pytest

from eddy_contract import crd
from eddy_contract.topology import RepartitionTopicDescription, StoreKind, SubTopologyDescription, TopologyDescription
from eddy_contract.topology_compare import compare
from eddy_contract.upgrade import (
    IN_PLACE_FIELDS,
    ChangeEffect,
    ResetOffsets,
    UpgradeMode,
    classify_spec_change,
    decide,
)
from tests.contract.test_topology import APP, REPARTITION, store, word_count
from tests.operator.manifests import minimal

pytestmark = pytest.mark.unit

SERDE_CHANGED = word_count(counts=store("counts", value="json"))


def two_counts(counts_value: str = "int64") -> TopologyDescription:
    """text re-keyed twice: by word into `counts`, by length into `lengths`; and a separate
    stream of clicks counted into `clicks`."""
    by_length = f"{APP}-lengths-repartition"
    return TopologyDescription(APP, (
        SubTopologyDescription(0, ("text",), 4, (), (REPARTITION, by_length)),
        SubTopologyDescription(1, (REPARTITION,), 4, (store("counts", value=counts_value),), ("word-counts",)),
        SubTopologyDescription(2, (by_length,), 4, (store("lengths"),), ("length-counts",)),
        SubTopologyDescription(3, ("clicks",), 2, (store("clicks"),), ("click-counts",)),
    ), (RepartitionTopicDescription(REPARTITION, 4), RepartitionTopicDescription(by_length, 4)),
        ("word-counts", "length-counts", "click-counts"))


def test_keep_state_refuses_a_breaking_change_naming_the_store():
    decision = decide(compare(word_count(), SERDE_CHANGED), UpgradeMode.KEEP_STATE, SERDE_CHANGED)
    assert not decision.allowed
    assert decision.reasons == ("store 'counts': value serde int64 -> json",)
    assert decision.reset_subtopologies == () and decision.reset_stores == () and decision.input_positions == {}
    assert decision.message == "refused under upgrade mode keepState: store 'counts': value serde int64 -> json"


def test_keep_state_allows_a_compatible_change_with_its_notes():
    proposed = word_count(outputs=("word-counts", "copy"))
    decision = decide(compare(word_count(), proposed), UpgradeMode.KEEP_STATE, proposed)
    assert decision.allowed and decision.reasons == ()
    assert decision.notes == ("output topic 'copy' is new",)
    assert decision.message == "the new topology keeps every store"


def test_reset_changed_state_from_earliest_rebuilds_the_changed_store_from_the_beginning_of_what_feeds_it():
    decision = decide(compare(word_count(), SERDE_CHANGED), UpgradeMode.RESET_CHANGED_STATE, SERDE_CHANGED)
    assert decision.allowed
    assert decision.reset_subtopologies == (1,) and decision.reset_stores == ("counts",)
    # its input is a repartition topic: the sub-topology writing it reads its own input again
    assert decision.input_positions == {"text": ResetOffsets.EARLIEST}
    assert decision.message.startswith("allowed under upgrade mode resetChangedState, resetting state: store 'counts'")
    assert any("'word-counts' get their records again" in n for n in decision.notes)


def test_reset_changed_state_from_earliest_resets_what_the_replay_reaches_and_keeps_the_rest():
    proposed = two_counts(counts_value="json")
    decision = decide(compare(two_counts(), proposed), UpgradeMode.RESET_CHANGED_STATE, proposed)
    # `lengths` is fed by the same replay of `text`: kept, it would count every word twice
    assert decision.reset_subtopologies == (1, 2)
    assert decision.reset_stores == ("counts", "lengths")
    assert decision.input_positions == {"text": ResetOffsets.EARLIEST}  # clicks are kept, and so is their position


def test_reset_changed_state_from_latest_resets_only_the_changed_sub_topology_from_the_end_of_its_input():
    proposed = two_counts(counts_value="json")
    decision = decide(compare(two_counts(), proposed), UpgradeMode.RESET_CHANGED_STATE, proposed, ResetOffsets.LATEST)
    assert decision.reset_subtopologies == (1,) and decision.reset_stores == ("counts",)
    assert decision.input_positions == {REPARTITION: ResetOffsets.LATEST}


def test_a_reset_table_is_read_from_the_beginning_of_its_topic_even_from_latest():
    def joined(value_serde: str) -> TopologyDescription:
        users = store("users", StoreKind.TABLE, "bytes", value_serde, input_topic="users")
        return TopologyDescription(APP, (SubTopologyDescription(0, ("clicks", "users"), 4, (users,), ("out",)),),
                                   (), ("out",))

    proposed = joined("json")
    decision = decide(compare(joined("bytes"), proposed), UpgradeMode.RESET_CHANGED_STATE, proposed,
                      ResetOffsets.LATEST)
    assert decision.input_positions == {"clicks": ResetOffsets.LATEST, "users": ResetOffsets.EARLIEST}


def test_reset_changed_state_drops_a_removed_store_and_resets_nothing_else():
    running = word_count(extra=(SubTopologyDescription(2, ("clicks",), 2, (store("clicks"),), ("click-counts",)),))
    proposed = word_count()
    decision = decide(compare(running, proposed), UpgradeMode.RESET_CHANGED_STATE, proposed)
    assert decision.allowed
    assert decision.reset_stores == ("clicks",) and decision.reset_subtopologies == ()
    assert decision.input_positions == {}


def test_reset_changed_state_rebuilds_a_renamed_store_with_its_sub_topology():
    proposed = word_count(counts=store("word-counts"))
    decision = decide(compare(word_count(), proposed), UpgradeMode.RESET_CHANGED_STATE, proposed)
    assert decision.allowed and decision.reset_subtopologies == (1,)
    assert decision.reset_stores == ("counts", "word-counts")


def test_stateless_starts_every_store_empty_and_moves_no_position():
    decision = decide(compare(word_count(), SERDE_CHANGED), UpgradeMode.STATELESS, SERDE_CHANGED)
    assert decision.allowed
    assert decision.reset_subtopologies == (1,) and decision.reset_stores == ("counts",)
    assert decision.input_positions == {}


@pytest.mark.parametrize("mode", list(UpgradeMode))
def test_an_unchanged_topology_is_allowed_under_every_mode_without_a_reset_unless_stateless(mode):
    decision = decide(compare(word_count(), word_count()), mode, word_count())
    assert decision.allowed and decision.reasons == ()
    assert decision.reset_subtopologies == ((1,) if mode is UpgradeMode.STATELESS else ())


# -- spec changes ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("change", "field"), [
    (lambda s: s.update(executors={"replicas": 5}), "spec.executors.replicas"),
    (lambda s: s.update(state={"standbyReplicas": 0}), "spec.state.standbyReplicas"),
    (lambda s: s.update(state={"acceptableRecoveryLag": 1}), "spec.state.acceptableRecoveryLag"),
    (lambda s: s.update(state={"maxWarmupReplicas": 4}), "spec.state.maxWarmupReplicas"),
    (lambda s: s.update(triggerInterval="250ms"), "spec.triggerInterval"),
    (lambda s: s.update(badRecordPolicy="skip"), "spec.badRecordPolicy"),
    (lambda s: s.update(upgrade={"mode": "resetChangedState"}), "spec.upgrade.mode"),
])
def test_placement_commit_interval_and_bad_record_changes_apply_in_place(change, field):
    new = minimal()
    change(new["spec"])
    (changed,) = classify_spec_change(minimal(), new).changes
    assert changed.field == field and changed.effect is ChangeEffect.IN_PLACE
    assert not classify_spec_change(minimal(), new).needs_new_pods


@pytest.mark.parametrize(("change", "field"), [
    (lambda s: s.update(image="eddy:0.2.0"), "spec.image"),
    (lambda s: s["pipeline"].update(function="build_own_steps"), "spec.pipeline.function"),
    (lambda s: s["pipeline"].update(args={"output_topic": "x"}), "spec.pipeline.args.output_topic"),
    (lambda s: s.update(executors={"memory": "2Gi"}), "spec.executors.memory"),
    (lambda s: s.update(sparkConf={"spark.sql.shuffle.partitions": "8"}),
     "spec.sparkConf.spark.sql.shuffle.partitions"),
    (lambda s: s["kafka"].update(bootstrapServers="other:9092"), "spec.kafka.bootstrapServers"),
    (lambda s: s.update(state={"size": "2Gi"}), "spec.state.size"),
    (lambda s: s.update(processingGuarantee="at_least_once"), "spec.processingGuarantee"),
    (lambda s: s.update(metricsPort=9200), "spec.metricsPort"),
])
def test_image_pipeline_resources_and_kafka_changes_need_new_pods(change, field):
    new = minimal()
    change(new["spec"])
    change_ = classify_spec_change(minimal(), new)
    assert [(c.field, c.effect) for c in change_.changes] == [(field, ChangeEffect.NEW_PODS)]
    assert change_.needs_new_pods


def test_a_field_set_to_its_default_is_no_change():
    assert classify_spec_change(minimal(), minimal(triggerInterval="1s", executors={"replicas": 2})).changes == ()


def test_a_spec_change_lists_each_field_with_its_old_and_new_value():
    new = minimal(image="eddy:0.2.0", state={"standbyReplicas": 0})
    change = classify_spec_change(minimal(), new)
    assert [(c.field, c.old, c.new) for c in change.in_place] == [("spec.state.standbyReplicas", 1, 0)]
    assert [(c.field, c.old, c.new) for c in change.new_pods] == [("spec.image", "eddy:0.1.0", "eddy:0.2.0")]


def test_every_in_place_field_is_a_field_of_the_crd():
    for path in IN_PLACE_FIELDS:
        node = crd.openapi_schema()
        for name in path.split("."):
            node = node["properties"][name]
        assert node["type"], path
