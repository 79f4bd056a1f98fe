"""The two ways a pipeline goes wrong: invalid as written (`PipelineError`, at compile time) or
not fitting its data (`PipelineRuntimeError`, while it runs) (docs/pipelines.md)."""

from __future__ import annotations

__all__ = ["PipelineError", "PipelineRuntimeError"]


class PipelineError(ValueError):
    """The pipeline is not valid; the message says what to change."""


class PipelineRuntimeError(RuntimeError):
    """The pipeline does not fit its data (a missing column, a wrong type): stop and say so."""
