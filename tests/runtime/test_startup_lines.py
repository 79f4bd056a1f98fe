"""What `eddy run` prints at start for each sub-topology (pure: a compiled app in, lines out)."""

from __future__ import annotations

import pytest

from eddy_runtime.dsl.compiler import compile_topology
from eddy_runtime.dsl.pipeline import Topology
from eddy_runtime.local.run import subtopology_line
from examples.wordcount.app import build, build_own_steps

pytestmark = pytest.mark.unit


def lines(build_fn) -> list[str]:
    t = Topology()
    build_fn(t)
    return [subtopology_line(s) for s in compile_topology(t, "wc", {"wordcount-input": 2}).subtopologies]


def test_a_sub_topology_of_record_steps_lists_every_step_in_order():
    assert lines(build_own_steps) == [
        "sub-topology 0: wordcount-input -> flat_map_values(words_of) -> group_by(<lambda>) "
        "-> wc-words-repartition  [2 tasks]",
        "sub-topology 1: wc-words-repartition -> count (store counts) -> wordcount-output  [2 tasks]",
    ]


def test_a_dataframe_step_and_the_record_steps_over_a_stateful_steps_results_are_listed():
    def pipeline(t: Topology) -> None:
        counts = t.stream("wordcount-input", value_serde="string").filter(lambda k, v: v).group_by(
            lambda k, v: v, name="words").count(name="counts")
        counts.to_stream().map_values(str).to("wordcount-output")

    assert lines(build)[0] == "sub-topology 0: wordcount-input -> split_words -> wc-words-repartition  [2 tasks]"
    assert lines(pipeline)[1] == ("sub-topology 1: wc-words-repartition -> count (store counts) "
                                  "-> map_values(str) -> wordcount-output  [2 tasks]")
