"""Kafka Streams' ``split()``: a stream's records routed to branches, each record to the first
branch whose predicate holds (`Stream.split`, dsl/pipeline.py).

A branch is the stream filtered by "this predicate, and none of the earlier ones"; what follows
it (record steps, ``to()``, ``group_by(...)``) is its own chain, which the compiler turns into
sinks with their own record steps (dsl/compiler.py), so the branches of one stream stay in one
sub-topology and each record is read once.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, Protocol, Self, TypeVar

from eddy_runtime.dsl.errors import PipelineError

__all__ = ["BranchedStream", "FirstMatch"]

Predicate = Callable[[Any, Any], Any]


class _Filterable(Protocol):
    def filter(self, fn: Callable[[Any, Any], Any]) -> Self: ...


S = TypeVar("S", bound=_Filterable)


class FirstMatch:
    """True for a record that `predicate` keeps and no `earlier` predicate does (picklable: the
    runners get it with the sub-topology)."""

    def __init__(self, predicate: Predicate | None, earlier: tuple[Predicate, ...], name: str) -> None:
        self.predicate = predicate
        self.earlier = earlier
        self.__name__ = name

    def __call__(self, key: Any, value: Any) -> bool:
        if any(p(key, value) for p in self.earlier):
            return False
        return self.predicate is None or bool(self.predicate(key, value))


class BranchedStream(Generic[S]):
    """The branches of a stream (``stream.split()``): `branch` adds one, `default_branch` takes
    the records no branch took."""

    def __init__(self, stream: S, name: str) -> None:
        self._stream = stream
        self._name = name
        self._predicates: list[Predicate] = []
        self._closed = False

    def branch(self, predicate: Predicate, name: str | None = None) -> S:
        """The records for which ``predicate(key, value)`` is true and no earlier branch's is."""
        if self._closed:
            raise PipelineError(f"split {self._name}: no branch after default_branch()")
        if not callable(predicate):
            raise PipelineError(f"split {self._name}: branch needs a predicate (key, value) -> bool, got {predicate!r}")
        label = f"{self._name}-{name or len(self._predicates) + 1}"
        step = FirstMatch(predicate, tuple(self._predicates), label)
        self._predicates.append(predicate)
        return self._stream.filter(step)

    def default_branch(self, name: str | None = None) -> S:
        """The records no branch took (Kafka Streams' ``defaultBranch``)."""
        if self._closed:
            raise PipelineError(f"split {self._name}: default_branch() was already taken")
        self._closed = True
        return self._stream.filter(FirstMatch(None, tuple(self._predicates), f"{self._name}-{name or 'default'}"))
