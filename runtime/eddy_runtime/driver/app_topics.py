"""The topics one compiled app writes: what each must look like (`app_topic_requirements`) and
making them before the first batch (`ensure_app_topics`; docs/DESIGN.md, "Topics").

The rules for one topic (creating, describing, checking) are in kafka/topics.py.
"""

from __future__ import annotations

from typing import Any

from eddy_contract.spec import ProcessingGuarantee, StreamAppSpec
from eddy_runtime.dsl.subtopology import CompiledApp
from eddy_runtime.kafka.topics import TopicRequirement, ensure_topics
from eddy_runtime.protocol.fences import fence_topic

__all__ = ["app_topic_requirements", "ensure_app_topics"]


def app_topic_requirements(compiled: CompiledApp, spec: StreamAppSpec, *,
                           create_outputs: bool = True) -> list[TopicRequirement]:
    """Every topic the compiled app writes, changelogs first."""
    reqs = [c.requirement() for c in compiled.changelog_topics()]
    reqs += [TopicRequirement(t, "repartition", n, check_partitions=True, cleanup_policy="delete")
             for t, n in compiled.repartition_topics.items()]
    if (spec.execution == "continuous" and spec.processing_guarantee == ProcessingGuarantee.EXACTLY_ONCE
            and any(not s.uses_dataframe for s in compiled.subtopologies)):
        # the runners' fence epochs (protocol/fences.py): one partition, the latest epoch per executor
        reqs.append(TopicRequirement(fence_topic(compiled.app), "fences", 1, check_partitions=True,
                                     cleanup_policy="compact"))
    if spec.dead_letter_topic:
        reqs.append(TopicRequirement(spec.dead_letter_topic, "dead-letter", 1))
    if create_outputs:
        named = {r.name for r in reqs}
        for s in compiled.subtopologies:
            for sink in s.sinks:
                topic = getattr(sink, "topic", None)
                if topic and topic not in named:
                    # A user's topic: created if missing, its replicas are the user's business.
                    reqs.append(TopicRequirement(topic, "output", s.partitions, internal=False))
                    named.add(topic)
    return reqs


def ensure_app_topics(admin: Any, compiled: CompiledApp, spec: StreamAppSpec, *,
                      create_outputs: bool = True) -> dict[str, bool]:
    """Create and validate the topics `app_topic_requirements` lists; ``{topic: created}``."""
    reqs = app_topic_requirements(compiled, spec, create_outputs=create_outputs)
    return ensure_topics(admin, reqs, spec.kafka.topics)
