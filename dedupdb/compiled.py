"""Whether the compiled code (sketching, verifying, decoding: fastsketch.py, fastverify.py, fastdecode.py) is in
numba's cache yet, without loading numba to find out: a mark beside numba's files says so.

The first add after an install finds no mark. A process of the lowest priority then compiles all three
(workers.compile_detached), and the add's processes await it (await_compiled): they take numpy's paths, which give
the same results, until the mark appears, then load the compiled code from the cache. Compiling in the add's own
processes instead cost its two cores some 17 seconds of CPU (docs/benchmarks.md, the first add).

A process answering single queries (Database.query) does the same where the code is still to be compiled, and
where it is compiled loads it in a thread of its own (load_aside): no query waits for either.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from types import ModuleType

import xxhash

from dedupdb.config import cache_dir, installed_stamp

_SOURCES = ("sketch/fastsketch.py", "sketch/fastverify.py", "storage/fastdecode.py")
# How often a process awaiting the compiled code looks for the mark (a stat of a file).
_CHECK_SECONDS = 0.2


def _stamp() -> str:
    """The sources, numba's and Python's: an edit or an upgrade of any wants another compile."""
    package = Path(__file__).parent
    parts = []
    for name in _SOURCES:
        try:
            stat = (package / name).stat()
            parts.append(f"{package / name}:{stat.st_mtime_ns}:{stat.st_size}")
        except OSError:
            parts.append(f"{package / name}:0:0")
    return ":".join([*parts, installed_stamp("numba"), sys.version])


@lru_cache(maxsize=1)
def marker() -> Path:
    """The mark that says the compiled code of these sources is in numba's cache (jit.py's folder)."""
    folder = Path(os.environ["NUMBA_CACHE_DIR"]) if "NUMBA_CACHE_DIR" in os.environ else cache_dir() / "numba"
    return folder / f"dedupdb-compiled-{xxhash.xxh64_hexdigest(_stamp().encode())}"


def compiling_mark() -> Path:
    """A file that says a process is compiling into numba's cache now (workers.compile_detached)."""
    mark = marker()
    return mark.with_name(mark.name + ".compiling")


def cached() -> bool:
    """Whether the compiled code is in numba's cache (loading it then takes about a second, compiling it many)."""
    return marker().exists()


def mark_cached() -> None:
    """Say the compiled code is in numba's cache: called once all of it has been loaded."""
    try:
        marker().parent.mkdir(parents=True, exist_ok=True)
        marker().touch()
    except OSError:  # a cache folder that cannot take the mark: processes then compile for themselves, as before
        pass


_awaiting = False
_checked = 0.0


def await_compiled() -> None:
    """Take numpy's paths in this process until another process has put the compiled code in numba's cache."""
    global _awaiting, _checked
    _awaiting, _checked = True, 0.0


def awaiting() -> bool:
    """Whether this process awaits the compiled code still: True from await_compiled until the mark appears
    (looked for at most every _CHECK_SECONDS)."""
    global _awaiting, _checked
    if _awaiting:
        now = time.monotonic()
        if now - _checked >= _CHECK_SECONDS:
            _checked = now
            _awaiting = not cached()
    return _awaiting


def at_hand() -> bool:
    """Whether this process may take compiled code without paying for numba's start-up: numba is loaded already,
    and this process is not waiting for the compiled code."""
    return "numba" in sys.modules and not waiting()


def loaded(module: str) -> ModuleType | None:
    """The compiled module of that name (its full name) where this process has loaded it already and may take it
    (at_hand), else None: for work too small to be worth loading numba for."""
    return sys.modules.get(module) if at_hand() else None


def waiting() -> bool:
    """Whether this process keeps to numpy's paths for now: the compiled code is awaited from another process
    (await_compiled), or a thread of this one is loading it (load_aside)."""
    return awaiting() or _loading


_loading = False  # a thread of this process is loading the compiled code (load_aside)
_loaded_aside = False
_aside: threading.Thread | None = None


def load_aside(load: Callable[[], object]) -> bool:
    """Load the compiled code in a thread of this process (load: what imports it), once: a process answering
    single queries never waits inside one for numba's start-up (most of a second). Until the thread has finished,
    loading() is true and every caller keeps to numpy's paths, so none takes a module half imported. Returns
    whether the thread was started."""
    global _loading, _aside
    if _aside is not None:
        return False

    def run() -> None:
        global _loading, _loaded_aside
        try:
            load()
            _loaded_aside = True
        except Exception:  # noqa: BLE001, S110 - numpy's paths serve as before, with the same results
            pass
        finally:
            _loading = False

    _loading = True
    _aside = threading.Thread(target=run, name="dedupdb-load-compiled", daemon=True)
    _aside.start()
    return True


def loading() -> bool:
    """Whether a thread of this process is loading the compiled code (load_aside)."""
    return _loading


def loaded_aside() -> bool:
    """Whether load_aside has loaded the compiled code: single texts then take it too."""
    return _loaded_aside


def settle() -> None:
    """Wait for a load aside to finish: before this process forks, so that no child starts with a lock (an
    import's, numba's) that the thread held."""
    if _aside is not None:
        _aside.join()


_alone = False


def run_alone() -> None:
    """Said by a process that runs nothing but dedupdb's work (the command line's, a worker) before it loads compiled
    code: numba may then load there without BLAS (blas_held_back)."""
    global _alone
    _alone = True


@contextmanager
def blas_held_back() -> Iterator[None]:
    """Around loading compiled code, in a process that runs dedupdb's work alone (run_alone): numba
    imports scipy.linalg for BLAS as it first loads compiled code, where scipy is installed (16 MB and 0.2-0.4 s a
    process), and dedupdb's compiled code never calls BLAS. Held back, numba takes the ImportError as "no BLAS";
    it is allowed again after. A library user's process keeps it: compiled code of its own may want it."""
    spare = _alone and not {"numba.np.arraymath", "scipy.linalg"} & sys.modules.keys()
    if spare:
        sys.modules["scipy.linalg"] = None  # type: ignore[assignment]
    try:
        yield
    finally:
        if spare and "scipy.linalg" in sys.modules and sys.modules["scipy.linalg"] is None:
            del sys.modules["scipy.linalg"]
