"""File operations that leave every file either in its old place or in its new one, whatever interrupts them."""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

_PARTIAL = ".dedupdb-partial"


def safe_move(source: Path, destination: Path) -> None:
    """Move a file without ever leaving it half-written or gone: a rename where one filesystem allows it, else a
    copy to a temporary name beside the destination, flushed and renamed into place, before the source goes."""
    if destination.exists():
        raise FileExistsError(errno.EEXIST, "destination exists", str(destination))
    destination.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.rename(source, destination)
        return
    except OSError as exc:
        if exc.errno != errno.EXDEV:
            raise
    partial = destination.with_name(destination.name + _PARTIAL)
    try:
        shutil.copy2(source, partial)
        with open(partial, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(partial, destination)
    except BaseException:
        partial.unlink(missing_ok=True)
        raise
    os.unlink(source)


class NotIdentical(Exception):
    """Two files that were to be linked do not hold the same bytes (any more)."""


def replace_with_link(path: Path, original: Path) -> None:
    """Make path a hard link to original, atomically, and only while both hold the same bytes: a link made
    under a temporary name is compared byte for byte with path before it replaces it, so nothing that
    differs from the kept file is ever replaced by it."""
    temporary = path.with_name(path.name + _PARTIAL)
    temporary.unlink(missing_ok=True)
    os.link(original, temporary)
    try:
        if not same_bytes(temporary, path):
            raise NotIdentical(f"not byte-identical to {original} now; left alone")
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def replace_with_copy(path: Path, original: Path, mtime_ns: int) -> None:
    """Make path an independent copy of original again (undoing a hard link), with the given modification time."""
    temporary = path.with_name(path.name + _PARTIAL)
    try:
        shutil.copyfile(original, temporary)
        os.utime(temporary, ns=(mtime_ns, mtime_ns))
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def mirrored(path: Path, folder: Path) -> Path:
    """Where path goes under folder when the original layout is kept: /home/me/a.txt -> folder/home/me/a.txt."""
    return folder / path.relative_to(path.anchor)


def discard_partial(path: Path) -> None:
    """Remove what an interrupted copy or link to path left under its temporary name (never path itself)."""
    path.with_name(path.name + _PARTIAL).unlink(missing_ok=True)


def same_bytes(a: Path, b: Path, chunk: int = 1 << 20) -> bool:
    """Whether two files hold the same bytes, read now (filecmp would trust a cache keyed on size and time)."""
    with open(a, "rb") as fa, open(b, "rb") as fb:
        if os.fstat(fa.fileno()).st_size != os.fstat(fb.fileno()).st_size:
            return False
        while True:
            x, y = fa.read(chunk), fb.read(chunk)
            if x != y:
                return False
            if not x:
                return True
