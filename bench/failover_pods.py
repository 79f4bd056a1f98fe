"""Failover on real pods: how long losing an executor pod costs, with and without standbys.

    infra/cluster/netns.sh .venv/bin/python bench/failover_pods.py [--keys 200000] [--json out.json]

(`make bench-failover` runs that.) It starts what the end-to-end tests start: a one-node cluster
whose pods really run (infra/cluster/node.sh, in the network namespace netns.sh made), a Kafka
broker on the node's address, the operator from its Helm chart. Then, for each scenario
(`--standbys` 1 and 0), it applies the word-count StreamApp with two executor pods, fills its
`counts` stores with `--keys` distinct words (one changelog record each), keeps feeding a trickle of
input, deletes the executor pod holding the most stateful actives, and times:

- **new generation**: delete -> the operator's assignment without the lost executor;
- **committing again**: delete -> every orphaned task's input position (the consumer group's
  committed offset on its repartition partition) moved past where it stood when that generation
  came out, i.e. the task runs and commits on its new executor;
- **pod back**: delete -> the StatefulSet's new pod runs as a new executor (same claim);
- **caught up**: delete -> every copy the assignment places on the returning executor is within
  `acceptableRecoveryLag` (100) records of its changelog's end, as the assignor counts it (restored
  from its own volume's checkpoint plus the tail; input keeps flowing, so never exactly at it);

and counts the records restored while failing over (on the survivor) and by the returning pod
(runner logs on the volumes). Counts are checked exactly at the end of each scenario.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from e2e.wordcount import (  # noqa: E402 - after the path is set
    RECOVERY_LAG,
    RESTORE_LINE,
    WordCount,
    caught_up,
    deploy_word_count,
    stateful_tasks,
    until,
)
from tests.servers import install_operator, kafka_broker, node_cluster  # noqa: E402

WORDS_PER_LINE = 10


def say(text: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {text}", file=sys.stderr, flush=True)


def key_lines(keys: int) -> list[str]:
    """Every key once: `keys` changelog records once counted."""
    return [" ".join(f"k{i:08d}" for i in range(start, min(start + WORDS_PER_LINE, keys)))
            for start in range(0, keys, WORDS_PER_LINE)]


class GroupOffsets:
    """The app's consumer group's committed offsets on the repartition topic (task `1_p` reads
    partition p)."""

    def __init__(self, app: WordCount) -> None:
        from confluent_kafka import Consumer

        # read_uncommitted: a read_committed client asks for *stable* offsets, which a group that
        # commits in a transaction every batch almost never has, and times out.
        self.consumer = Consumer({"bootstrap.servers": app.kafka.bootstrap, "group.id": app.app_id,
                                  "enable.auto.commit": False, "isolation.level": "read_uncommitted"})
        self.topic = f"{app.app_id}-words-repartition"

    def of(self, tasks: Sequence[str]) -> dict[str, int]:
        from confluent_kafka import TopicPartition

        tps = [TopicPartition(self.topic, int(t.split("_")[1])) for t in tasks]
        return {f"1_{tp.partition}": tp.offset for tp in self.consumer.committed(tps, timeout=10)}

    def close(self) -> None:
        self.consumer.close()


def restored_since(logs: dict[str, tuple[Path, int]]) -> dict[str, int]:
    """Executor -> records its runner logged restoring since the given offsets of its log."""
    out = {}
    for executor, (path, offset) in logs.items():
        text = path.read_text(errors="replace")[offset:] if path.exists() else ""
        out[executor] = sum(int(m[4]) - int(m[3]) for m in RESTORE_LINE.finditer(text))
    return out


class Trickle(threading.Thread):
    """Input all through the failover, so orphaned tasks have something to commit."""

    def __init__(self, app: WordCount, keys: int) -> None:
        super().__init__(daemon=True)
        self.app, self.keys = app, keys
        self.stop = threading.Event()

    def run(self) -> None:
        # 20 lines a second, each an existing key and one more word.
        while not self.stop.wait(0.5):
            self.app.feed(10, lambda count, seed: [f"k{(seed * 7919 + i * 104729) % self.keys:08d} tick"
                                                   for i in range(count)])


def scenario(node: Any, kafka: Any, standbys: int, keys: int, work: Path) -> dict[str, Any]:
    app = deploy_word_count(node, kafka, f"bench-standby-{standbys}", executors=2, standbys=standbys)
    try:
        until(app.running_executors, 600, "two executor pods", interval=2, alive=app.check_driver)
        say(f"standbys {standbys}: executors up; loading {keys} keys")
        app.fed += (loaded := key_lines(keys))
        from tests.runtime.apps import produce

        produce(kafka.bootstrap, app.source, ((None, line.encode()) for line in loaded))
        app.counted_everything(1800, f"{keys} keys counted")
        steady = app.steady(timeout=900) if standbys else app.channel.assignment()
        state = app.channel.runtime_state()
        stateful = stateful_tasks(state)
        changelog = sum(sum(state.changelog_end_offsets[t].values()) for t in stateful)
        executors = app.running_executors()
        actives = Counter(steady.assignment.tasks[t].active for t in stateful)
        victim = actives.most_common(1)[0][0]
        survivor = next(e for e in executors if e != victim)
        orphans = sorted(t for t in stateful if steady.assignment.tasks[t].active == victim)
        logs = {e: (app.volume_dir(p) / "eddy-runner.log", 0) for e, p in executors.items()}
        logs = {e: (path, path.stat().st_size if path.exists() else 0) for e, (path, _) in logs.items()}
        say(f"standbys {standbys}: {changelog} changelog records; deleting executor {victim}'s pod "
            f"(actives {orphans}, survivor {survivor})")

        trickle = Trickle(app, keys)
        trickle.start()
        t0 = time.monotonic()
        app.core.delete_namespaced_pod(executors[victim].metadata.name, app.namespace)
        failed_over = until(lambda: (m := app.channel.assignment()) and m.assignment.generation
                            > steady.assignment.generation and victim not in m.assignment.executors() and m,
                            300, "the failover generation", interval=0.02)
        t_generation = time.monotonic() - t0
        offsets = GroupOffsets(app)
        base = offsets.of(orphans)
        until(lambda: all(v > base[t] for t, v in offsets.of(orphans).items()), 900,
              "orphaned tasks committing again", interval=0.1)
        t_committing = time.monotonic() - t0
        offsets.close()
        restored_failover = restored_since(logs)

        def returned() -> str | None:
            running = app.running_executors()
            new = [i for i in running or {} if i not in executors]
            return new[0] if new else None

        new_id = until(returned, 600, "the pod back as a new executor", interval=0.5)
        t_back = time.monotonic() - t0
        until(lambda: (m := app.channel.assignment()) and new_id in m.assignment.executors()
              and (s := app.channel.runtime_state()) and s.assignment_generation == m.assignment.generation
              and caught_up(s, m, slack=RECOVERY_LAG) and any(new_id in a.copies for a in m.assignment.tasks.values()),
              900, f"executor {new_id}'s copies caught up", interval=0.5)
        t_caught_up = time.monotonic() - t0
        trickle.stop.set()
        trickle.join()
        restored_total = restored_since(logs)
        app.counted_everything(900, "every record counted after the failover")
        result = {
            "standbys": standbys, "keys": keys, "changelog_records": changelog, "orphaned_tasks": len(orphans),
            "new_generation_ms": round(t_generation * 1000), "committing_again_s": round(t_committing, 2),
            "pod_back_s": round(t_back, 2), "caught_up_s": round(t_caught_up, 2),
            "restored_on_failover": restored_failover.get(survivor, 0),
            "restored_by_returning_pod": restored_total.get(victim, 0) - restored_failover.get(victim, 0),
            "new_executor": new_id, "generation": failed_over.assignment.generation,
        }
        say(f"standbys {standbys}: {result}")
        return result
    finally:
        app.close(work)
        node.kubectl("delete", "namespace", app.namespace, "--wait=false", check=False)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--keys", type=int, default=200_000, help="distinct keys in the counts stores")
    parser.add_argument("--standbys", default="1,0", help="scenarios: standby replicas, comma-separated")
    parser.add_argument("--json", help="write the figures to this file")
    parser.add_argument("--keep", action="store_true",
                        help="keep the cluster's logs, the driver logs and both channel histories (path printed)")
    args = parser.parse_args(argv)
    results = []
    work = Path(tempfile.mkdtemp(prefix="eddy-failover-"))
    if args.keep:
        say(f"logs kept in {work}")
    try:
        say("starting the cluster, Kafka and the operator")
        with node_cluster(work) as node, kafka_broker(work, host=node.node_ip) as kafka:
            install_operator(node)
            for standbys in (int(s) for s in args.standbys.split(",")):
                folder = work / f"standbys-{standbys}"
                folder.mkdir()
                results.append(scenario(node, kafka, standbys, args.keys, folder))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    load = Path("/proc/loadavg").read_text().split()[0]
    print(f"\nFailover on real pods: 2 executor pods, 4 stateful tasks, exactly-once, load {load}")
    print(f"{'standbys':>8} {'changelog':>10} {'new gen':>8} {'committing':>11} {'pod back':>9} "
          f"{'caught up':>10} {'restored (failover)':>20} {'restored (returning pod)':>25}")
    for r in results:
        print(f"{r['standbys']:>8} {r['changelog_records']:>10} {r['new_generation_ms']:>6}ms "
              f"{r['committing_again_s']:>10}s {r['pod_back_s']:>8}s {r['caught_up_s']:>9}s "
              f"{r['restored_on_failover']:>20} {r['restored_by_returning_pod']:>25}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
