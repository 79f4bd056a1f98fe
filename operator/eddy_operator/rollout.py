"""Rolling upgrades that wait for warm copies (docs/operations.md, "Rolling upgrades"). Pure
functions of the app's pods and the published assignment; the operator's Upgrade step carries
them out (eddy_operator.upgrade_step).

A new executor pod template (an image, resources, Spark settings) is a new revision of the
executors' StatefulSet, whose update strategy is `OnDelete`: the StatefulSet controller replaces no
pod by itself. The driver that adopts the running pods marks those at the old template
(`eddy.dev/outdated`: eddy_runtime.driver.executor_set), and the operator replaces them, one at a
time, the way it empties a node being drained (eddy_operator.drains):

1. once no executor pod is going away and every other one is registered with the driver and
   ready (warm), the outdated pod with the highest ordinal is *leaving* (the assignor's rule 5):
   it takes no new copy, and each of its actives goes to a caught-up copy elsewhere (its standby,
   or a warmup placed and caught up first), while input is processed all along;
2. once the published assignment gives it no copy and the driver runs that assignment (it has
   asked the pod's runner to let its actives go, after committing what it processed), the
   operator deletes it; the StatefulSet makes it again at the new template, on its own claim, and
   it restores its copies from its volume as standbys; it is ready once they are warm;
3. then the next.

So no active leaves a pod before a warm copy has it, as a Kafka Streams rolling bounce with
standbys would wish, and no record waits for a runner to stop. A pod that is not running goes at
once, and so does an app's only executor (there is no copy elsewhere to hand its tasks to: its
successor restores them from its volume, as the StatefulSet's own rolling update would).
"""

from __future__ import annotations

from collections.abc import Iterable

from eddy_contract.assignor import Assignment
from eddy_operator import builders
from eddy_operator.drains import emptied
from eddy_operator.pods import PodInfo

__all__ = ["replacing", "replaceable"]


def replacing(pods: Iterable[PodInfo], app: str, replicas: int) -> PodInfo | None:
    """The outdated executor pod to replace now, of the `replicas` the app wants: the one with the
    highest ordinal, once no executor pod is going away and every other one is there, registered
    with the driver and ready; None if none is (or may be yet)."""
    executors = [p for p in pods if p.role == "executor"]
    if any(p.deleting for p in executors):
        return None
    wanted = {n: p for p in executors if (n := builders.executor_ordinal(app, p.name)) is not None and n < replicas}
    outdated = [n for n, p in wanted.items() if p.outdated]
    if not outdated:
        return None
    pod = wanted[max(outdated)]
    others = [wanted.get(n) for n in range(replicas) if wanted.get(n) is not pod]
    return pod if all(p is not None and p.live_executor and p.ready for p in others) else None


def replaceable(pod: PodInfo, assignment: Assignment, taken: bool, replicas: int) -> bool:
    """Whether `pod` (`replacing`'s) may be deleted now: it holds no copy in the published
    assignment and the driver runs it (`taken`), or it is not running, or the app has only the
    one executor (`replicas`)."""
    return replicas <= 1 or bool(emptied([pod], assignment, taken))
