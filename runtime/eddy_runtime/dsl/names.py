"""What a pipeline may name and how: the serdes a step takes, the names a user may give (they name
topics and store folders), and the names `eddy_runtime.dsl.pipeline.Topology` makes for a step given
none (the upgrade gate refuses their shifting: docs/pipelines.md, "Naming stores")."""

from __future__ import annotations

import re
from collections.abc import Sequence

from eddy_runtime.dsl.errors import PipelineError

__all__ = ["KEY_SERDES", "REDUCE_OPS", "VALUE_SERDES", "check_name", "check_serde", "is_generated_name"]

KEY_SERDES = ("string", "bytes", "int64", "json")
VALUE_SERDES = ("string", "bytes", "int64", "json")
REDUCE_OPS = ("sum", "min", "max")


def check_serde(serde: str, allowed: Sequence[str], what: str) -> str:
    if serde not in allowed:
        raise PipelineError(f"{what} {serde!r} is not one of {', '.join(allowed)}")
    return serde


_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,100}$")

#: The names `Topology._name` makes for a step given no ``name=``: the step's kind and how many names
#: were made before it (``count-3``), and the store names made from them (a windowed join's
#: ``join-2-this``, ``-other`` and ``-outer``, a process step's ``process-4-time``, a suppress
#: buffer's ``count-3-suppress``). They are the same on every run of the same pipeline, and move when
#: a step that makes a name is inserted before them: the upgrade gate refuses that
#: (docs/pipelines.md, "Naming stores").
_GENERATED_NAME = re.compile(
    r"^(?:(?:count|reduce|aggregate)-[0-9]+(?:-suppress)?|table-[0-9]+|join-[0-9]+-(?:this|other|outer)"
    r"|process-[0-9]+-time|group-by-[0-9]+|merge-[0-9]+)$"
)


def is_generated_name(name: str) -> bool:
    """Whether a store's (or a repartition's) name is one `Topology` made, not one the user gave."""
    return bool(_GENERATED_NAME.match(name))


def check_name(name: str, what: str) -> str:
    if not _NAME.match(name):
        raise PipelineError(f"{what} name {name!r} must be letters, digits, '.', '_' or '-' (it names topics)")
    return name
