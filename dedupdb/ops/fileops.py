"""File operations that leave every file either in its old place or in its new one, whatever interrupts them."""

from __future__ import annotations

import errno
import os
import shutil
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

import xxhash

_PARTIAL = ".dedupdb-partial"
NAME_MAX = 255  # bytes in a file name, on the file systems of Linux, macOS and Windows alike


def partial_path(path: Path) -> Path:
    """The temporary name beside path that a copy or a link is made under before it is renamed into place: path's
    name and a suffix, or a name made from a hash of it where that would be longer than a file name may be (else
    a file of a long name could never be moved or linked)."""
    name = path.name + _PARTIAL
    if len(os.fsencode(name)) > NAME_MAX:
        name = f".{xxhash.xxh64_hexdigest(os.fsencode(path.name))}{_PARTIAL}"
    return path.with_name(name)


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
    partial = partial_path(destination)
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
    temporary = partial_path(path)
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
    temporary = partial_path(path)
    try:
        shutil.copyfile(original, temporary)
        os.utime(temporary, ns=(mtime_ns, mtime_ns))
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def write_named_file(target: Path, write: Callable[[TextIO], int]) -> int:
    """Write the text a command was asked to put in a file (write(stream) writes it, and returns what it counts).
    A new file, or a plain one, is written under a temporary name beside it and renamed over it at the end, so that
    an interrupted write leaves the old one whole; its permissions are the old file's (a file only its owner may
    read stays so). A device or a pipe (/dev/stdout, a shell's '>(...)'), and a file of several names (hard links),
    are written in place, as a shell's '>' writes them: renamed over, the device would be a plain file and the
    other names would keep the old text."""
    try:
        found = os.stat(target)
    except FileNotFoundError:
        found = None
    if found is not None and (not stat.S_ISREG(found.st_mode) or found.st_nlink > 1):
        with open(target, "w", encoding="utf-8", newline="") as out:
            return write(out)
    partial = partial_path(target)
    try:
        with open(partial, "w", encoding="utf-8", newline="") as out:
            count = write(out)
        if found is not None:
            os.chmod(partial, stat.S_IMODE(found.st_mode))
        os.replace(partial, target)
        return count
    finally:
        partial.unlink(missing_ok=True)


def mirrored(path: Path, folder: Path) -> Path:
    """Where path goes under folder when the original layout is kept: /home/me/a.txt -> folder/home/me/a.txt."""
    return folder / path.relative_to(path.anchor)


def discard_partial(path: Path) -> None:
    """Remove what an interrupted copy or link to path left under its temporary name (never path itself)."""
    partial_path(path).unlink(missing_ok=True)


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
