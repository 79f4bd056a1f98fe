"""Eddy's own record steps: Kafka Streams' stateless record operations, run without Spark.

``flat_map_values``, ``map_values``, ``filter``, ``filter_not``, ``flat_map``, ``map`` and the key
selector of ``group_by(lambda key, value: ...)``. `RecordSteps` gives `Stream` (dsl/pipeline.py)
these methods; dsl/compiler.py collects a sub-topology's steps into `SubTopology.record_steps`,
and `process_batch` (processing/operators.py) runs them with `apply_record_steps` on a batch's
rows in the executor's task runner, before the stateful step and the sinks.

Each step calls its function in one ``map`` over the batch's ``key`` / ``value`` lists (one
``to_pylist`` per column and batch); the other columns (``timestamp``, ``offset``...) follow their
record with one ``take`` per batch. A function that raises makes its input record a bad record
(the app's bad-record policy decides) and that record produces nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Literal, Self

import numpy as np
import pyarrow as pa

from eddy_runtime.dsl.errors import PipelineError, PipelineRuntimeError

__all__ = ["GROUP_KEY_COLUMN", "RecordStep", "RecordSteps", "StepsResult", "TableValues", "apply_record_steps",
           "is_key_selector"]

#: the column a group_by key (an expression or a key selector) is computed into before the repartition
GROUP_KEY_COLUMN = "__eddy_group_key"

StepKind = Literal["flat_map_values", "map_values", "filter", "filter_not", "flat_map", "map", "select_key", "peek",
                   "table_values"]


@dataclass(frozen=True)
class RecordStep:
    """One record step: `fn` takes the value (``*_values`` steps) or the key and the value."""

    kind: StepKind
    fn: Callable[..., Any]

    @property
    def label(self) -> str:
        """How messages name the step: ``flat_map_values(split_words)``."""
        name = "group_by" if self.kind == "select_key" else self.kind
        return f"{name}({getattr(self.fn, '__name__', type(self.fn).__name__)})"

    @property
    def changes_key(self) -> bool:
        return self.kind in ("flat_map", "map")


def is_key_selector(key: Any) -> bool:
    """Whether a group_by key is a function (key, value) -> new key (not a column or a pyspark Column)."""
    return callable(key) and not type(key).__module__.startswith("pyspark")


class RecordSteps:
    """The record-step methods of `Stream` (Kafka Streams' names, in snake case)."""

    def _record(self, step: RecordStep) -> Self:
        raise NotImplementedError

    def _step(self, kind: StepKind, fn: Callable[..., Any]) -> Self:
        if not callable(fn):
            raise PipelineError(f"{kind} needs a function, got {fn!r}")
        return self._record(RecordStep(kind, fn))

    def flat_map_values(self, fn: Callable[[Any], Iterable[Any]]) -> Self:
        """Each record becomes one record per value of ``fn(value)``, with its key and timestamp."""
        return self._step("flat_map_values", fn)

    def map_values(self, fn: Callable[[Any], Any]) -> Self:
        """Each record's value becomes ``fn(value)`` (None is a null value); key and timestamp stay."""
        return self._step("map_values", fn)

    def filter(self, fn: Callable[[Any, Any], Any]) -> Self:
        """Keep the records for which ``fn(key, value)`` is true."""
        return self._step("filter", fn)

    def filter_not(self, fn: Callable[[Any, Any], Any]) -> Self:
        """Drop the records for which ``fn(key, value)`` is true."""
        return self._step("filter_not", fn)

    def flat_map(self, fn: Callable[[Any, Any], Iterable[tuple[Any, Any]]]) -> Self:
        """Each record becomes the ``(key, value)`` pairs of ``fn(key, value)``, with its timestamp."""
        return self._step("flat_map", fn)

    def map(self, fn: Callable[[Any, Any], tuple[Any, Any]]) -> Self:
        """Each record becomes the ``(key, value)`` pair ``fn(key, value)``, with its timestamp."""
        return self._step("map", fn)

    def select_key(self, fn: Callable[[Any, Any], Any]) -> Self:
        """Each record's key becomes ``fn(key, value)`` (Kafka Streams' ``selectKey``): a key change,
        so ``group_by_key`` or a join after it needs ``group_by(...)`` to repartition first."""
        if not callable(fn):
            raise PipelineError(f"select_key needs a function, got {fn!r}")
        return self._record(RecordStep("map", _KeySelector(fn)))

    def peek(self, fn: Callable[[Any, Any], Any]) -> Self:
        """Call ``fn(key, value)`` on each record for its side effects (logging, metrics); the
        record goes on unchanged. It runs again if the batch or step is retried, as in Kafka Streams."""
        return self._step("peek", fn)


class TableValues:
    """A table's `filter` / `filter_not` / `map_values` as a ``table_values`` step: fn(key, value)
    -> the new value, a None value (a tombstone) staying None, as Kafka Streams' KTable
    operations keep deletes and turn filtered-out keys into deletes."""

    def __init__(self, fn: Callable[..., Any], what: Literal["filter", "filter_not", "map_values"]) -> None:
        self.fn = fn
        self.what = what
        self.__name__ = f"table {what} {getattr(fn, '__name__', type(fn).__name__)}"

    def __call__(self, key: Any, value: Any) -> Any:
        if value is None:
            return None
        if self.what == "map_values":
            return self.fn(value)
        return value if bool(self.fn(key, value)) is (self.what == "filter") else None


class _KeySelector:
    """``select_key``'s function as a ``map``: (key, value) -> (fn(key, value), value)."""

    def __init__(self, fn: Callable[[Any, Any], Any]) -> None:
        self.fn = fn
        self.__name__ = f"select_key {getattr(fn, '__name__', type(fn).__name__)}"

    def __call__(self, key: Any, value: Any) -> tuple[Any, Any]:
        return self.fn(key, value), value


# -- running them ---------------------------------------------------------------------------------


@dataclass
class StepsResult:
    """The rows after the record steps, where each came from, and the input rows that failed."""

    rows: pa.Table
    #: the input row of each output row; None when the rows are the input rows
    origin: np.ndarray | None = None
    #: input row index -> error, for rows a step's function raised on
    failed: dict[int, str] = field(default_factory=dict)

    def failures_in_input(self, later: dict[int, str]) -> dict[int, str]:
        """`failed`, plus `later` failures (indices into `rows`) as indices of their input rows."""
        if not later and not self.failed:
            return later
        out = dict(self.failed)
        for i, err in later.items():
            out.setdefault(int(self.origin[i]) if self.origin is not None else i, err)
        return out


def _error(step: RecordStep, e: Exception) -> str:
    return f"{step.label} failed: {type(e).__name__}: {e}"


def _iterable(step: RecordStep, produced: Any) -> list[Any]:
    if isinstance(produced, str | bytes) or not isinstance(produced, Iterable):
        what = "values" if step.kind == "flat_map_values" else "(key, value) pairs"
        raise TypeError(f"{step.kind} must return an iterable of {what}, got {type(produced).__name__}")
    return produced if type(produced) is list else list(produced)


def _pair(produced: Any) -> tuple[Any, Any]:
    k, v = produced  # anything but a pair raises: a bad record
    return k, v


class _Batch:
    """The current rows of a batch while steps run: Python lists of what steps touched."""

    def __init__(self, rows: pa.Table) -> None:
        self.rows = rows
        self.origin = np.arange(rows.num_rows, dtype=np.int64)
        self.key_list: list[Any] | None = None  # None: the input keys of `origin`
        self.value_list: list[Any] | None = None
        self.keys_changed = self.values_changed = self.moved = False
        self.group_keys: list[Any] | None = None
        self.failed: dict[int, str] = {}

    def _input(self, name: str, step: RecordStep) -> list[Any]:
        if name not in self.rows.column_names:
            shown = [c for c in self.rows.column_names if not c.startswith("__")]
            raise PipelineRuntimeError(f"{step.label} needs a {name!r} column; the rows have {shown}")
        col = self.rows.column(name)
        values: list[Any] = (col.take(pa.array(self.origin)) if self.moved else col).to_pylist()
        return values

    def keys(self, step: RecordStep) -> list[Any]:
        if self.key_list is None:
            self.key_list = self._input("key", step)
        return self.key_list

    def values(self, step: RecordStep) -> list[Any]:
        if self.value_list is None:
            self.value_list = self._input("value", step)
        return self.value_list

    def fail(self, i: int, step: RecordStep, e: Exception) -> None:
        self.failed.setdefault(int(self.origin[i]), _error(step, e))

    def keep(self, idx: Sequence[int] | np.ndarray | None) -> None:
        """Rows `idx` (ascending, repeats allowed; None: all) of the current rows become the rows."""
        if idx is None:
            return
        pick = np.asarray(idx, dtype=np.int64)
        if len(pick) == len(self.origin) and np.array_equal(pick, np.arange(len(pick))):
            return  # every row, once
        self.origin = self.origin[pick]
        self.moved = True
        at = pick.tolist()
        if self.key_list is not None:
            self.key_list = [self.key_list[i] for i in at]
        if self.value_list is not None:
            self.value_list = [self.value_list[i] for i in at]
        if self.group_keys is not None:
            self.group_keys = [self.group_keys[i] for i in at]

    def replace(self, idx: Sequence[int] | np.ndarray | None, *, keys: list[Any] | None = None,
                values: list[Any] | None = None, group_keys: list[Any] | None = None) -> None:
        """Rows `idx` of the current rows become the rows, with the columns a step computed for them."""
        for name, new in (("key_list", keys), ("value_list", values), ("group_keys", group_keys)):
            if new is not None:
                setattr(self, name, None)  # not re-indexed by `keep`: `new` is already per new row
        self.keep(idx)
        if keys is not None:
            self.key_list, self.keys_changed = keys, True
        if values is not None:
            self.value_list, self.values_changed = values, True
        if group_keys is not None:
            self.group_keys = group_keys


def _call_all(step: RecordStep, b: _Batch, *columns: list[Any]) -> tuple[list[Any], list[int] | None]:
    """`step.fn` over every record (a C loop: ``map``); records it raises on become bad records.

    Returns the results and the records they belong to (None: every record, in order). After a
    failure the same ``map`` goes on with the next record: ``list.extend`` keeps what it added.
    """
    out: list[Any] = []
    args = [iter(c) for c in columns]
    failed: list[int] = []
    n = len(columns[0])
    while len(out) + len(failed) < n:
        try:
            out.extend(map(step.fn, *args))
            if len(out) + len(failed) < n:  # the function raised StopIteration, which ends a map
                raise RuntimeError("the function raised StopIteration")
        except Exception as e:  # noqa: BLE001 - a user function failed: a bad record
            i = len(out) + len(failed)
            b.fail(i, step, e)
            failed.append(i)
    if not failed:
        return out, None
    dead = set(failed)
    return out, [i for i in range(n) if i not in dead]


def _run(step: RecordStep, b: _Batch) -> None:
    kind = step.kind
    if kind == "map_values":
        values, idx = _call_all(step, b, b.values(step))
        b.replace(idx, values=values)
    elif kind == "select_key":
        group_keys, idx = _call_all(step, b, b.keys(step), b.values(step))
        b.replace(idx, group_keys=group_keys)
    elif kind == "table_values":
        values, idx = _call_all(step, b, b.keys(step), b.values(step))
        b.replace(idx, values=values)
    elif kind == "peek":
        _, idx = _call_all(step, b, b.keys(step), b.values(step))
        b.keep(idx)  # None (every record) unless the function raised on some
    elif kind in ("filter", "filter_not"):
        flags, idx = _call_all(step, b, b.keys(step), b.values(step))
        rows = range(len(flags)) if idx is None else idx
        want = kind == "filter"
        b.keep([i for i, f in zip(rows, flags, strict=True) if bool(f) is want])
    elif kind == "flat_map_values":
        produced, idx = _call_all(step, b, b.values(step))
        rows = range(len(produced)) if idx is None else idx
        if not all(type(p) is list for p in produced):  # generators, tuples... or a str: a bad record
            produced, rows = _iterables(step, b, produced, rows)
        values = list(chain.from_iterable(produced))
        b.replace(np.repeat(np.asarray(rows, dtype=np.int64), [len(p) for p in produced]), values=values)
    else:  # map / flat_map
        produced, idx = _call_all(step, b, b.keys(step), b.values(step))
        keys: list[Any] = []
        values = []
        at: list[int] = []
        for i, p in zip(range(len(produced)) if idx is None else idx, produced, strict=True):
            try:
                pairs = [_pair(p)] if kind == "map" else [_pair(kv) for kv in _iterable(step, p)]
            except Exception as e:  # noqa: BLE001
                b.fail(i, step, e)
                continue
            for k, v in pairs:
                keys.append(k)
                values.append(v)
            at.extend([i] * len(pairs))
        b.replace(at, keys=keys, values=values)


def _iterables(step: RecordStep, b: _Batch, produced: list[Any], rows: Sequence[int]) -> tuple[list[list[Any]],
                                                                                               list[int]]:
    """What flat_map_values' function returned, as lists; what is not an iterable makes a bad record."""
    lists: list[list[Any]] = []
    kept: list[int] = []
    for i, p in zip(rows, produced, strict=True):
        try:
            lists.append(_iterable(step, p))
        except Exception as e:  # noqa: BLE001
            b.fail(i, step, e)
            continue
        kept.append(i)
    return lists, kept


def _column(values: list[Any], like: pa.DataType | None, step: str) -> pa.Array:
    try:
        arr = pa.array(values)
    except (pa.ArrowInvalid, pa.ArrowTypeError) as e:
        raise PipelineRuntimeError(f"the values of {step} do not fit one column ({e}): return one type (or None)") \
            from e
    if pa.types.is_null(arr.type) and like is not None:
        return pa.nulls(len(values), like)
    return arr


def apply_record_steps(steps: tuple[RecordStep, ...], rows: pa.Table) -> StepsResult:
    """Run `steps` in order over `rows` (a batch's table: ``key``, ``value``, ``timestamp``...)."""
    if not steps:
        return StepsResult(rows)
    b = _Batch(rows)
    for step in steps:
        _run(step, b)
    if b.failed:  # a record that failed in a later step produces nothing in earlier ones either
        keep = ~np.isin(b.origin, np.fromiter(b.failed, dtype=np.int64, count=len(b.failed)))
        if not keep.all():
            b.keep(np.flatnonzero(keep).tolist())
    out = rows.take(pa.array(b.origin)) if b.moved else rows
    computed = {"key": b.key_list if b.keys_changed else None, "value": b.value_list if b.values_changed else None,
                GROUP_KEY_COLUMN: b.group_keys}
    for name, values in computed.items():
        if values is None:
            continue
        writer = next(s.label for s in reversed(steps) if name in _writes(s))
        arr = _column(values, rows.schema.field(name).type if name in rows.column_names else None, writer)
        at = out.schema.get_field_index(name)
        out = out.set_column(at, name, arr) if at >= 0 else out.append_column(name, arr)
    return StepsResult(out, b.origin if b.moved else None, b.failed)


def _writes(step: RecordStep) -> tuple[str, ...]:
    return {"select_key": (GROUP_KEY_COLUMN,), "map": ("key", "value"), "flat_map": ("key", "value"),
            "table_values": ("value",)}.get(
        step.kind, ("value",) if step.kind.endswith("_values") else ())
