"""Numba, set up to keep compiled code in the user cache folder: what the compiled modules (fastsketch.py,
fastverify.py) import it through. Importing this raises ImportError where compiled code has nowhere to go, and
the callers then keep to numpy."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from dedupdb.config import cache_dir


def _writable(directory: Path) -> bool:
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tempfile.TemporaryFile(dir=directory).close()
    except OSError:
        return False
    return True


# Numba reads its cache folder once, on import; left alone it writes beside the source (or in a folder of its
# own). Without a folder to keep compiled code in, every process would compile for seconds: the numpy path,
# which is what an ImportError here leads to, serves better.
if "NUMBA_CACHE_DIR" not in os.environ:
    _CACHE = cache_dir() / "numba"
    if not _writable(_CACHE):
        raise ImportError(f"no writable folder for compiled code at {_CACHE}")
    os.environ["NUMBA_CACHE_DIR"] = str(_CACHE)

# Numba's typing of an array argument asks for numpy.ma, which numpy loads on first use (10-15 ms): here, so that
# workers forked after this import find it loaded rather than each loading it at its first batch.
import numpy.ma  # noqa: F401
from numba import njit, types  # noqa: E402

__all__ = ["njit", "types"]
