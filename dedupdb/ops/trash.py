"""The system trash, used so that dedupdb can put back what it trashed.

Where the trash follows the freedesktop.org Trash specification (Linux and the other free desktops), a file is
trashed here as the specification says: `info/NAME.trashinfo` is created first (which reserves the name and
records the original path), then the file is renamed to `files/NAME` on its own filesystem. The place it went
is returned, so the journal can record it and an undo can rename it back. Elsewhere (macOS, Windows) the file
goes through send2trash, whose trash dedupdb cannot read back: `restorable()` says so before anything is done.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import quote, unquote

from dedupdb.ops.fileops import NAME_MAX

_INFO = ".trashinfo"


def restorable() -> bool:
    """Whether a file trashed by trash() can be put back by dedupdb on this platform."""
    return sys.platform not in ("darwin", "win32", "cygwin")


def home_trash() -> Path:
    data = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(data) / "Trash"


def _mount_point(path: Path) -> Path:
    path = path.resolve()
    device = path.stat().st_dev
    while path != path.parent and path.parent.stat().st_dev == device:
        path = path.parent
    return path


def _device(path: Path) -> int | None:
    """The device of path, or of its nearest existing parent."""
    for candidate in (path, *path.parents):
        try:
            return candidate.stat().st_dev
        except OSError:
            continue
    return None


def _volume_trashes(top: Path) -> Iterator[Path]:
    """The trash folders of the volume mounted at top, in the specification's order of preference."""
    uid = os.getuid()
    shared = top / ".Trash"
    try:
        st = os.lstat(shared)
        if stat.S_ISDIR(st.st_mode) and st.st_mode & stat.S_ISVTX:  # a symbolic link or no sticky bit: not used
            yield shared / str(uid)
    except OSError:
        pass
    yield top / f".Trash-{uid}"


def trash_folders(path: Path) -> list[tuple[Path, Path | None]]:
    """(trash folder, volume top or None for the home trash) where a file at path is trashed: the home trash
    for a file on its filesystem, else the trash folders of the file's own volume."""
    home = home_trash()
    if _device(home) == _device(path.parent):
        return [(home, None)]
    top = _mount_point(path.parent)
    return [(folder, top) for folder in _volume_trashes(top)]


def trash(path: Path) -> Path | None:
    """Move a file to the system trash; return where it now lies when dedupdb can put it back, else None."""
    if not restorable():
        from send2trash import send2trash

        send2trash(str(path))
        return None
    path = Path(os.path.abspath(path))
    last: OSError | None = None
    for folder, top in trash_folders(path):
        try:
            return _trash_into(path, folder, top)
        except OSError as exc:
            if exc.errno not in (errno.EACCES, errno.EPERM, errno.EROFS, errno.EXDEV):
                raise
            last = exc
    raise last if last is not None else OSError(errno.ENOENT, "no trash folder for this file", str(path))


def _trash_into(path: Path, folder: Path, top: Path | None) -> Path:
    files, info = folder / "files", folder / "info"
    for d in (folder, files, info):
        d.mkdir(mode=0o700, parents=d is folder and top is None, exist_ok=True)
    recorded = str(path) if top is None else os.path.relpath(path, top)
    body = f"[Trash Info]\nPath={quote(os.fsencode(recorded))}\nDeletionDate={time.strftime('%Y-%m-%dT%H:%M:%S')}\n"
    for n in range(1, 100_000):
        name = _trash_name(path.name, n)
        if (files / name).exists() or (files / name).is_symlink():
            continue
        try:
            fd = os.open(info / (name + _INFO), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            continue
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(body)
        try:
            os.rename(path, files / name)
        except BaseException:
            (info / (name + _INFO)).unlink(missing_ok=True)
            raise
        return files / name
    raise OSError(errno.EEXIST, "no free name in the trash", str(folder))


def _trash_name(name: str, n: int) -> str:
    """The n-th name tried for a file in a trash's files/ folder: its own, then 'report 2.txt', 'report 3.txt'...;
    the part before the suffix cut short (by whole characters) where the name and its info file's would be longer
    than a file name may be (the info file records the real name)."""
    stem, suffix = os.path.splitext(name)
    if len(os.fsencode(suffix)) > 32:  # a dot far back is no suffix to keep
        stem, suffix = name, ""
    tail = suffix if n == 1 else f" {n}{suffix}"
    room = NAME_MAX - len(os.fsencode(tail + _INFO))
    encoded = os.fsencode(stem)
    if len(encoded) > room:
        while room > 0 and encoded[room] & 0xC0 == 0x80:  # not inside a character's UTF-8 bytes
            room -= 1
        stem = os.fsdecode(encoded[:room])
    return stem + tail


def info_file(trashed: Path) -> Path:
    """The .trashinfo file that goes with a file in a trash's files/ folder."""
    return trashed.parent.parent / "info" / (trashed.name + _INFO)


def original_path(info: Path, top: Path | None) -> str | None:
    """The original path a .trashinfo file records, made absolute, or None when it cannot be read."""
    try:
        text = info.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("Path="):
            recorded = os.fsdecode(unquote(line[5:], errors="surrogateescape").encode("utf-8", "surrogateescape"))
            if top is not None and not os.path.isabs(recorded):
                recorded = os.path.join(top, recorded)
            return recorded
    return None


class TrashLookup:
    """Finds files in the trash by their original path (for journal entries that did not record where a file
    went: trashed by an older dedupdb, or interrupted before the journal said so). Each trash folder is read
    once."""

    def __init__(self) -> None:
        self._by_folder: dict[Path, dict[str, list[Path]]] = {}

    def candidates(self, original: Path) -> list[Path]:
        """Files in the trash that were at `original`, newest name first."""
        if not restorable():
            return []
        try:
            folders = trash_folders(Path(os.path.abspath(original)))
        except OSError:
            return []
        found: list[Path] = []
        for folder, top in folders:
            found += self._read(folder, top).get(str(original), [])
        return found

    def _read(self, folder: Path, top: Path | None) -> dict[str, list[Path]]:
        if folder not in self._by_folder:
            index: dict[str, list[Path]] = {}
            try:
                infos = sorted((folder / "info").iterdir(), key=lambda p: p.stat().st_mtime_ns, reverse=True)
            except OSError:
                infos = []
            for info in infos:
                if info.name.endswith(_INFO):
                    original = original_path(info, top)
                    if original is not None:
                        index.setdefault(original, []).append(folder / "files" / info.name[: -len(_INFO)])
            self._by_folder[folder] = index
        return self._by_folder[folder]
