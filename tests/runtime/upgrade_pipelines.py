"""Two versions of a word count (one word per record) for the upgrade tests (tests/runtime/test_state_reset.py):
the second keeps the store's name and changes its value serde, int64 -> json, which the upgrade
gate calls breaking."""

from __future__ import annotations

from eddy_runtime.dsl.pipeline import Topology


def _word(_key: object, word: str) -> str:
    return word


def counts_v1(topology: Topology, input_topic: str, output_topic: str) -> None:
    words = topology.stream(input_topic, value_serde="string")
    words.group_by(_word, name="words").count(name="counts").to(output_topic)


def _one_more_per_record(_key: object, values: dict[str, list[object]], count: int) -> int:
    return count + len(values["value"])


def counts_v2(topology: Topology, input_topic: str, output_topic: str) -> None:
    words = topology.stream(input_topic, value_serde="string")
    words.group_by(_word, name="words").aggregate(lambda: 0, _one_more_per_record, name="counts",
                                                  value_serde="json").to(output_topic)
