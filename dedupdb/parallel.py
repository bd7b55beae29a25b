"""Sketching texts in worker processes while the main process reads files and writes the store.

The ingest keeps one batch in flight: batch N is sketched by the workers while
batch N - 1 is written, so both cores stay busy. Workers start only once an
ingest turns out to need more than one batch. Where the platform can fork,
they are forked: a fork server or spawn would import the caller's main script
again, which breaks library users whose scripts have no __main__ guard. The
workers only compute; they never touch the database or the terminal.
"""

from __future__ import annotations

import multiprocessing
import os
import sys
from concurrent.futures import Future, ProcessPoolExecutor

from .config import Settings
from .fingerprint import Sketch, sketch_texts

# Below this many texts a batch is sketched inline: shipping it costs more than it saves.
_MIN_PARALLEL = 64


def default_workers() -> int:
    """One worker per core beyond the one writing the store."""
    return max(1, (os.cpu_count() or 1) - 1)


class SketchPool:
    def __init__(self, settings: Settings, workers: int) -> None:
        self.settings = settings
        self.workers = workers
        methods = multiprocessing.get_all_start_methods()
        context = multiprocessing.get_context("fork" if "fork" in methods and sys.platform != "darwin" else "spawn")
        self._executor = ProcessPoolExecutor(max_workers=workers, mp_context=context)

    def submit(self, texts: list[str]) -> "PendingSketches":
        if len(texts) < _MIN_PARALLEL:
            return PendingSketches([], texts, self.settings)
        size = -(-len(texts) // self.workers)
        parts = [texts[i : i + size] for i in range(0, len(texts), size)]
        return PendingSketches([self._executor.submit(sketch_texts, self.settings, p) for p in parts], [], self.settings)

    def close(self) -> None:
        self._executor.shutdown(wait=True, cancel_futures=True)


class PendingSketches:
    def __init__(self, futures: list[Future], inline: list[str], settings: Settings) -> None:
        self._futures = futures
        self._inline = inline
        self._settings = settings

    def result(self) -> list[Sketch]:
        if self._inline:
            return sketch_texts(self._settings, self._inline)
        out: list[Sketch] = []
        for future in self._futures:
            out.extend(future.result())
        return out
