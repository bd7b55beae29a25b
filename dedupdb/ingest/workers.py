"""Reading and sketching in worker processes while the main process writes the store.

The ingest keeps one batch in flight: batch N is read and sketched by the
workers while batch N - 1 is written, so both cores stay busy. Workers start
only once an ingest turns out to need more than one batch, and load what the
work needs (the compiled sketching) as they start; a batch reaches them in
parts, which bounds their memory. Where the platform can fork, they are
forked: a fork server or spawn would import the caller's main script again,
which breaks library users whose scripts have no __main__ guard. The workers
only read files and compute; they never touch the database or the terminal.

A pool forks its workers as it is made, so they load (or, the first time on a machine, compile) the compiled
sketching while the first batch is read. Loading takes about a second; compiling takes many. A parent kept waiting
on workers that are still at it after _HELP_AFTER_SECONDS sketches the parts no worker has taken yet itself, on
numpy's path (fingerprint.compiled_held), those of later batches too: the first add after an install then loses
little to compiling, and every later one, whose workers are ready in time, never sketches in the parent.

Workers end with the process that started them: on Linux the kernel kills each
one when its parent dies (prctl PR_SET_PDEATHSIG), elsewhere a thread in each
worker watches its parent's pid. Signals are the parent's business: workers
ignore SIGINT and SIGHUP (a Ctrl-C or a hang-up reaches the whole process
group), so the parent alone stops, shuts the pool down and reports it in one
line. SIGTERM ends a worker silently: it is how the executor ends the workers
of a broken pool, and a worker handling it would hang that shutdown.
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager, nullcontext
from typing import Any

from dedupdb.config import Settings
from dedupdb.errors import DedupError
from dedupdb.sketch.fingerprint import compiled_held

# Below this many items a batch is handled inline: shipping it costs more than it saves.
_MIN_PARALLEL = 64
# Most items a worker takes at once: its memory grows with the part it holds (the texts, their sketches and the
# pickled reply: 23 MB for 500 IMDB reviews, 40 for 1,000), so a batch goes out in parts of at most this many.
_PART_ITEMS = 500
# Parts are this small while no worker is ready: the executor hands a worker its next part before it asks, and a
# part handed to a worker that is still compiling is one the parent cannot take over.
_WARMING_PART_ITEMS = 100
# Workers still warming up this long after they were forked are compiling (loading takes about a second): the parent
# then sketches parts itself rather than wait.
_HELP_AFTER_SECONDS = 2.5

# A module-level function of (settings, items) returning one result per item, in order.
Work = Callable[[Settings, list], list]

# Signals a worker leaves to its parent (SIGHUP does not exist on Windows), and all those the parent handles.
_IGNORED_SIGNALS = tuple(s for s in (signal.SIGINT, getattr(signal, "SIGHUP", None)) if s is not None)
_PARENT_SIGNALS = (*_IGNORED_SIGNALS, signal.SIGTERM)
_PR_SET_PDEATHSIG = 1
_WATCH_SECONDS = 0.5  # how often the portable fallback looks for its parent


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


def _worker_init(parent_pid: int, warm_up: Callable[[], None] | None = None, ready=None) -> None:
    """Runs first in every worker: leave signals to the parent and die with it, then warm_up (loading what the
    work needs while the parent reads the first batch), then set ready (an Event the parent watches)."""
    for signum in _IGNORED_SIGNALS:
        signal.signal(signum, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler, inherited through fork
    if hasattr(signal, "pthread_sigmask"):  # blocked by the parent around the fork (see _signals_blocked)
        signal.pthread_sigmask(signal.SIG_UNBLOCK, _PARENT_SIGNALS)
    if not _die_with_parent_linux():
        _watch_parent(parent_pid)
    if os.getppid() != parent_pid:  # the parent died before the kernel was asked to tell
        os._exit(1)
    if warm_up is not None:
        try:
            warm_up()
        except Exception:  # the work meets the same failure again, and reports it as its own
            pass
    if ready is not None:
        ready.set()


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
    """One worker per core but the one the writing process keeps busy: with compiled sketching a worker outpaces
    the writer several times over (on 2 cores, 100,000 IMDB reviews: 4,706 docs/s with one worker, 4,696 with
    two, whose second costs 85 MiB)."""
    return max(1, (os.cpu_count() or 1) - 1)


class WorkPool:
    def __init__(self, settings: Settings, workers: int, warm_up: Callable[[], None] | None = None,
                 parent_helps: bool = False) -> None:
        """warm_up: run in each worker as it starts (a module-level function, or None). parent_helps: the parent, when
        it would wait for a batch, does its parts no worker has taken yet itself, whether or not the workers are warm
        (for a caller with little work of its own between batches, such as a batch query)."""
        self.settings = settings
        self.workers = workers
        self._parent_helps = parent_helps
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods and sys.platform != "darwin" else "spawn")
        self._ready = context.Event()  # set by the first worker done warming up
        self._helps = warm_up is not None  # without a warm-up, workers are ready as soon as forked
        self._outstanding: list[PendingWork] = []  # submitted, not yet collected: parts the parent may take over
        self._executor = ProcessPoolExecutor(
            max_workers=workers, mp_context=context, initializer=_worker_init,
            initargs=(os.getpid(), warm_up, self._ready),
        )
        # The first submit forks the workers (and starts the executor's threads, which keep the mask: signals then go
        # to the main thread, the one that handles them).
        with _signals_blocked():
            self._executor.submit(_started, settings, [])
        self._forked = time.monotonic()

    def submit(self, work: Work, items: list) -> "PendingWork":
        if len(items) < _MIN_PARALLEL:
            return PendingWork(self, [], work, items)
        largest = _PART_ITEMS if self._ready.is_set() or not self._helps else _WARMING_PART_ITEMS
        size = min(largest, -(-len(items) // self.workers))
        parts = [items[i : i + size] for i in range(0, len(items), size)]
        try:
            futures = [self._executor.submit(work, self.settings, p) for p in parts]
        except BrokenProcessPool:
            raise _worker_died() from None
        pending = PendingWork(self, futures, work, [], parts)
        self._outstanding.append(pending)
        return pending

    def help_with(self, pending: "PendingWork") -> None:
        """While workers are compiling, and this one's parts are not all done: sketch parts no worker has taken, this
        one's own first, then those of later batches, last parts first (they are the furthest from being taken).
        With parent_helps, this one's parts are taken over whenever the workers have not started them."""
        while self._parent_helps or (self._helps and not self._ready.is_set()):
            waiting = [f for i, f in enumerate(pending.futures) if i not in pending.stolen and not f.done()]
            if not waiting:
                return
            if self._parent_helps and (self._ready.is_set() or not self._helps):
                if not pending.take_one(held=False):
                    wait(waiting, return_when=FIRST_COMPLETED)
                continue
            warming = time.monotonic() - self._forked
            if warming < _HELP_AFTER_SECONDS:
                wait(waiting, timeout=_HELP_AFTER_SECONDS - warming, return_when=FIRST_COMPLETED)
            elif not any(p.take_one() for p in [pending, *reversed(self._outstanding)]):
                wait(waiting, timeout=0.1, return_when=FIRST_COMPLETED)

    def collected(self, pending: "PendingWork") -> None:
        if pending in self._outstanding:
            self._outstanding.remove(pending)

    def close(self) -> None:
        self._outstanding = []
        self._executor.shutdown(wait=True, cancel_futures=True)


