"""Hypothesis profiles for the assignor's property tests (docs/DESIGN.md, "The operator's part").

`unit` (the default) keeps `make test-unit` quick; `thorough`, what `make test-properties` runs
in CI, tries 400 examples per property. Pick one with EDDY_HYPOTHESIS_PROFILE."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("unit", max_examples=100, **_COMMON)  # type: ignore[arg-type]
settings.register_profile("thorough", max_examples=400, **_COMMON)  # type: ignore[arg-type]
settings.load_profile(os.environ.get("EDDY_HYPOTHESIS_PROFILE", "unit"))
