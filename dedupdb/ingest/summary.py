"""What an add reports: the summary of a run and the shape of its progress callback (light to import: a query
never loads the ingest machinery)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

Progress = Callable[[int, int], None]  # (bytes read, bytes of every file found): an ETA by bytes means something
STDIN_NAME = "<stdin>"  # the file name standard input is stored under
_BAD_RECORDS_KEPT = 10_000  # listed one by one; beyond that only counted, so memory stays bounded


@dataclass
class AddSummary:
    added: list[str] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)
    unchanged: int = 0
    missing: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)
    warnings: list[tuple[str, str]] = field(default_factory=list)   # (path, note) of files indexed with a caveat
    records: int = 0                                                  # records indexed from record files
    bad_records: list[tuple[str, str]] = field(default_factory=list)  # ("path:line", reason)
    bad_record_count: int = 0                                         # all of them; the list keeps the first
    new_contents: int = 0
    seconds: float = 0.0
    bytes_read: int = 0

    def note_bad(self, where: str, reason: str) -> None:
        self.bad_record_count += 1
        if len(self.bad_records) < _BAD_RECORDS_KEPT:
            self.bad_records.append((where, reason))

    def counts(self) -> dict[str, int]:
        return {
            "added": len(self.added),
            "updated": len(self.updated),
            "unchanged": self.unchanged,
            "missing": len(self.missing),
            "skipped": len(self.skipped),
            "failed": len(self.failed),
        }