class PendingWork:
    def __init__(self, pool: WorkPool, futures: list[Future], work: Work, inline: list,
                 parts: list[list] | None = None) -> None:
        self._pool = pool
        self.futures = futures
        self._work = work
        self._inline = inline
        self._parts = parts or []
        self.stolen: dict[int, list] = {}  # results of parts the parent did itself, by part

    def take_one(self, held: bool = True) -> bool:
        """Do the last part no worker has taken here (held: on numpy's path); False when there is none."""
        for i in reversed(range(len(self.futures))):
            if i not in self.stolen and self.futures[i].cancel():
                with compiled_held() if held else nullcontext():
                    self.stolen[i] = self._work(self._pool.settings, self._parts[i])
                return True
        return False

    def result(self) -> list[Any]:
        if self._inline:
            return self._work(self._pool.settings, self._inline)
        self._pool.help_with(self)
        out: list[Any] = []
        try:
            for i, future in enumerate(self.futures):
                if i in self.stolen:
                    out.extend(self.stolen[i])
                    continue
                try:
                    out.extend(future.result())
                except BrokenProcessPool:
                    raise _worker_died() from None
        finally:
            self._pool.collected(self)
        return out


def _worker_died() -> DedupError:
    return DedupError(
        "a worker process ended unexpectedly (killed, or out of memory); work committed so far is kept: "
        "run the command again (--workers 0 reads without workers)"
    )
