"""How a driver runs beyond what the StreamApp spec says (`DriverOptions`): where state lives,
how big a batch may be, where the operator's channel is, the metrics port, the stop grace. Set by
`eddy driver` (cli.py) from its flags, by `eddy run` (local/run.py), and by the tests and benches
that run a driver in process."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from eddy_runtime.driver.channel_io import ChannelLocation

__all__ = ["DriverOptions", "default_state_dir"]


@dataclass(frozen=True)
class DriverOptions:
    """How the driver runs, beyond what the StreamApp spec says."""

    state_dir: str
    #: local mode: executors share one disk, each gets ``<state_dir>/executor-<id>``
    per_executor_state_dirs: bool = False
    #: records per task and batch at most (bounds a batch's duration and memory)
    max_batch_records: int = 200_000
    metrics_port: int | None = None
    metrics_addr: str = "0.0.0.0"
    #: operator mode: where the operator publishes the assignment (None: the local assignor)
    assignment_source: ChannelLocation | None = None
    #: where to publish the runtime state for the operator (None: nowhere)
    runtime_state_target: ChannelLocation | None = None
    create_output_topics: bool = True
    #: how long a stop waits for the running batch before cancelling it
    stop_grace_s: float = 30.0
    #: consecutive failed batches before the driver gives up
    max_failed_batches: int = 5
    #: an app whose sub-topologies all run continuously: how often the driver hands executors
    #: the assignment and collects figures (sooner when an executor comes or goes)
    sync_interval_s: float = 1.0


def default_state_dir() -> str:
    return os.environ.get("EDDY_STATE_DIR", str(Path.cwd() / ".cache" / "eddy-state"))
