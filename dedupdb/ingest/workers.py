"""Reading and sketching in worker processes while the main process writes the store.

The ingest keeps batches in flight: batch N + 1 (and N + 2 while batches are
small) is read and sketched by the workers while batch N is written. There is a
worker a core, each at a lower priority than the writing process, which sets
the pace: it takes a core when it has work, the workers the rest. Workers start
only once an ingest turns out to need more than one batch, and load what the
work needs (the compiled sketching) as they start; a batch reaches them in
parts, which bounds their memory. Where the platform can fork, they are
forked: a fork server or spawn would import the caller's main script again,
which breaks library users whose scripts have no __main__ guard. The workers
only read files and compute; they never touch the database or the terminal.

Workers end with the process that started them: on Linux the kernel kills each
one when its parent dies (prctl PR_SET_PDEATHSIG), elsewhere a thread in each
worker watches its parent's pid. Signals are the parent's business: workers
ignore SIGINT and SIGHUP (a Ctrl-C or a hang-up reaches the whole process
group), so the parent alone stops, shuts the pool down and reports it in one
line. SIGTERM ends a worker silently: it is how the executor ends the workers
of a broken pool, and a worker handling it would hang that shutdown.

A pool forks its workers as it is made, so that they load the compiled sketching while the first batch is read
(about a second). Where the compiled code is not in numba's cache yet (the first run after an install: compiling
takes many seconds), a process of the lowest priority compiles it (compile_detached), outliving the add if it must,
while the workers and the process that made the pool take numpy's paths; they load the compiled code once it is
there (compiled.await_compiled): the first add after an install waits for no compiling, and gives it only the CPU
the add leaves idle.
"""

from __future__ import annotations

import gc
import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from typing import Any

try:
    import fcntl
except ImportError:  # Windows
    fcntl = None

from dedupdb import compiled
from dedupdb.config import Settings
from dedupdb.errors import DedupError

# Below this many items a batch is handled inline: shipping it costs more than it saves.
_MIN_PARALLEL = 64
# Most items a worker takes at once: its memory grows with the part it holds (the texts, their sketches and the
# pickled reply: 23 MB for 500 IMDB reviews, 40 for 1,000), so a batch goes out in parts of at most this many.
_PART_ITEMS = 500
_PIPE_BYTES = 1 << 20
# Allocations between young collections during a bulk add or query (CPython's default is 700). Such work allocates
# millions of short-lived objects, and each young collection also ages the long-lived ones it meets into full
# collections that walk every object alive: 0.8-1.0 s of the writing process's 9 s of CPU for 100,000 IMDB reviews,
# 0.9 s of a batch query's 7 s, before this and the freeze below.
BULK_GC_THRESHOLD = 50_000
# How far below the writing process a worker runs (os.nice): Linux then gives the writer about nine tenths of a
# core the two share.
WORKER_NICE = 10

# A module-level function of (settings, items) returning one result per item, in order.
Work = Callable[[Settings, list], list]

# Signals a worker leaves to its parent (SIGHUP does not exist on Windows), and all those the parent handles.
_IGNORED_SIGNALS = tuple(s for s in (signal.SIGINT, getattr(signal, "SIGHUP", None)) if s is not None)
_PARENT_SIGNALS = (*_IGNORED_SIGNALS, signal.SIGTERM)
_PR_SET_PDEATHSIG = 1
_WATCH_SECONDS = 0.5  # how often the portable fallback looks for its parent


_bulk_lock = threading.Lock()
_bulk_depth = 0
_bulk_before: tuple[int, ...] = ()
_bulk_froze = False


@contextmanager
def bulk_collections() -> Iterator[None]:
    """Collect garbage less often while a bulk add or query runs in this process: what is alive as it starts (modules,
    numba's, the store) is frozen out of every collection (gc.freeze), and young collections come every
    BULK_GC_THRESHOLD allocations. Workers forked meanwhile share the frozen objects' pages untouched, and keep the
    setting. The process's own settings come back at the end (it may be a library user's); nested or concurrent
    uses count as one."""
    global _bulk_depth, _bulk_before, _bulk_froze
    with _bulk_lock:
        if _bulk_depth == 0:
            _bulk_before = gc.get_threshold()
            # A process that froze objects of its own (a server before it forks) keeps them frozen: gc.unfreeze
            # would thaw them too. One that turned young collections off (0) keeps them off.
            _bulk_froze = gc.get_freeze_count() == 0
            if _bulk_froze:
                gc.freeze()
            _young_collections_less_often()
        _bulk_depth += 1
    try:
        yield
    finally:
        with _bulk_lock:
            _bulk_depth -= 1
            if _bulk_depth == 0:
                gc.set_threshold(*_bulk_before)
                if _bulk_froze:
                    gc.unfreeze()


