"""Task ids: `S_P` is sub-topology `S` on input partition `P` (docs/DESIGN.md, "Vocabulary").

The one place that writes, parses and orders them. On the wire (the channel's JSON, directory
names, metric labels) a task is its string form; `TaskId.parse` is how code gets at its parts.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import NamedTuple


class Role(StrEnum):
    """What a copy of a task does on an executor: processes its input, or keeps its stores warm."""

    ACTIVE = "active"
    STANDBY = "standby"


_TASK_RE = re.compile(r"^(\d+)_(\d+)$")


class TaskId(NamedTuple):
    subtopology: int
    partition: int

    def __str__(self) -> str:
        return f"{self.subtopology}_{self.partition}"

    @classmethod
    def parse(cls, task: str) -> TaskId:
        m = _TASK_RE.match(task)
        if not m:
            raise ValueError(f"task id {task!r} is not of the form <subtopology>_<partition>")
        return cls(int(m.group(1)), int(m.group(2)))


def task_id(subtopology: int, partition: int) -> str:
    """The string form of task `subtopology_partition`."""
    return str(TaskId(subtopology, partition))


def task_sort_key(task: str) -> tuple[int, int, str]:
    """Order `S_P` task ids numerically (0_2 before 0_10), other ids after them by name."""
    m = _TASK_RE.match(task)
    if m:
        return (int(m.group(1)), int(m.group(2)), "")
    return (1 << 62, 0, task)
