"""The word-count example: lines of text in, a running count per word out.

Sub-topology 0 splits each line into words in a DataFrame step and re-keys by word through the
``<app>-words-repartition`` topic; sub-topology 1 counts per word in the ``counts`` store (a
RocksDB store with its changelog) and writes each changed count to the output topic.
`build_own_steps` is the same word count with Eddy's own record steps instead of the DataFrame step,
and `build_words` the benchmarks' job: every value already one word, counted as it is (what the
benchmarks' Kafka Streams, Quix Streams and Spark programs do).
"""

from __future__ import annotations

import re

from pyspark.sql import functions as F

from eddy_runtime.dsl.pipeline import Topology


def split_words(df):  # DataFrame -> DataFrame, no shuffle: runs on the task's executor
    words = F.explode(F.split(F.lower(F.col("value")), r"[^\p{L}\p{N}']+"))
    return df.select(words.alias("word"), "timestamp").where(F.col("word") != "")


def build(topology: Topology, input_topic: str = "wordcount-input", output_topic: str = "wordcount-output") -> None:
    lines = topology.stream(input_topic, value_serde="string")
    words = lines.transform(split_words)
    words.group_by("word", name="words").count(name="counts").to(output_topic)


# split_words' words, runs of [\p{L}\p{N}']: Python's \w is letters, digits and "_", so "_" is left out.
_WORD = re.compile(r"(?:[^\W_]|')+")


def words_of(line: str | None) -> list[str]:
    """The words split_words finds in a line: lowercased, split on anything but letters, digits and '."""
    if line is None:
        return []
    return _WORD.findall(line.lower())


def build_own_steps(topology: Topology, input_topic: str = "wordcount-input",
                    output_topic: str = "wordcount-output", store: str = "counts") -> None:
    """The same word count with Eddy's own record steps: no DataFrame, so no Spark in the batch.

    Same repartition topic, store and output as `build`; pipeline.function: build_own_steps.
    `store` names the count's store: another name is another store, which the upgrade check
    refuses for a running app (docs/operations.md, "Upgrading an app").
    """
    lines = topology.stream(input_topic, value_serde="string")
    words = lines.flat_map_values(words_of)
    words.group_by(lambda key, word: word, name="words").count(name=store).to(output_topic)


def build_words(topology: Topology, input_topic: str = "wordcount-input",
                output_topic: str = "wordcount-output") -> None:
    """The benchmarks' word count (bench/throughput.py, bench/failover.py): each value is one word,
    re-keyed by itself and counted, as Kafka Streams' ``selectKey((key, word) -> word)`` and the
    other peers do; no split, no lowercasing. Same repartition topic, store and output as `build`."""
    words = topology.stream(input_topic, value_serde="string")
    words.group_by(lambda key, word: word, name="words").count(name="counts").to(output_topic)
