"""Compiled pipelines described for the upgrade gate (dsl/describe.py), and the gate's rules on
real pipelines: a step inserted before an unnamed store is caught, a named one stays put."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from eddy_contract.topology import StoreKind, TopologyDescription
from eddy_contract.topology_compare import DifferenceKind, compare
from eddy_runtime.cli import main
from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.describe import describe
from eddy_runtime.dsl.pipeline import Topology, is_generated_name, session_windows, tumbling, until_window_closes
from examples.enrichment.app import build as enrichment
from examples.orders.app import build as orders
from examples.wordcount.app import build_own_steps as word_count
from tests.operator.manifests import minimal
from tests.runtime.pipelines import clicks_with_city, first_seen

pytestmark = pytest.mark.unit


def described(build: Callable[[Topology], object], partitions: dict[str, int], app: str = "app"
              ) -> TopologyDescription:
    topology = Topology()
    build(topology)
    return describe(compile_topology(topology, app, partitions))


def test_the_word_count_is_two_sub_topologies_and_the_counts_store():
    d = described(word_count, {"wordcount-input": 4}, app="wordcount")
    first, second = d.subtopologies
    assert (first.source_topics, first.partitions, first.stateful) == (("wordcount-input",), 4, False)
    assert first.sink_topics == ("wordcount-words-repartition",)
    assert (second.source_topics, second.stateful) == (("wordcount-words-repartition",), True)
    (counts,) = second.stores
    assert (counts.name, counts.kind, counts.key_serde, counts.value_serde) == (
        "counts", StoreKind.KEY_VALUE, "string", "int64")
    assert counts.changelog_topic == "wordcount-counts-changelog" and not counts.generated
    assert [(t.name, t.partitions, t.generated) for t in d.repartition_topics] == [
        ("wordcount-words-repartition", 4, False)]
    assert d.output_topics == ("wordcount-output",)


def test_a_description_reads_back_from_its_json():
    d = described(word_count, {"wordcount-input": 4})
    assert TopologyDescription.from_json(d.to_json()) == d
    assert json.loads(d.to_json())["subtopologies"][1]["stores"][0]["name"] == "counts"


def test_windows_sessions_and_suppression_are_described_with_their_sizes():
    def build(t: Topology) -> None:
        t.stream("clicks").group_by_key().windowed_by(tumbling("1m", grace="5s")).count(name="per-minute") \
            .suppress(until_window_closes()).to("final")
        t.stream("views").group_by_key().windowed_by(session_windows("30s", grace="10s")).count(name="sessions") \
            .to("sessions-out")

    d = described(build, {"clicks": 2, "views": 2})
    by_name = {s.name: s for _, s in d.stores()}
    minute = by_name["per-minute"]
    assert (minute.kind, minute.window_size_ms, minute.advance_ms, minute.grace_ms, minute.retention_ms) == (
        StoreKind.WINDOW, 60_000, 60_000, 5_000, 65_000)
    assert by_name["per-minute-suppress"].kind is StoreKind.SUPPRESS_BUFFER
    sessions = by_name["sessions"]
    assert (sessions.kind, sessions.gap_ms, sessions.grace_ms, sessions.retention_ms) == (
        StoreKind.SESSION, 30_000, 10_000, 40_000)


def test_joins_describe_their_tables_and_join_windows():
    tables = described(lambda t: enrichment(t), {"customers": 3, "addresses": 3})
    assert {(s.name, s.kind, s.input_topic) for _, s in tables.stores()} == {
        ("customers", StoreKind.TABLE, "customers"), ("addresses", StoreKind.TABLE, "addresses")}
    stream_table = described(lambda t: clicks_with_city(t, "clicks", "users", "out"), {"clicks": 2, "users": 2})
    (sub,) = stream_table.subtopologies
    assert sub.source_topics == ("clicks", "users")
    assert [(s.name, s.kind, s.input_topic) for s in sub.stores] == [("users", StoreKind.TABLE, "users")]
    windowed = described(lambda t: orders(t, how="left"), {"orders": 2, "payments": 2})
    assert {(s.name, s.kind, s.input_topic, s.window_size_ms, s.grace_ms) for _, s in windowed.stores()} == {
        ("paid-this", StoreKind.JOIN_WINDOW, None, 1_200_000, 60_000),
        ("paid-other", StoreKind.JOIN_WINDOW, "payments", 1_200_000, 60_000),
        ("paid-outer", StoreKind.JOIN_BUFFER, None, None, None),
    }


def test_a_process_step_has_its_stores_and_its_time_store():
    d = described(lambda t: first_seen(t, "in", "out"), {"in": 2})
    kinds = {s.name: s.kind for _, s in d.stores()}
    assert StoreKind.PROCESSOR in kinds.values()
    assert [n for n, k in kinds.items() if k is StoreKind.PROCESSOR_TIME] == [
        n for n in kinds if n.endswith("-time")]


def test_names_the_pipeline_made_are_marked_generated():
    def build(t: Topology) -> None:
        t.stream("text").group_by(lambda k, v: v).count().to("out")

    d = described(build, {"text": 2})
    assert [(t.name, t.generated) for t in d.repartition_topics] == [("app-group-by-0-repartition", True)]
    assert [(s.name, s.generated) for _, s in d.stores()] == [("count-1", True)]
    assert is_generated_name("count-1-suppress") and is_generated_name("join-3-outer")
    assert not is_generated_name("counts") and not is_generated_name("counts-suppress")


# -- the gate on real pipelines -------------------------------------------------------------------


def unnamed_counts(t: Topology) -> None:
    t.stream("text").flat_map_values(str.split).group_by(lambda k, word: word).count().to("word-counts")


def audit_first_then_unnamed_counts(t: Topology) -> None:
    t.stream("audit").group_by_key().count().to("audit-counts")  # inserted before: takes the first number
    unnamed_counts(t)


def test_a_step_inserted_before_an_unnamed_store_is_refused_with_how_to_name_it():
    partitions = {"text": 2, "audit": 2}
    differences = compare(described(unnamed_counts, partitions), described(audit_first_then_unnamed_counts, partitions))
    breaking = {(d.kind, d.subject): d.message for d in differences if d.breaking}
    assert set(breaking) == {(DifferenceKind.STORE_RENAMED, "count-1"),
                             (DifferenceKind.REPARTITION_TOPIC_RENAMED, "app-group-by-0-repartition")}
    assert breaking[(DifferenceKind.STORE_RENAMED, "count-1")] == (
        "store 'count-1' would be renamed to 'count-2' by the new topology (a step before it was inserted or "
        "removed), and start empty; name it: .count(name=\"...\")")


def test_the_same_insertion_before_named_steps_changes_no_store():
    def named(t: Topology) -> None:
        t.stream("text").flat_map_values(str.split).group_by(lambda k, w: w, name="words").count(name="counts") \
            .to("word-counts")

    def audit_first(t: Topology) -> None:
        t.stream("audit").group_by_key().count(name="audits").to("audit-counts")
        named(t)

    differences = compare(described(named, {"text": 2}), described(audit_first, {"text": 2, "audit": 2}))
    assert not any(d.breaking for d in differences)
    assert {d.kind for d in differences} >= {DifferenceKind.SUBTOPOLOGY_ADDED, DifferenceKind.OUTPUT_TOPIC_ADDED}


def test_a_stateless_step_added_is_no_difference_and_a_sink_added_is_compatible():
    def filtered(t: Topology) -> None:
        words = t.stream("text").flat_map_values(str.split).filter(lambda k, w: len(w) > 2)
        words.group_by(lambda k, word: word).count().to("word-counts")

    def with_copy(t: Topology) -> None:
        words = t.stream("text").flat_map_values(str.split)
        words.to("words-copy")
        words.group_by(lambda k, word: word).count().to("word-counts")

    running = described(unnamed_counts, {"text": 2})
    assert compare(running, described(filtered, {"text": 2})) == ()
    assert [d.kind for d in compare(running, described(with_copy, {"text": 2}))] == [
        DifferenceKind.OUTPUT_TOPIC_ADDED]


def test_a_changed_serde_is_refused_naming_the_store():
    def json_counts(t: Topology) -> None:
        t.stream("text").flat_map_values(str.split).group_by(lambda k, word: word) \
            .reduce(lambda a, b: a, name="count-1", value_serde="json").to("word-counts")

    (difference,) = [d for d in compare(described(unnamed_counts, {"text": 2}), described(json_counts, {"text": 2}))
                     if d.breaking]
    assert difference.message == "store 'count-1': value serde int64 -> json"


# -- eddy describe and eddy diff (the dry run) ----------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


def manifest(tmp_path: Path, name: str, function: str, **spec: Any) -> Path:
    """A StreamApp running one of this module's pipelines."""
    body = minimal(**spec)
    body["spec"]["pipeline"] = {"module": "tests.runtime.test_describe", "function": function}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(body))
    return path


