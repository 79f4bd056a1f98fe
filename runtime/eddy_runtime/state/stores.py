"""The store a `StoreSpec` names: `open_store` and `StateStore`, any kind.

`ProcessorStateManager` (manager.py) opens a task's stores here; restores (restore.py) take
any kind. The kinds: store.py (key-value), window_store.py (windows) and session_store.py
(sessions); docs/DESIGN.md, "Vocabulary".
"""

from __future__ import annotations

import os
from typing import TypeAlias

from eddy_runtime.state.session_store import SessionStore
from eddy_runtime.state.store import KeyValueStore
from eddy_runtime.state.store_spec import StoreSpec
from eddy_runtime.state.window_store import WindowStore

__all__ = ["StateStore", "open_store"]

StateStore: TypeAlias = KeyValueStore | WindowStore | SessionStore


def open_store(spec: StoreSpec, path: str | os.PathLike[str]) -> StateStore:
    """Open (creating if needed) the store that `spec` describes at `path`."""
    if spec.kind == "window":
        return WindowStore(spec, path)
    if spec.kind == "session":
        return SessionStore(spec, path)
    return KeyValueStore(spec, path)
