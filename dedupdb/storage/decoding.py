"""Which compiled code a process takes without paying for numba's start-up: decoding alone (fastdecode.py) never
earns the half second and 60 MB that loading numba costs, so it runs compiled only where something else (sketching
or verifying at scale) has loaded numba already."""

from __future__ import annotations

from types import ModuleType

from dedupdb import compiled


def decoder() -> ModuleType | None:
    """fastdecode.py where numba is loaded already and compiled code can be kept, else None (numpy's path); None
    too while this process awaits another's compiling it (compiled.py)."""
    if not compiled.at_hand():
        return None
    try:
        from dedupdb.storage import fastdecode
    except ImportError:
        return None
    return fastdecode
