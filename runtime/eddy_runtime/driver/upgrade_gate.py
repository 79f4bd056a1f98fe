"""The topology compatibility gate, in the driver of a new version (docs/operations.md, "Upgrading
an app"): before it touches the executors, a starting driver compiles its pipeline, describes it
(dsl/describe.py) and compares it with the topology the app runs, which the driver before it
published beside its runtime state (`TOPOLOGY_KEY`). Under the app's upgrade mode
(eddy_contract.upgrade's `decide`) a change that would break the running state is refused: the
driver publishes the verdict (`UPGRADE_KEY`: its config hash, the differences) and stops, before
it started Spark, so the executors' task runners go on running the old version; the operator
turns the verdict into a condition and an Event, and rolls the driver back to the last version
that ran healthily. A driver that passes the gate publishes its own topology (`publish_topology`).

A change the mode takes by resetting state (resetChangedState, stateless) is carried out by the
new driver before its first generation (driver/loop.py's `Driver.prepare`), in this order:

1. every runner of the earlier version is fenced (driver/handoff.py's `fence_earlier_runners`):
   none commits again, so nothing below races a commit of the old version;
2. the changelogs of the reset stores are deleted (`drop_changelogs`), and the app's topic setup
   makes them again, empty;
3. the committed positions the decision moves are moved (`move_positions`), with the repartition
   topics the reset sub-topologies read when what writes them is read again from the beginning
   (`reset_plan`): their old records would be counted twice;
4. the verdict records what was reset (`record_reset`), and the new topology is published;
5. every work the driver hands out carries the reset (protocol/work.py's `StateReset`): each
   runner closes the copies of those stores it holds and deletes them from its volume before it
   runs anything of it, so that each is rebuilt from its new changelog.

A driver that stops before step 4 leaves the old topology published: the next one resets again.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eddy_contract.channel import UPGRADE_KEY
from eddy_contract.spec import ProcessingGuarantee, StreamAppSpec
from eddy_contract.topology import TOPOLOGY_KEY, TopologyDescription
from eddy_contract.topology_compare import compare
from eddy_contract.upgrade import ResetOffsets, UpgradeDecision, decide
from eddy_runtime.driver.channel_io import ChannelLocation, read_channel_data, write_channel_data
from eddy_runtime.driver.offsets import OffsetReader, input_partitions
from eddy_runtime.driver.outcomes import DriverError
from eddy_runtime.driver.startup import compile_app
from eddy_runtime.dsl.describe import describe
from eddy_runtime.dsl.pipeline import Topology
from eddy_runtime.dsl.subtopology import CompiledApp
from eddy_runtime.kafka import client as kafka_client
from eddy_runtime.kafka.client import KafkaClientConfig
from eddy_runtime.kafka.partitions import TopicPartition
from eddy_runtime.protocol.fences import fence_topic
from eddy_runtime.protocol.work import StateReset
from eddy_runtime.state import changelog_topic_name

__all__ = ["CONFIG_HASH_ENV", "ResetPlan", "UpgradeRefused", "check_upgrade", "drop_changelogs", "gate_new_version",
           "move_positions", "needs_reset", "publish_topology", "record_reset", "reset_after_topics",
           "reset_before_topics", "reset_changelogs", "reset_plan"]

log = logging.getLogger("eddy.driver")

#: the driver pod's config hash (the operator's `eddy.dev/config-hash`), named in a verdict
CONFIG_HASH_ENV = "EDDY_CONFIG_HASH"


class UpgradeRefused(DriverError):
    """The new version's topology would break the running state under the app's upgrade mode."""

    def __init__(self, decision: UpgradeDecision) -> None:
        self.decision = decision
        super().__init__("upgrade refused (spec.upgrade.mode " + str(decision.mode) + "): "
                         + "; ".join(decision.reasons))


def _sibling(where: ChannelLocation, key: str) -> ChannelLocation:
    """Local mode keeps each document in a file beside the runtime state's."""
    if where.path is None:
        return where
    return ChannelLocation(path=str(Path(where.path).with_name(key)))