def eddy(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def running(tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> Path:
    """The running version: unnamed_counts on 2 partitions, described by `eddy describe`."""
    monkeypatch.chdir(REPO)
    code, out, _ = eddy(capsys, "describe", manifest(tmp_path, "v1", "unnamed_counts"), "--partitions", "text=2")
    assert code == 0
    path = tmp_path / "running.json"
    path.write_text(out)
    return path


def test_eddy_describe_prints_the_description_and_asks_for_unknown_partitions(tmp_path, capsys, running):
    assert TopologyDescription.from_json(running.read_text()) == described(unnamed_counts, {"text": 2}, "wordcount")
    code, _, err = eddy(capsys, "describe", manifest(tmp_path, "v1", "unnamed_counts"))
    assert code == 2 and "give --partitions text=N" in err


def test_eddy_diff_of_the_same_app_would_apply(tmp_path, capsys, running):
    code, out, _ = eddy(capsys, "diff", manifest(tmp_path, "v1", "unnamed_counts"), "--running", running)
    assert code == 0
    assert "topology (upgrade mode keepState):\n  unchanged" in out
    assert "verdict: would be applied" in out


def test_eddy_diff_refuses_a_step_inserted_before_an_unnamed_store(tmp_path, capsys, running):
    v2 = manifest(tmp_path, "v2", "audit_first_then_unnamed_counts")
    code, _, err = eddy(capsys, "diff", v2, "--running", running)
    assert code == 2 and "--partitions audit=N" in err  # a topic the running version does not read
    code, out, _ = eddy(capsys, "diff", v2, "--running", running, "--partitions", "audit=2")
    assert code == 1
    assert "  breaking  store 'count-1' would be renamed to 'count-2'" in out
    assert 'name it: .count(name="...")' in out
    assert "verdict: would be refused: refused under upgrade mode keepState" in out


def test_eddy_diff_under_reset_changed_state_says_what_starts_over(tmp_path, capsys, running):
    v2 = manifest(tmp_path, "v2", "audit_first_then_unnamed_counts", upgrade={"mode": "resetChangedState"})
    code, out, _ = eddy(capsys, "diff", v2, "--running", running, "--partitions", "audit=2")
    assert code == 0
    assert "verdict: would be applied: allowed under upgrade mode resetChangedState" in out
    assert "stores started over: count-1, count-2" in out
    assert "input positions of 'text' move to the earliest" in out


def test_eddy_diff_lists_the_spec_changes_in_place_and_those_that_need_new_pods(tmp_path, capsys, running):
    old = manifest(tmp_path, "old", "unnamed_counts")
    standbys = manifest(tmp_path, "standbys", "unnamed_counts", state={"standbyReplicas": 0})
    code, out, _ = eddy(capsys, "diff", standbys, "--running", running, "--running-manifest", old)
    assert code == 0
    assert "  in place  spec.state.standbyReplicas: 1 -> 0\n  (applied in place: no pod restarts)" in out
    image = manifest(tmp_path, "image", "unnamed_counts", image="eddy:0.2.0")
    code, out, _ = eddy(capsys, "diff", image, "--running", running, "--running-manifest", old)
    assert code == 0 and '  new pods  spec.image: "eddy:0.1.0" -> "eddy:0.2.0"' in out


def test_eddy_diff_prints_json_and_exits_1_on_a_refusal(tmp_path, running):
    v2 = manifest(tmp_path, "v2", "audit_first_then_unnamed_counts")
    done = subprocess.run([str(REPO / ".venv" / "bin" / "eddy"), "diff", str(v2), "--running", str(running),
                           "--partitions", "audit=2", "--json"], cwd=REPO, capture_output=True, text=True, check=False)
    assert done.returncode == 1, done.stderr
    out = json.loads(done.stdout)
    assert out["decision"]["allowed"] is False and out["specChanges"] is None
    assert {(d["kind"], d["subject"]) for d in out["differences"] if d["breaking"]} == {
        ("storeRenamed", "count-1"), ("repartitionTopicRenamed", "wordcount-group-by-0-repartition")}
