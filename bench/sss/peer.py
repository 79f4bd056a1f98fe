"""What bench/throughput.py needs to run Spark Structured Streaming (bench/sss/wordcount.py) as a peer.

Two systems:

- ``sss``: micro-batch mode, ``trigger(processingTime=<commit interval>)``, ``local[1]`` (one core,
  as the other peers get);
- ``sss-rt``: real-time mode, ``trigger(realTime=<real-time batch>)`` (at least 5 s, Spark's
  ``spark.sql.streaming.realTimeMode.minBatchDuration``), ``local[2P]`` for P input partitions:
  real-time mode runs the P source tasks and the P state tasks (``spark.sql.shuffle.partitions``
  = P) at the same time, each holding a task slot for the whole batch.

Spark's Kafka sink is at-least-once, so the correctness rule differs from the exactly-once peers'
(`allowed_reemissions`).
"""

from __future__ import annotations

import sys
from pathlib import Path

WORDCOUNT = Path(__file__).resolve().parent / "wordcount.py"
CONNECTOR_SH = Path(__file__).resolve().parent.parent.parent / "infra" / "spark" / "connector.sh"
SYSTEMS = ("sss", "sss-rt")
#: spark.sql.streaming.realTimeMode.minBatchDuration's default in Spark 4.3
MIN_REALTIME_BATCH_MS = 5000


def cores(system: str, partitions: int) -> int:
    """Task slots the system is given: local[1] for micro-batch, one per source and state partition for real-time."""
    return 1 if system == "sss" else 2 * partitions


def command(system: str, *, bootstrap: str, input_topic: str, output: str, state_dir: Path, expected: int,
            timeout_s: float, partitions: int, commit_interval_ms: int, realtime_batch_ms: int) -> list[str]:
    realtime = system == "sss-rt"
    trigger_ms = max(realtime_batch_ms, MIN_REALTIME_BATCH_MS) if realtime else commit_interval_ms
    return [sys.executable, str(WORDCOUNT), "--bootstrap", bootstrap, "--input", input_topic, "--output", output,
            "--checkpoint", str(state_dir / "checkpoint"), "--expected-records", str(expected),
            "--mode", "realtime" if realtime else "microbatch", "--trigger-ms", str(trigger_ms),
            "--cores", str(cores(system, partitions)), "--shuffle-partitions", str(partitions),
            "--timeout-s", str(int(timeout_s))]


def allowed_reemissions(system: str) -> tuple[bool, bool]:
    """(repeated counts allowed, decreasing counts allowed) in a word's sequence of updates on the output topic.

    Exactly-once peers write every count once, in order: neither. Spark's Kafka sink is at-least-once:
    a batch that failed is run again from its logged offsets and the state of the batch before, and
    writes its updates again. In micro-batch mode a batch writes one (final) count per word, so a
    re-run repeats counts but never lowers one. In real-time mode every update is written as it
    happens, so a re-run replays a word's counts from where the batch began: a count may go down
    before it climbs again. In both modes the last count of every word is the true count.
    """
    if system == "sss":
        return True, False
    if system == "sss-rt":
        return True, True
    return False, False


AT_LEAST_ONCE_NOTE = ("note: sss and sss-rt write through Spark's Kafka sink, which is at-least-once: a re-run batch "
                      "writes its counts again (micro-batch: repeats, real-time: a replay that may lower a count "
                      "for a while); their check is the last count per word, repeats are counted above")