def running_topology(where: ChannelLocation | None) -> TopologyDescription | None:
    """The topology the app runs, as its last driver published it (None: none yet)."""
    if where is None:
        return None
    text = read_channel_data(_sibling(where, TOPOLOGY_KEY), TOPOLOGY_KEY)
    return TopologyDescription.from_json(text) if text else None


def needs_reset(decision: UpgradeDecision | None) -> bool:
    """Whether an allowed decision drops state or moves positions."""
    return decision is not None and decision.allowed and bool(
        decision.reset_subtopologies or decision.reset_stores or decision.input_positions)


def check_upgrade(compiled: CompiledApp, spec: StreamAppSpec, where: ChannelLocation | None, *,
                  runners_outlive: bool = False) -> UpgradeDecision | None:
    """Compare `compiled` with the running topology; raises `UpgradeRefused` (after publishing the
    verdict) when the app's upgrade mode does not take the change. A decision that resets state is
    returned for the driver to carry out (see the module's docstring), except where the runners of
    the earlier version could go on committing: continuous at-least-once when runners outlive
    their driver (`runners_outlive`: Kubernetes), where no fence stops them. None when nothing
    runs yet."""
    running = running_topology(where)
    if running is None or where is None:
        return None
    proposed = describe(compiled)
    decision = decide(compare(running, proposed), spec.upgrade.mode, proposed, spec.upgrade.reset_offsets)
    if (needs_reset(decision) and runners_outlive and spec.execution == "continuous"
            and spec.processing_guarantee != ProcessingGuarantee.EXACTLY_ONCE):
        decision = UpgradeDecision(decision.mode, False, reasons=(
            *decision.reasons, f"the state reset that spec.upgrade.mode {decision.mode} asks for (stores "
            f"{list(decision.reset_stores)}) needs the running version's runners fenced first, which only "
            "exactly_once does; deploy the change under a new applicationId, or keep the stores compatible"))
    for note in decision.notes:
        log.info("upgrade: %s", note)
    verdict: dict[str, Any] = {"configHash": os.environ.get(CONFIG_HASH_ENV, ""), "mode": str(decision.mode),
                               "allowed": decision.allowed, "reasons": list(decision.reasons),
                               "notes": list(decision.notes),
                               "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")}
    if needs_reset(decision):
        verdict["reset"] = {"subtopologies": list(decision.reset_subtopologies), "stores": list(decision.reset_stores),
                            "inputPositions": {t: str(o) for t, o in decision.input_positions.items()},
                            "carriedOut": False}
    _write_verdict(where, verdict)
    if not decision.allowed:
        raise UpgradeRefused(decision)
    if needs_reset(decision):
        log.info("upgrade gate passed under %s: stores %s start empty (sub-topologies %s), positions %s move",
                 decision.mode, list(decision.reset_stores), list(decision.reset_subtopologies),
                 dict(decision.input_positions))
    else:
        log.info("upgrade gate passed: the new topology keeps the running state (%d difference(s))",
                 len(decision.reasons) + len(decision.notes))
    return decision


def _write_verdict(where: ChannelLocation, verdict: Mapping[str, Any]) -> None:
    write_channel_data(_sibling(where, UPGRADE_KEY), {UPGRADE_KEY: json.dumps(verdict, sort_keys=True)})


def gate_new_version(spec: StreamAppSpec, topology: Topology, where: ChannelLocation | None, *,
                     runners_outlive: bool = False) -> UpgradeDecision | None:
    """`check_upgrade` of the pipeline `topology`, compiled against its topics here (before Spark
    starts): the decision (for the driver to carry out its reset), or None when nothing runs yet;
    raises `UpgradeRefused`, or `DriverError` when Kafka or the topics are not there."""
    if running_topology(where) is None:
        return None
    kafka = KafkaClientConfig.from_spec(spec)
    admins: list[Any] = []

    def admin() -> Any:
        if not admins:
            admins.append(kafka_client.admin(kafka))
        return admins[0]

    return check_upgrade(compile_app(admin, kafka, topology, spec), spec, where, runners_outlive=runners_outlive)


