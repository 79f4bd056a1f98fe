"""Durations and Kubernetes quantities of a StreamApp spec, read as numbers: `triggerInterval` in
seconds, memory in MiB for Spark (docs/DESIGN.md, "The operator's part"). The CRD's patterns
decide which texts are valid; these only read the number and the unit.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

DURATION_LIKE = "a duration like 500ms, 1s, 2m or 1h"
SIZE_LIKE = "a size like 512Mi, 1Gi or 2G"

_NUMBER_UNIT_RE = re.compile(r"^([0-9]+(?:\.[0-9]+)?)([A-Za-z]*)$")
_DURATION_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}
# The Kubernetes quantities the CRD admits for memory and disk sizes.
_QUANTITY_UNITS = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_QUANTITY_UNITS.update({"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50})


def parse_duration(text: str) -> float:
    """'500ms', '1s', '1.5m', '2h' -> seconds."""
    number, unit = _number_and_unit(text, _DURATION_UNITS, DURATION_LIKE)
    return number * _DURATION_UNITS[unit]


def quantity_to_bytes(text: str) -> int:
    """A Kubernetes quantity such as '512Mi', '1Gi' or '2G' in bytes."""
    number, unit = _number_and_unit(text, _QUANTITY_UNITS, SIZE_LIKE)
    return int(number * _QUANTITY_UNITS[unit])


def quantity_to_mib(text: str) -> int:
    """Rounded up to whole MiB, the unit Spark's memory settings take (`1024m`)."""
    return max(1, -(-quantity_to_bytes(text) // 2**20))


def _number_and_unit(text: str, units: Mapping[str, object], like: str) -> tuple[float, str]:
    m = _NUMBER_UNIT_RE.match(text) if isinstance(text, str) else None
    if not m or m.group(2) not in units:
        raise ValueError(f"{text!r} is not {like}")
    return float(m.group(1)), m.group(2)