def _young_collections_less_often() -> None:
    """Young collections every BULK_GC_THRESHOLD allocations at most, unless they are off (0)."""
    threshold = gc.get_threshold()
    if threshold[0]:
        gc.set_threshold(max(threshold[0], BULK_GC_THRESHOLD), *threshold[1:])


def _die_with_parent_linux() -> bool:
    """Ask the kernel to SIGKILL this process when its parent dies; False where that cannot be done."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)  # the process's own symbols: libc's prctl among them
        return libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def _watch_parent(parent_pid: int, interval: float = _WATCH_SECONDS) -> threading.Thread:
    """The portable fallback: a daemon thread that ends this process once its parent is gone (an orphan is
    adopted by another process, so its parent pid changes)."""

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)
            time.sleep(interval)

    thread = threading.Thread(target=watch, name="dedupdb-parent-watch", daemon=True)
    thread.start()
    return thread


def _worker_init(parent_pid: int, warm_up: Callable[[], None] | None = None, compiling: bool = False,
                 below: bool = False) -> None:
    """Runs first in every worker: leave signals to the parent and die with it, then warm_up (loading what the
    work needs while the parent reads the first batch), or with compiling, sketch on numpy's path until the
    compiled sketching another process is compiling is there."""
    for signum in _IGNORED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler, inherited through fork
    if hasattr(signal, "pthread_sigmask"):  # blocked by the parent around the fork (see _signals_blocked)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _PARENT_SIGNALS)
    if not _die_with_parent_linux():
        _watch_parent(parent_pid)
    if below:
        _below_the_writer()
    if os.getppid() != parent_pid:  # the parent died before the kernel was asked to tell
        os._exit(1)
    compiled.run_alone()
    if warm_up is not None:
        try:
            warm_up()
        except Exception:  # the work meets the same failure again, and reports it as its own
            pass
    if compiling:
        compiled.await_compiled()
    # A worker does bulk work alone, to its end: what it holds now (what it loaded, what it inherited) is never
    # collected, and young collections come as in a bulk add (bulk_collections), forked or spawned.
    gc.freeze()
    _young_collections_less_often()


# A compile started this long ago whose mark is still there is taken for one that died.
_COMPILE_STALE_SECONDS = 600


def compile_everything() -> None:
    """Compile the sketching, verifying and decoding into numba's cache, then say so (compiled.mark_cached): what
    the process compile_detached starts runs."""
    from dedupdb.sketch.fingerprint import load_compiled
    from dedupdb.sketch.verify import PairJudge
    from dedupdb.storage import decoding

    if load_compiled() and PairJudge.load_compiled() and decoding.decoder() is not None:
        compiled.mark_cached()


def compiled_for_queries() -> None:
    """Called as a process that has earned the compiled code answers a single query (Database.query): the code is
    loaded in a thread (compiled.load_aside) where numba's cache holds it, else compiled in a process of the lowest
    priority (compile_detached) and loaded aside once that has finished. Before, the query that earned it waited
    for numba: most of a second, or 12 s and more to compile on a new install (docs/benchmarks.md)."""
    if compiled.loading() or compiled.loaded_aside():
        return
    if compiled.awaiting():  # a compile under way: looked for again at a later query
        return
    if compiled.loaded("dedupdb.sketch.fastsketch") is not None:
        return  # loaded already (an add or a batch in this process)
    if not compiled.cached():
        compile_detached(compile_everything)
        compiled.await_compiled()  # numpy's paths until the mark appears, whoever compiles
        return
    compiled.load_aside(_load_for_queries)


def _load_for_queries() -> None:
    """What a process answering queries loads aside: the compiled sketching, verifying and decoding, and the tables
    their first calls would build (the code points' classes, the word weights)."""
    from dedupdb.sketch.fingerprint import load_compiled
    from dedupdb.sketch.verify import PairJudge

    if load_compiled() and PairJudge.load_compiled():
        import numpy as np

        from dedupdb.sketch import fastsketch
        from dedupdb.storage import fastdecode  # noqa: F401 - loaded here, taken by decoding.decoder()

        fastsketch.char_classes()
        fastsketch.word_weights(np.zeros(1, np.uint64))


def compile_detached(warm_up: Callable[[], None], soon: bool = False) -> bool:
    """Start warm_up (a module-level function that compiles into numba's cache: compile_everything) in a process
    of the lowest priority that outlives the add: on two cores a compile beside the writer and the worker took a
    first add from 11.4 s on numpy's path to 18.7 s (docs/benchmarks.md), so the add takes numpy's paths with the
    cores to itself while the compile takes what is left, and finishes on its own once the add has ended. One
    compile at a time: a mark beside numba's cache names it. Returns whether one was started.

    soon: for a large add, which compiled code pays back within (COMPILE_SOON_BYTES): the process keeps its
    session's share of the CPU, half of two cores, rather than what the add leaves idle."""
    import subprocess

    compiled.settle()  # a fork while a thread loads compiled code could leave the child a lock held
    mark = compiled.compiling_mark()
    try:
        if mark.exists() and time.time() - mark.stat().st_mtime < _COMPILE_STALE_SECONDS:
            return False
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.write_text(str(os.getpid()))
    except OSError:
        return False
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(sys.modules["dedupdb"].__file__)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")])))
    code = (f"import os\ntry:\n    from {warm_up.__module__} import {warm_up.__name__}\n    {warm_up.__name__}()\n"
            f"finally:\n    os.unlink({str(mark)!r}) if os.path.exists({str(mark)!r}) else None\n")
    nice = (_low_priority if soon else _lowest_priority) if hasattr(os, "nice") else None
    try:
        subprocess.Popen([sys.executable, "-c", code], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL, start_new_session=True, preexec_fn=nice, close_fds=True)
    except OSError:
        mark.unlink(missing_ok=True)
        return False
    return True


# Adding this much or more, an add takes the compiled code as soon as it can: on two cores it adds 100,000 IMDB reviews
# (127 MB) 1.3 times as fast as numpy's paths do with a worker more, which repays the compile's 17 s of CPU from
# some 150,000 reviews on. Below it, the compile takes only what the add leaves idle.
COMPILE_SOON_BYTES = 256 * 1024 * 1024


def _low_priority() -> None:
    """In the compiling process, before it runs: the lowest priority within its session, which Linux schedules as
    one group (autogroup) beside the add's: the compile then takes about a core of two."""
    os.nice(19)


def _lowest_priority() -> None:
    """In the compiling process, before it runs: the lowest priority, for the process and for its session. Linux
    schedules each session as one group (autogroup) against the others, so a new session's process niced alone
    still took half the cores from the add's session."""
    os.nice(19)
    try:
        with open("/proc/self/autogroup", "w") as group:
            group.write("19")
    except OSError:  # no autogroup (another system, or the kernel's option off): the process's nice is what counts
        pass


def load_numba() -> None:
    """Import numba (as the compiled modules do, through dedupdb.jit), before a process forks workers: they share
    its pages. Nothing where it cannot be loaded. Numba looks for BLAS (scipy.linalg, 16 MB) when it first loads
    compiled code, not at its import, so nothing is held back here: fingerprint.load_compiled holds it back, for
    processes that run dedupdb's work alone; the process that forks may be a library user's."""
    try:
        import dedupdb.jit  # noqa: F401
    except ImportError:
        pass


def load_for_workers() -> bool:
    """Load what workers run compiled: the sketching, and the decoding that codes their sketches and reads a store's
    blocks (fastdecode.py). Called before they are forked, so that they share its pages (a worker that loaded the
    decoding itself spent a tenth of a second on it before its first batch), and as each starts, where it then
    finds everything loaded. Returns whether the sketching could be loaded."""
    from dedupdb.sketch.fingerprint import load_compiled
    from dedupdb.storage import decoding

    if not load_compiled():
        return False
    decoding.decoder()
    return True


def load_before_forking() -> None:
    """What a process about to fork workers loads first, so that they share its pages: numba, and what they run
    compiled (load_for_workers). Not where the compiled code is still to be compiled (the first add after an
    install): all take numpy's paths then."""
    if compiled.cached():
        load_numba()
        load_for_workers()


def _started(settings: Settings, items: list) -> list:
    """The pool's first task: submitted as it is made, so that its workers are forked (and warm up) at once."""
    return items


@contextmanager
def _signals_blocked() -> Iterator[None]:
    """Hold SIGINT, SIGTERM and SIGHUP back while workers are forked: a worker inherits the mask, so none
    can arrive before _worker_init has set them up (a Ctrl-C then would print a worker's traceback). The
    parent receives what arrived once the mask is lifted."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    previous = signal.pthread_sigmask(signal.SIG_BLOCK, _PARENT_SIGNALS)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def default_workers() -> int:
    """One worker per core, each at a lower priority than the process that forked it (_below_the_writer). The writing
    process sets an add's pace: it writes batches in order, and each core a worker takes beside it would otherwise
    slow it by as much. On 2 cores, 100,000 IMDB reviews: two such workers took 9.4 s where one took 11.5 s
    (docs/benchmarks.md, "Adding")."""
    return os.cpu_count() or 1


def _below_the_writer() -> None:
    """In a worker: the priority WORKER_NICE below its parent's, so that the writing process takes a core whenever it
    has work and the workers share what it leaves. Where a priority cannot be lowered (no os.nice), nothing."""
    try:
        os.nice(WORKER_NICE)
    except (AttributeError, OSError):
        pass


class WorkPool:
    def __init__(self, settings: Settings, workers: int, warm_up: Callable[[], None] | None = None,
                 compile_soon: bool = False, below_the_writer: bool = False) -> None:
        """warm_up: run in each worker as it starts (a module-level function, or None). compile_soon: where the
        compiled code is still to be compiled, the work is large enough to want it early (compile_detached).
        below_the_writer: the workers run at a lower priority than this process, which writes what they make and
        sets the pace (an add; a batch query's workers do all its work, at this process's priority)."""
        self.settings = settings
        self.workers = workers
        compiled.settle()  # workers forked while a thread loads compiled code could start with a lock it held
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods and sys.platform != "darwin" else "spawn")
        # Compiling is left to a process of its own; meanwhile the workers and this process take numpy's paths (see
        # the module's docstring).
        compiling = warm_up is not None and not compiled.cached()
        if compiling:
            compiled.await_compiled()
        self._executor = ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_worker_init,
            initargs=(os.getpid(), None if compiling else warm_up, compiling, below_the_writer),
        )
        _widen_pipes(self._executor)
        # The first submit forks the workers (and starts the executor's threads, which keep the mask: signals then go
        # to the main thread, the one that handles them).
        with _signals_blocked():
            if compiling:
                compile_detached(compile_everything, soon=compile_soon)
            self._executor.submit(_started, settings, [])

    def submit(
        self, work: Work, items: list, part_items: int = _PART_ITEMS, min_items: int = _MIN_PARALLEL,
        spread: bool = True,
    ) -> "PendingWork":
        """Share items out in parts of at most part_items (one task each), and with spread, in at least one part a
        worker; fewer than min_items are handled inline. Items that are each a chunk of many records go one a
        part."""
        if len(items) < min_items:
            return PendingWork([], work, items, self.settings)
        size = min(part_items, -(-len(items) // self.workers)) if spread else part_items
        parts = [items[i : i + size] for i in range(0, len(items), size)]
        try:
            futures = [self._executor.submit(work, self.settings, p) for p in parts]
        except BrokenProcessPool:
            raise _worker_died() from None
        return PendingWork(futures, work, [], self.settings)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)


class PendingWork:
    def __init__(self, futures: list[Future], work: Work, inline: list, settings: Settings) -> None:
        self._futures = futures
        self._work = work
        self._inline = inline
        self._settings = settings

    def result(self) -> list[Any]:
        if self._inline:
            return self._work(self._settings, self._inline)
        out: list[Any] = []
        for future in self._futures:
            try:
                out.extend(future.result())
            except BrokenProcessPool:
                raise _worker_died() from None
        return out


def _widen_pipes(executor: ProcessPoolExecutor) -> None:
    """Give the pipes to and from the workers 1 MiB (Linux's default most) instead of 64 KiB. A worker's result,
    hundreds of KB, is read by a thread of this process that needs the GIL between reads of the pipe: with 64 KiB
    at a time the worker waits on each, while this process's main thread holds the GIL writing a batch."""
    if fcntl is None or not hasattr(fcntl, "F_SETPIPE_SZ"):
        return
    try:
        pipes = (executor._result_queue._reader, executor._call_queue._reader)
    except AttributeError:  # another Python's executor: its default pipes
        return
    for pipe in pipes:
        try:
            fcntl.fcntl(pipe.fileno(), fcntl.F_SETPIPE_SZ, _PIPE_BYTES)
        except OSError:
            pass  # a smaller limit set on this machine: the default pipe


def _worker_died() -> DedupError:
    return DedupError(
        "a worker process ended unexpectedly (killed, or out of memory); work committed so far is kept: "
        "run the command again (--workers 0 reads without workers)"
    )