def publish_topology(compiled: CompiledApp, where: ChannelLocation | None) -> None:
    """This driver's topology is the running one from now on."""
    if where is not None:
        write_channel_data(_sibling(where, TOPOLOGY_KEY), {TOPOLOGY_KEY: describe(compiled).to_json()})


# ---------------------------------------------------------------------------------------------
# Carrying out a reset (the new driver, before its first generation; see the module's docstring)


@dataclass(frozen=True)
class ResetPlan:
    """What a state reset does to Kafka: the changelogs it deletes, the positions it moves."""

    #: the changelog topics of the reset stores (deleted, then made again empty)
    changelogs: tuple[str, ...]
    #: input topic -> where its committed positions move: the decision's, and the repartition
    #: topics the reset sub-topologies read whose writers read their input from the beginning again
    positions: Mapping[str, ResetOffsets]
    #: the new version's tasks of the reset sub-topologies
    tasks: tuple[str, ...]


def reset_plan(decision: UpgradeDecision, compiled: CompiledApp) -> ResetPlan:
    """The Kafka side of `decision`'s reset for the new version `compiled`. Pure.

    A reset sub-topology that reads a repartition topic starts empty; when a sub-topology that
    writes that topic reads its own input again from the beginning (resetChangedState from
    `earliest`), every record of the topic comes again: the ones it holds already, written by the
    earlier version, are skipped (its position moves to the end), or the reset store would count
    them twice. (From `latest`, the decision moves every source of a reset sub-topology itself.)"""
    proposed = describe(compiled)
    internal = {t.name for t in proposed.repartition_topics}
    positions = dict(decision.input_positions)
    replayed = {s.id for s in proposed.subtopologies
                if any(positions.get(t) is ResetOffsets.EARLIEST for t in s.source_topics if t not in internal)}
    for sub in proposed.subtopologies:
        if sub.id not in decision.reset_subtopologies:
            continue
        for topic in sub.source_topics:
            writers = {w.id for w in proposed.subtopologies if topic in w.sink_topics}
            if topic in internal and topic not in positions and writers & replayed:
                positions[topic] = ResetOffsets.LATEST
    reset = set(decision.reset_subtopologies)
    tasks = tuple(t for s in compiled.subtopologies if s.id in reset for t in s.task_ids)
    return ResetPlan(reset_changelogs(compiled.app, decision), dict(sorted(positions.items())), tasks)


def reset_changelogs(app: str, decision: UpgradeDecision) -> tuple[str, ...]:
    """The changelog topics of `decision`'s reset stores."""
    return tuple(changelog_topic_name(app, store) for store in decision.reset_stores)


def drop_changelogs(admin: Any, topics: tuple[str, ...], timeout_s: float = 60.0) -> list[str]:
    """Delete those of `topics` that exist and wait until the broker no longer lists them (the
    app's topic setup makes them again, empty); the topics deleted."""
    existing = admin.list_topics(timeout=30).topics
    doomed = [t for t in topics if t in existing]
    if not doomed:
        return []
    for topic, future in admin.delete_topics(doomed, operation_timeout=30).items():
        try:
            future.result()
        except Exception as e:  # noqa: BLE001 - gone meanwhile is as good as deleted
            if "UNKNOWN_TOPIC" not in str(e):
                raise DriverError(f"state reset: deleting changelog {topic} failed: {e}") from e
    deadline = time.monotonic() + timeout_s
    while set(doomed) & set(admin.list_topics(timeout=30).topics):
        if time.monotonic() > deadline:
            raise DriverError(f"state reset: changelogs {doomed} still listed {timeout_s}s after their deletion")
        time.sleep(0.2)
    log.info("state reset: changelogs %s deleted", doomed)
    return doomed


