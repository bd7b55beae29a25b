"""The ingest loop: walk, read, skip what is unchanged, and hand batches to the indexer.

It knows no terminal: progress goes to an optional callback, and the outcome
comes back as an AddSummary for the caller to render.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .config import INGEST_BATCH, SNIPPET_CHARS
from .errors import InputError, ReadError
from .hashing import bytes_hash
from .index import Indexer, NewDocument
from .normalize import normalize
from .sources import Candidate, Skipped, file_text, read_bytes, walk
from .store import FileRow, Store

Progress = Callable[[int, int], None]  # (files done, files found)


@dataclass
class AddSummary:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: int = 0
    missing: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    new_contents: int = 0
    seconds: float = 0.0
    bytes_read: int = 0

    def counts(self) -> dict[str, int]:
        return {
            "added": len(self.added),
            "updated": len(self.updated),
            "unchanged": self.unchanged,
            "missing": len(self.missing),
            "skipped": len(self.skipped),
            "failed": len(self.failed),
        }


@dataclass
class _Pending:
    candidate: Candidate
    digest: str
    text: str | None  # normalized; None for an empty file
    snippet: str
    existed: bool


class Ingest:
    def __init__(self, store: Store, indexer: Indexer, save_state: Callable[[bool], None]) -> None:
        self.store = store
        self.indexer = indexer
        self.save_state = save_state
        self.summary = AddSummary()
        self._pending: list[_Pending] = []
        self._known: dict[str, FileRow] = {}  # what the store knew of these files before this run

    def run(
        self,
        paths: list[Path],
        include: tuple[str, ...] = (),
        exclude: tuple[str, ...] = (),
        progress: Progress | None = None,
    ) -> AddSummary:
        started = time.perf_counter()
        roots = []
        for path in paths:
            if not path.exists():
                raise InputError(f"no such file or folder: {path}")
            roots.append(path.resolve())
        found: list[Candidate] = []
        for root in roots:
            for item in walk(root, include, exclude):
                if isinstance(item, Skipped):
                    self.summary.skipped.append((str(item.path), item.reason))
                else:
                    found.append(item)
        seen = {str(c.path) for c in found}
        for root in roots:
            rows = self.store.files_under(str(root)) if root.is_dir() else [self.store.file_by_path(str(root))]
            self._known.update((row.path, row) for row in rows if row is not None)
        for done, candidate in enumerate(found, 1):
            self._consider(candidate)
            if len(self._pending) >= INGEST_BATCH:
                self._flush()
            if progress:
                progress(done, len(found))
        self._flush()
        for root in roots:
            if root.is_dir():
                self._notice_missing(root, seen)
        self.save_state(True)
        self.summary.seconds = time.perf_counter() - started
        return self.summary

    def _consider(self, candidate: Candidate) -> None:
        path = str(candidate.path)
        known = self._known.get(path)
        live = known is not None and known.status != "missing"
        if live and known.size == candidate.size and known.mtime_ns == candidate.mtime_ns:
            self.summary.unchanged += 1
            return
        try:
            data = read_bytes(candidate.path)
            digest = bytes_hash(data)
            if live and digest == known.digest:
                with self.store.transaction():
                    self.store.touch_file(known.id, candidate.size, candidate.mtime_ns)
                self.summary.unchanged += 1
                return
            raw = file_text(candidate.path, data)
            text = normalize(raw)
        except ReadError as exc:
            if exc.reason.startswith("binary"):
                self.summary.skipped.append((path, exc.reason))
            else:
                self.summary.failed.append((path, exc.reason))
            return
        self.summary.bytes_read += len(data)
        self._pending.append(_Pending(candidate, digest, text or None, snippet(raw), live))

    def _flush(self) -> None:
        if not self._pending:
            return
        batch, self._pending = self._pending, []
        additions: list[NewDocument] = []
        with self.store.transaction():
            file_ids = self.store.save_files(
                [
                    (str(i.candidate.path), i.candidate.size, i.candidate.mtime_ns, i.digest,
                     "indexed" if i.text else "empty", "file")
                    for i in batch
                ]
            )
            removals = []
            for item in batch:
                c = item.candidate
                file_id = file_ids[str(c.path)]
                if item.existed:
                    removals += self.store.documents_of_file(file_id)
                if item.text:
                    additions.append(
                        NewDocument(str(c.path), file_id, None, item.text, c.size, c.mtime_ns, item.snippet)
                    )
            self.indexer.remove_documents(removals)
            self.summary.new_contents += self.indexer.add_documents(additions)
            self.save_state(False)
        for item in batch:
            (self.summary.updated if item.existed else self.summary.added).append(str(item.candidate.path))

    def _notice_missing(self, root: Path, seen: set[str]) -> None:
        gone = [f for f in self.store.files_under(str(root)) if f.status != "missing" and f.path not in seen]
        gone = [f for f in gone if not os.path.exists(f.path)]
        if not gone:
            return
        with self.store.transaction():
            for f in gone:
                self.indexer.remove_documents(self.store.documents_of_file(f.id))
                self.store.set_file_status(f.id, "missing")
        self.summary.missing += [f.path for f in gone]


def snippet(raw_text: str) -> str:
    """The start of the original text with its whitespace collapsed, for listings."""
    return " ".join(raw_text[: SNIPPET_CHARS * 4].split())[:SNIPPET_CHARS]
