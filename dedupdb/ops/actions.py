"""The cleanup actions: one enumeration, each member with what it checks before acting, what it does, and how
it is undone. A new action (a symbolic link, a reflink) is one more handler here and one more name in the
journal's CHECK constraint; the command line, the plan and the renderer read the names from Action.

Every handler works on one file whose bytes were checked just before (cleanup.py) and returns where the file
went, which the journal records so that the undo can find it.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from dedupdb.ops.fileops import (
    NotIdentical,
    discard_partial,
    mirrored,
    replace_with_copy,
    replace_with_link,
    safe_move,
)
from dedupdb.ops.trash import TrashLookup, info_file
from dedupdb.ops.trash import restorable as trash_restorable
from dedupdb.ops.trash import trash

CHANGED = "restored, but edited since the cleanup"  # an undo that gave back bytes edited while away
NEVER = "never"  # the start of an undo's answer for an entry planned but never carried out: nothing to report

__all__ = ["Action", "CHANGED", "NEVER", "NotIdentical", "holds"]


def holds(path: Path, digest: str) -> bool:
    """Whether the file at path holds the bytes of this digest (hashing.bytes_hash), read now."""
    from dedupdb.text.hashing import bytes_hash  # numpy comes with it: the command line reads Action without it

    with open(path, "rb") as f:
        return bytes_hash(f.read()) == digest


@dataclass(frozen=True)
class Entry:
    """One journal entry as an undo reads it."""

    source: Path                 # where the file was
    destination: Path | None     # where it went (move, trash) or the kept file it was linked to (hardlink)
    mtime_ns: int
    digest: str
    status: str                  # 'done', or 'planned' when interrupted before the journal said done
    target: Path | None = None   # the folder the batch moved files into (move)


class _Handler:
    removes_from_index = True  # the path no longer holds the document afterwards
    restorable = True

    def destination(self, acted: Path, kept: Path, to: Path | None) -> Path | None:
        """Where the file goes, known before acting (recorded when the batch is planned), or None."""
        return None

    def check(self, acted_digest: str, kept_digest: str, acted: Path, kept: Path) -> str | None:
        """Why this action cannot be done on these two files, beyond the checks every action makes."""
        return None

    def do(self, source: Path, destination: Path | None) -> Path | None:
        raise NotImplementedError

    def undo(self, entry: Entry, lookup: TrashLookup) -> str | None:
        """Put one file back; None when done, else why not (or CHANGED)."""
        raise NotImplementedError


class _Move(_Handler):
    def destination(self, acted: Path, kept: Path, to: Path | None) -> Path | None:
        assert to is not None
        return mirrored(acted, to)

    def do(self, source: Path, destination: Path | None) -> Path | None:
        assert destination is not None
        discard_partial(destination)  # left by a copy that an earlier run did not finish
        safe_move(source, destination)
        return destination

    def undo(self, entry: Entry, lookup: TrashLookup) -> str | None:
        result = self._move_back(entry)
        if result in (None, CHANGED) and entry.destination is not None and entry.target is not None:
            _remove_empty_folders(entry.destination.parent, entry.target)
        return result

    @staticmethod
    def _move_back(entry: Entry) -> str | None:
        source, destination = entry.source, entry.destination
        if source.exists():
            if destination is None or not destination.exists():
                # Never moved at all, or put back by an undo that stopped before it could say so.
                if entry.status == "planned":
                    return "never moved"
                return None if holds(source, entry.digest) else "something else is at the original place now"
            return "something else is at the original place now; the file stays at " + str(destination)
        if destination is None or not destination.exists():
            return f"not found at {destination}"
        edited = not holds(destination, entry.digest)
        safe_move(destination, source)
        os.utime(source, ns=(entry.mtime_ns, entry.mtime_ns))
        return CHANGED if edited else None


def _remove_empty_folders(folder: Path, top: Path) -> None:
    """Remove folder and its parents up to top, top included, while they are empty: what a move made to mirror
    the original layout. A folder holding anything stays."""
    while folder == top or folder.is_relative_to(top):
        try:
            folder.rmdir()
        except OSError:
            return
        if folder == top:
            return
        folder = folder.parent


class _Trash(_Handler):
    @property
    def restorable(self) -> bool:  # type: ignore[override]
        return trash_restorable()

    def do(self, source: Path, destination: Path | None) -> Path | None:
        return trash(source)

    def undo(self, entry: Entry, lookup: TrashLookup) -> str | None:
        source, trashed = entry.source, entry.destination
        if source.exists():
            if entry.status == "planned":
                return "never moved to the trash"
            return "something else is at the original place now; the file stays in the trash" + (
                f" at {trashed}" if trashed else "")
        if not trash_restorable():
            return "in the system trash: restore it from there"
        if trashed is not None:
            if not trashed.exists():
                return f"no longer in the trash (it was at {trashed})"
            edited = not holds(trashed, entry.digest)
            safe_move(trashed, source)
            info_file(trashed).unlink(missing_ok=True)
            return CHANGED if edited else None
        # Where it went was not recorded (an older dedupdb, or an interrupted cleanup): find it by its original
        # path and its bytes.
        for candidate in lookup.candidates(source):
            if candidate.is_file() and holds(candidate, entry.digest):
                safe_move(candidate, source)
                info_file(candidate).unlink(missing_ok=True)
                return None
        return "never moved to the trash" if entry.status == "planned" else "not found in the trash with the bytes it had"


class _Hardlink(_Handler):
    removes_from_index = False  # the same bytes stay at the same path: still indexed

    def destination(self, acted: Path, kept: Path, to: Path | None) -> Path | None:
        return kept

    def check(self, acted_digest: str, kept_digest: str, acted: Path, kept: Path) -> str | None:
        if acted_digest != kept_digest:
            return "not byte-identical to the kept file"
        if os.path.samefile(kept, acted):
            return "already a hard link to the copy kept"
        return None

    def do(self, source: Path, destination: Path | None) -> Path | None:
        assert destination is not None
        replace_with_link(source, destination)  # compares the bytes again at the moment of linking
        return destination

    def undo(self, entry: Entry, lookup: TrashLookup) -> str | None:
        # Give the path its own copy of its bytes back, which are the kept file's bytes (they were
        # byte-identical when linked) only while the kept file still holds them.
        source, destination = entry.source, entry.destination
        if not source.exists():
            return "the file is gone"
        if destination is None or not destination.exists():
            return "the kept file it was linked to is gone"
        if not os.path.samefile(source, destination):
            if entry.status == "planned" or holds(source, entry.digest):
                return "never linked" if entry.status == "planned" else None
            return "something else is at the original place now; left alone"
        if not holds(destination, entry.digest):
            return f"the kept file {destination} was edited since: the original bytes are gone; left as a link"
        replace_with_copy(source, destination, entry.mtime_ns)
        return None


class Action(str, Enum):
    """What a cleanup does with each file it acts on. `list` only names them."""

    list = "list"
    move = "move"
    trash = "trash"
    hardlink = "hardlink"

    @property
    def changes_files(self) -> bool:
        return self is not Action.list

    @property
    def handler(self) -> _Handler:
        if self is Action.list:
            raise ValueError("list changes no file")
        return _HANDLERS[self]

    @property
    def undoable(self) -> bool:
        """Whether 'dedupdb undo' can put back what this action did, on this system."""
        return self.changes_files and self.handler.restorable

    @classmethod
    def named(cls, name: str) -> "Action":
        try:
            return cls(name)
        except ValueError:
            raise ValueError(f"unknown action {name!r}; use one of {', '.join(a.value for a in cls)}") from None


_HANDLERS: dict[Action, _Handler] = {Action.move: _Move(), Action.trash: _Trash(), Action.hardlink: _Hardlink()}
