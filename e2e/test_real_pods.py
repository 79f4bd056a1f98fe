"""The mission's path on a real node: `helm install` the operator, `kubectl apply` the word-count
StreamApp, and watch Spark on Kubernetes run it on executor pods whose state claims really bind.

Nothing is faked. The operator runs as a pod from the image built from the repository's
Dockerfile; the driver pod runs `eddy driver`, a Spark client against
`k8s://https://kubernetes.default.svc`; Spark's `statefulset` allocator creates the executor pods
with their state claims; the executors reach Kafka at the node's address. The tests run in order
on one app, each step feeding more input and checking the counts exactly:

1. counts on executor pods, one standby per stateful task, exactly-once, over SASL_SSL with
   SCRAM-SHA-512: the StreamApp's ``spec.kafka.security`` references Secrets for the user, the
   password and the CA, the operator puts them into the driver's and the executors' pods, and
   every Kafka client of the app (driver, task runners, committers, restore and standby
   consumers) connects to the broker's SASL_SSL listener with them;
2. an executor pod deleted: standbys promoted, the pod comes back on the same claim, restores
   from its volume's checkpoint plus the changelog's tail, and takes its share back;
3. an executor's JVM SIGKILLed inside its container: the same, through a container restart;
4. Prometheus figures scraped from the operator, the driver and an executor over the pod network;
5. the leading operator pod deleted: the standby replica takes the Lease at once, a new pod
   comes back as the standby, and nothing is created twice;
6. `kubectl get sapp` and `kubectl describe sapp` tell the story.

A driver pod deleted (and the other changes of a running app) are e2e/test_changes.py's, on the
same app after these (`wordcount`, e2e/conftest.py).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import pytest

from e2e.wordcount import (
    APP,
    PARTITIONS,
    RECOVERY_LAG,
    RESTORE_LINE,
    WordCount,
    caught_up,
    stateful_tasks,
    until,
)
from eddy_contract import channel
from eddy_operator import builders
from tests.operator.cluster import get, report
from tests.scrape import metric_sum
from tests.servers import OPERATOR_NAMESPACE

pytestmark = pytest.mark.e2e

EXECUTORS = 2
METRICS_PORT = 9108
STATE_MOUNT = "/var/lib/eddy/state"


def test_word_count_runs_on_executor_pods_with_bound_state_claims(wordcount: WordCount):
    app = wordcount
    t0 = time.monotonic()
    executors = until(app.running_executors, 400, f"{EXECUTORS} executor pods running with their ids",
                      alive=app.check_driver, interval=2)
    report(f"\n{EXECUTORS} executor pods ready {time.monotonic() - t0:.0f}s after kubectl apply: "
           + ", ".join(f"{p.metadata.name}=executor {i}" for i, p in sorted(executors.items())))
    # SASL_SSL, its credentials from Secrets: referenced, never inlined, nor said in a log
    bootstrap = app.kubectl("get", "sapp", APP, "-o", "jsonpath={.spec.kafka.bootstrapServers}")
    assert app.kafka.secure_bootstrap in bootstrap, bootstrap
    for pod in (app.pod(builders.driver_pod_name(APP)), *executors.values()):
        env = {e.name: e for e in pod.spec.containers[0].env}
        assert env["EDDY_KAFKA_SASL_PASSWORD"].value_from.secret_key_ref.name == "kafka-user", pod.metadata.name
        assert env["EDDY_KAFKA_SASL_PASSWORD"].value is None, f"{pod.metadata.name}: the password inlined"
    for _exec_id, pod in executors.items():
        claim = app.claim_of(pod)
        ordinal = int(pod.metadata.name.rsplit("-", 1)[1])
        assert claim.metadata.name == builders.state_claim_name(APP, ordinal)
        assert claim.status.phase == "Bound", claim.status
        assert pod.spec.node_name, pod.spec
        assert any(m.mount_path == STATE_MOUNT for m in pod.spec.containers[0].volume_mounts)

    # Spark's JVMs map the image's class-data sharing archive (docker/cds.sh): its jars as the
    # node's containerd unpacked them are the ones it was made from
    for pod, container, main in ((app.pod(builders.driver_pod_name(APP)), builders.DRIVER_CONTAINER, "SparkSubmit"),
                                 (next(iter(executors.values())), builders.EXECUTOR_CONTAINER,
                                  "KubernetesExecutorBackend")):
        mapped = app.kubectl("exec", pod.metadata.name, "-c", container, "--", "bash", "-c",
                             f"grep -c /opt/eddy/cds/spark.jsa /proc/$(pgrep -f '[{main[0]}]{main[1:]}')/maps")
        assert int(mapped.strip()) > 0, (pod.metadata.name, mapped)
    app.feed(3000)
    state = app.counted_everything(400, "the first input counted on the operator's assignment")
    message = app.channel.assignment()
    stateful = stateful_tasks(state)
    assert len(stateful) == PARTITIONS and len(state.changelog_end_offsets) == 2 * PARTITIONS, state
    assert {e.id for e in message.executors} == set(executors)
    for task in stateful:
        placement = message.assignment.tasks[task]
        assert len(placement.standbys) == 1 and placement.standbys[0] != placement.active, (task, placement)
    app.steady()
    assert app.kafka.credentials.password not in app.driver_log(tail=5000)
    report(f"counted {len(app.fed)} lines exactly over SASL_SSL on generation {message.assignment.generation} "
           f"{time.monotonic() - t0:.0f}s after kubectl apply")


def _lose_executor_and_come_back(app: WordCount, how: str) -> None:
    steady = app.steady()
    state = app.channel.runtime_state()
    stateful = stateful_tasks(state)
    executors = app.running_executors()
    actives = Counter(steady.assignment.tasks[t].active for t in stateful)
    victim = actives.most_common(1)[0][0]
    survivor = next(e for e in executors if e != victim)
    orphans = [t for t in stateful if steady.assignment.tasks[t].active == victim]
    victim_pod = executors[victim]
    claim_before = app.claim_of(victim_pod)
    volume = app.volume_dir(victim_pod)
    runner_log = volume / "eddy-runner.log"
    log_offset = runner_log.stat().st_size if runner_log.exists() else 0
    changelog_records = {t: sum(state.changelog_end_offsets[t].values()) for t in stateful}

    t_kill = time.monotonic()
    if how == "pod":
        app.core.delete_namespaced_pod(victim_pod.metadata.name, app.namespace)
    else:
        # The executor's JVM, from inside its container: the entrypoint sees it die, waits for the
        # task runner to close its stores, and the container ends (then restarts).
        app.kubectl("exec", victim_pod.metadata.name, "-c", builders.EXECUTOR_CONTAINER, "--",
                    "bash", "-c", "kill -9 $(pgrep -x java)")

    failed_over = until(lambda: (m := app.channel.assignment()) and m.assignment.generation
                        > steady.assignment.generation and victim not in m.assignment.executors() and m,
                        120, "a new generation without the lost executor", interval=0.05, alive=app.check_driver)
    t_published = time.monotonic() - t_kill
    for task in orphans:
        assert failed_over.assignment.tasks[task].active == survivor, (task, failed_over.assignment.tasks[task])
    app.feed(200)
    app.counted_everything(300, f"new input counted after executor {victim} was lost ({how})")
    t_counted = time.monotonic() - t_kill

    # The pod comes back with the same name and claim; Spark gives its executor a new id.
    def returned() -> tuple[str, Any] | None:
        running = app.running_executors()
        if running is None:
            return None
        new = [(i, p) for i, p in running.items() if i not in executors]
        return new[0] if new else None

    new_id, new_pod = until(returned, 300, f"executor pod {victim_pod.metadata.name} back with a new executor id",
                            alive=app.check_driver, interval=1)
    assert new_pod.metadata.name == victim_pod.metadata.name
    claim_after = app.claim_of(new_pod)
    assert claim_after.metadata.uid == claim_before.metadata.uid
    assert claim_after.spec.volume_name == claim_before.spec.volume_name
    rebalanced = until(lambda: (m := app.channel.assignment()) and new_id in m.assignment.executors()
                       and (s := app.channel.runtime_state()) and s.assignment_generation == m.assignment.generation
                       and caught_up(s, m) and m,
                       300, f"copies on executor {new_id} caught up", alive=app.check_driver)
    t_caught_up = time.monotonic() - t_kill
    # It restored from its own volume: what its checkpoint lacked, not the changelog from the start.
    restores = [(m[1], int(m[3]), int(m[4])) for m in
                RESTORE_LINE.finditer(runner_log.read_text(errors="replace")[log_offset:])]
    # An active goes to the new executor at once only where its volume's copy was caught up
    # (within acceptableRecoveryLag: KIP-441); any other copy warms up first. Which copies lag
    # depends on where the input fed meanwhile went, so the test checks the rule, not a count.
    first_on_new = next(m for m in app.channel.assignments if new_id in m.assignment.executors())
    lacked = {}
    for task, start, end in restores:
        lacked.setdefault(task, end - start)
    early = {t: lacked.get(t) for t in stateful if first_on_new.assignment.tasks[t].active == new_id
             and (lacked.get(t) is None or lacked[t] > RECOVERY_LAG + 1)}
    assert not early, f"actives moved to executor {new_id} before their copies caught up (records lacked): " \
                      f"{early}; {first_on_new}"
    restored = sum(end - start for _, start, end in restores)
    from_zero = [r for r in restores if r[1] == 0]
    assert not from_zero, f"copies restored from the changelog's start: {from_zero}"
    # Its volume held every task (one active or standby copy of each per executor), flushed when
    # its executor stopped: each copy reads from where the changelog stood when the pod was lost
    # (its checkpoint; the commit marker after it aside), a fraction of the whole.
    first = {}
    for task, start, _ in restores:
        first.setdefault(task, start)
    assert set(first) == set(stateful), restores
    assert all(first[t] >= changelog_records[t] - 2 for t in stateful), (first, changelog_records)
    total_changelog = sum(changelog_records.values())
    assert restored * 4 <= total_changelog, (restored, total_changelog, restores)

    def balanced() -> channel.AssignmentMessage | None:
        message = app.channel.assignment()
        loads = Counter(message.assignment.tasks[t].active for t in stateful)
        return message if sorted(loads.values()) == [PARTITIONS // EXECUTORS] * EXECUTORS else None

    until(balanced, 120, f"the stateful actives balanced again with executor {new_id}", alive=app.check_driver)
    app.feed(500)
    app.counted_everything(300, "the last input counted")
    report(f"executor {victim} lost ({how}): generation {failed_over.assignment.generation} without it in "
           f"{t_published * 1000:.0f} ms ({len(orphans)} standbys promoted on executor {survivor}); new input counted "
           f"{t_counted:.1f}s after the loss; pod back as executor {new_id} on claim {claim_after.metadata.name}, "
           f"caught up {t_caught_up:.1f}s after the loss (generation {rebalanced.assignment.generation}) restoring "
           f"{restored} records from its checkpoint onwards, against {total_changelog} changelog records in all")


def test_deleted_executor_pod_fails_over_to_standbys_and_returns_on_its_own_volume(wordcount: WordCount):
    _lose_executor_and_come_back(wordcount, "pod")


def test_sigkilled_executor_jvm_fails_over_and_its_container_restores_from_its_volume(wordcount: WordCount):
    _lose_executor_and_come_back(wordcount, "jvm")


OPERATOR_SELECTOR = "app.kubernetes.io/name=eddy-operator"
LEASE = "eddy-eddy-operator"  # the chart's full name for the release "eddy"


def lease_holder(app: WordCount) -> str | None:
    from kubernetes import client

    lease = client.CoordinationV1Api(app.core.api_client).read_namespaced_lease(LEASE, OPERATOR_NAMESPACE)
    return lease.spec.holder_identity or None


def operator_pods(app: WordCount) -> tuple[Any, list[Any]]:
    """The operator pod holding the Lease (identity: pod name + random suffix) and the others."""
    holder = until(lambda: lease_holder(app), 60, "a leader in the operator's Lease")
    pods = [p for p in app.core.list_namespaced_pod(OPERATOR_NAMESPACE, label_selector=OPERATOR_SELECTOR).items
            if p.metadata.deletion_timestamp is None]
    leaders = [p for p in pods if holder.rsplit("-", 1)[0] == p.metadata.name]
    assert len(leaders) == 1, (holder, [p.metadata.name for p in pods])
    return leaders[0], [p for p in pods if p is not leaders[0]]


def test_operator_driver_and_executor_serve_the_run_s_figures_over_the_pod_network(wordcount: WordCount):
    app = wordcount
    app.steady()
    app.feed(200)
    app.counted_everything(300, "input counted before the scrape")
    leader, standbys = operator_pods(app)
    operator = app.metrics(leader, 8080)
    assert metric_sum(operator, "eddy_operator_leader") == 1
    for standby in standbys:  # scraped too (the metrics Service selects every replica), handling nothing
        figures = app.metrics(standby, 8080)
        assert metric_sum(figures, "eddy_operator_leader") == 0
        assert metric_sum(figures, "eddy_operator_failovers_total") == 0
    assert metric_sum(operator, "eddy_operator_failovers_total", namespace=app.namespace, app=APP) >= 2, operator
    generation = app.channel.assignment().assignment.generation
    assert metric_sum(operator, "eddy_operator_assignment_generation", namespace=app.namespace, app=APP) == generation

    # The runtime labels its figures with the app's Kafka application id.
    app_id = app.app_id
    # The operator may publish a newer generation (an active moving back) between the reads above
    # and the driver's next sync: scrape until the driver has taken the newest one.
    driver = until(
        lambda: (d := app.metrics(app.pod(builders.driver_pod_name(APP)), METRICS_PORT))
        and metric_sum(d, "eddy_driver_assignment_generation", app=app_id)
        == app.channel.assignment().assignment.generation
        and d,
        60,
        "the driver's gauge at the newest assignment generation",
    )
    assert metric_sum(driver, "eddy_driver_executor_losses_total", app=app_id) == 2, driver
    assert metric_sum(driver, "eddy_driver_executors", app=app_id) == EXECUTORS
    # Every line was read once by a splitting task (exactly-once: nothing counted twice).
    splitting = sum(metric_sum(driver, "eddy_driver_task_lag_records", app=app_id, task=f"0_{p}")
                    for p in range(PARTITIONS))
    assert splitting == 0
    # Every line fed, and every repartitioned word count after it, went in through a task.
    assert metric_sum(driver, "eddy_driver_records_in_total", app=app_id) >= len(app.fed)
    assert metric_sum(driver, "eddy_driver_restoring_tasks", app=app_id) == 0

    executors = app.running_executors()
    message = app.channel.assignment()
    processed = 0.0
    for exec_id, pod in executors.items():
        figures = app.metrics(pod, METRICS_PORT)
        processed += metric_sum(figures, "eddy_executor_records_in_total", app=app_id)
        standbys = [t for t, a in message.assignment.tasks.items() if exec_id in a.standbys]
        for task in standbys:
            assert metric_sum(figures, "eddy_executor_standby_lag_records", app=app_id, task=task) <= RECOVERY_LAG
        assert metric_sum(figures, "eddy_executor_work_items_total", app=app_id) > 0, figures
        actives = [t for t in stateful_tasks(app.channel.runtime_state())
                   if message.assignment.tasks[t].active == exec_id]
        for task in actives:
            # A copy promoted by the newest generation reports as an active from the runner's next
            # sync with the driver (within a batch or two): scrape again until it does.
            def active_figures(task: str = task, pod: Any = pod) -> list[Any] | None:
                scraped = app.metrics(pod, METRICS_PORT)
                stored = metric_sum(scraped, "eddy_executor_store_entries", app=app_id, task=task, role="active")
                return scraped if stored > 0 else None

            figures = until(active_figures, 60, f"executor {exec_id} to report task {task} as an active")
            assert metric_sum(figures, "eddy_executor_store_size_bytes", app=app_id, task=task, role="active") > 0
        if actives and metric_sum(figures, "eddy_executor_records_in_total", app=app_id):
            assert metric_sum(figures, "eddy_executor_process_latency_seconds_count", app=app_id) > 0, figures
            assert metric_sum(figures, "eddy_executor_commit_latency_seconds_count", app=app_id) > 0, figures
        # Both executors came back from a loss and caught up: no active has anything left to
        # restore, and a standby's catch-up is its lag.
        assert metric_sum(figures, "eddy_executor_restore_remaining_records", app=app_id, role="active") == 0, figures
        for task in standbys:
            assert metric_sum(figures, "eddy_executor_restore_remaining_records", app=app_id, task=task,
                              role="standby") <= RECOVERY_LAG, figures
        if standbys:
            assert metric_sum(figures, "eddy_executor_restored_records_total", app=app_id) > 0, figures
    assert processed > 0
    failovers = metric_sum(operator, "eddy_operator_failovers_total", namespace=app.namespace, app=APP)
    report(f"scraped: operator failovers {failovers:.0f}, "
           f"driver executor losses {metric_sum(driver, 'eddy_driver_executor_losses_total', app=app_id):.0f}, "
           f"records processed by the executors since they started {processed:.0f}")


def test_deleted_leader_operator_pod_hands_over_to_the_standby_and_nothing_is_created_twice(wordcount: WordCount):
    app = wordcount
    app.steady()

    def owned() -> list[tuple[str, str]]:
        out = app.kubectl("get", "statefulsets,services,configmaps,serviceaccounts,roles,rolebindings,pdb",
                          "-l", f"{builders.APP_LABEL}={APP}", "-o", "name")
        return sorted(out.split())

    before = owned()
    generation = app.channel.assignment().assignment.generation
    old, standbys = operator_pods(app)
    assert len(standbys) == 1, [p.metadata.name for p in standbys]
    t0 = time.monotonic()
    app.core.delete_namespaced_pod(old.metadata.name, OPERATOR_NAMESPACE)
    # The leader stops handling and clears the Lease as it goes: another replica takes it, at once
    # when the standby sees the cleared holder first; the ReplicaSet's replacement pod may win the
    # race when the old leader's shutdown is slow, which is as good a handover.
    holders: list[str | None] = []

    def taken_over() -> str | None:
        holders.append(lease_holder(app))
        h = holders[-1]
        return h if h and h.rsplit("-", 1)[0] != old.metadata.name else None

    try:
        new_holder = until(taken_over, 45, "another operator pod holding the Lease", interval=0.1)
    except AssertionError as err:
        pods = app.core.list_namespaced_pod(OPERATOR_NAMESPACE, label_selector=OPERATOR_SELECTOR).items
        raise AssertionError(f"{err}; holders seen {sorted(set(map(str, holders)))}; pods "
                             f"{[(p.metadata.name, p.status.phase, p.metadata.deletion_timestamp) for p in pods]}"
                             ) from None
    handover = time.monotonic() - t0
    taker = "the standby" if new_holder.rsplit("-", 1)[0] == standbys[0].metadata.name else "the replacement pod"

    def ready_replicas() -> list[Any]:
        pods = app.core.list_namespaced_pod(OPERATOR_NAMESPACE, label_selector=OPERATOR_SELECTOR).items
        return [p for p in pods if p.metadata.uid != old.metadata.uid and p.status.phase == "Running"
                and any(c.type == "Ready" and c.status == "True" for c in p.status.conditions or [])]

    until(lambda: len(ready_replicas()) == 2, 180, "two ready operator pods again", interval=1)
    app.feed(500)
    app.counted_everything(300, "input counted with the new leader")
    assert owned() == before
    # The new leader picks the app up where the old one left it: same generation, no reshuffle.
    assert app.channel.assignment().assignment.generation == generation
    pods = app.core.list_namespaced_pod(OPERATOR_NAMESPACE, label_selector=OPERATOR_SELECTOR).items
    assert len([p for p in pods if p.metadata.deletion_timestamp is None]) == 2
    assert lease_holder(app) == new_holder
    # the chart's RBAC allows what the new leader asks as it starts (kopf lists and watches the
    # CRDs: without that, nine retries logged "is forbidden" over about a minute)
    leader_log = app.node.kubectl("-n", OPERATOR_NAMESPACE, "logs", new_holder.rsplit("-", 1)[0], check=False).stdout
    denied = [line for line in leader_log.splitlines() if "is forbidden" in line]
    assert not denied, denied[:3]
    report(f"leader operator pod deleted: {taker} held the Lease {handover:.1f}s later")


def test_kubectl_get_and_describe_tell_the_story(wordcount: WordCount):
    app = wordcount
    until(lambda: get(app.node, "streamapp", APP, app.namespace)["status"].get("phase") == "Running", 120,
          "phase Running")
    table = app.kubectl("get", "sapp", APP)
    header, row = table.splitlines()[:2]
    assert header.split()[:3] == ["NAME", "PHASE", "READY"], table
    assert row.split()[:2] == [APP, "Running"], table
    status = get(app.node, "streamapp", APP, app.namespace)["status"]
    assert status["executors"] == {"desired": EXECUTORS, "ready": EXECUTORS}
    assert str(status["assignmentGeneration"]) in row.split(), table
    described = app.kubectl("describe", "sapp", APP)
    assert "ExecutorLost" in described and "failed over" in described, described[-3000:]
    report(f"\n{table}")