def move_positions(admin: Any, offsets: OffsetReader, compiled: CompiledApp,
                   positions: Mapping[str, ResetOffsets]) -> dict[TopicPartition, int]:
    """Move the app group's committed positions of each topic of `positions` (every partition the
    new version reads of it) to the topic's earliest or last stable offset; what was committed.
    Only once every runner of the earlier version is fenced: an open transaction of one would
    commit its own positions over these."""
    from confluent_kafka import ConsumerGroupTopicPartitions
    from confluent_kafka import TopicPartition as KafkaTopicPartition

    tps = sorted({tp for tp in input_partitions(compiled) if tp.topic in positions})
    moved: dict[TopicPartition, int] = {}
    for where in (ResetOffsets.EARLIEST, ResetOffsets.LATEST):
        part = [tp for tp in tps if positions[tp.topic] is where]
        moved.update(offsets.list_offsets(part, "earliest" if where is ResetOffsets.EARLIEST else "latest"))
    if not moved:
        return moved
    request = ConsumerGroupTopicPartitions(offsets.group, [KafkaTopicPartition(t, p, o) for (t, p), o in moved.items()])
    for future in admin.alter_consumer_group_offsets([request], request_timeout=30).values():
        answer = future.result()
        failed = [f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in answer.topic_partitions if tp.error is not None]
        if failed:
            raise DriverError(f"state reset: moving the committed positions of {offsets.group} failed: {failed}")
    log.info("state reset: committed positions of group %s moved to %s", offsets.group,
             {f"{t}[{p}]": o for (t, p), o in sorted(moved.items())})
    return moved


def record_reset(where: ChannelLocation | None, plan: ResetPlan, fenced: list[str],
                 moved: Mapping[TopicPartition, int]) -> None:
    """Add to the published verdict that its reset was carried out, and how."""
    if where is None:
        return
    text = read_channel_data(_sibling(where, UPGRADE_KEY), UPGRADE_KEY)
    verdict: dict[str, Any] = json.loads(text) if text else {}
    reset = dict(verdict.get("reset") or {})
    reset.update({"carriedOut": True, "at": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "changelogsDeleted": list(plan.changelogs), "runnersFenced": fenced,
                  "positionsMoved": {f"{t}[{p}]": o for (t, p), o in sorted(moved.items())}})
    verdict["reset"] = reset
    _write_verdict(where, verdict)


def reset_before_topics(decision: UpgradeDecision, admin: Any, app: str,
                        fence_earlier: Callable[[], list[str]]) -> list[str]:
    """The first half of an upgrade's state reset, before the app's topics are set up: every
    runner of an earlier driver fenced (none of them commits again), then the reset changelogs
    deleted (the topic setup makes them again, empty). The runners fenced."""
    log.info("state reset of upgrade mode %s: stores %s", decision.mode, list(decision.reset_stores))
    fenced = fence_earlier() if fence_topic(app) in admin.list_topics(timeout=30).topics else []
    drop_changelogs(admin, reset_changelogs(app, decision))
    return fenced


def reset_after_topics(decision: UpgradeDecision, admin: Any, offsets: OffsetReader, compiled: CompiledApp,
                       where: ChannelLocation | None, fenced: list[str]) -> StateReset:
    """The second half, once the topics are set up: the committed positions moved per the reset's
    offset policy, and the reset that every work item of this driver carries (the runners drop
    the reset stores' copies before they open them)."""
    plan = reset_plan(decision, compiled)
    moved = move_positions(admin, offsets, compiled, plan.positions)
    reset = StateReset(f"{compiled.app}-{time.time_ns():x}", decision.reset_stores, plan.tasks)
    record_reset(where, plan, fenced, moved)
    log.info("state reset %s carried out: changelogs %s made again empty, runners %s fenced, positions %s",
             reset.id, list(plan.changelogs), fenced, dict(plan.positions))
    return reset
