"""The fault campaign's app (examples/chaos) compiles to what the verifier expects: a join in
sub-topology 0 writing the event and its region, a repartition hop by region, windowed counts in
sub-topology 1; and a join record as the runtime encodes it passes the verifier."""

from __future__ import annotations

import pyarrow as pa
import pytest

from bench.chaos_verify import Event, Record, verify
from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.pipeline import Topology
from eddy_runtime.kafka.records import encode_rows
from examples.chaos.app import build

pytestmark = pytest.mark.unit


def test_the_campaign_app_is_a_join_a_repartition_hop_and_windows() -> None:
    t = Topology()
    build(t, "ev", "us", "en", "wi")
    app = compile_topology(t, "c", {"ev": 4, "us": 4})
    join, windows = app.subtopologies
    assert join.input_topics == ("ev", "us") and join.stateful.kind == "join"
    assert [s.name for s in windows.stores] == ["region-windows"] and windows.stores[0].window_size_ms == 10_000
    assert list(app.repartition_topics) == ["c-by-region-repartition"]


def test_a_join_record_as_the_runtime_encodes_it_passes_the_verifier() -> None:
    event = Event(0, "u001", 5, 1_000)
    (value,) = encode_rows(pa.table({"value": [event.value().decode()], "table_value": ["r1"]}),
                          ["value", "table_value"])
    verdict = verify([event], {"u001": "r1"}, 1, [Record(0, 0, b"u001", value, 1_000)], [], 10_000)
    assert verdict.joined_wrong == verdict.joined_missing == verdict.joined_unexpected == 0, verdict.summary()
