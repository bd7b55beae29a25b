"""Walking folders and reading files: which files are text, and decoding their bytes to str."""

from __future__ import annotations

import codecs
import fnmatch
import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path

from charset_normalizer import from_bytes

from .config import MAX_FILE_BYTES
from .errors import ReadError

TEXT_SUFFIXES = frozenset(
    ".txt .md .markdown .rst .org .tex .html .htm .xml .json .jsonl .csv .tsv .log .eml".split()
)
HTML_SUFFIXES = frozenset({".html", ".htm"})
_SNIFF_BYTES = 8192
# Control bytes other than tab, newline, form feed, carriage return and escape are rare in text.
_CONTROL_BYTES = bytes(b for b in range(32) if b not in (9, 10, 12, 13, 27))


@dataclass(frozen=True)
class Candidate:
    """A file found by the walk that should be considered for indexing."""

    path: Path
    size: int
    mtime_ns: int


@dataclass(frozen=True)
class Skipped:
    path: Path
    reason: str


def _matches(path: Path, patterns: tuple[str, ...]) -> bool:
    text = path.as_posix()
    return any(fnmatch.fnmatch(path.name, p) or fnmatch.fnmatch(text, p) for p in patterns)


def _wanted_by_name(path: Path, include: tuple[str, ...]) -> bool:
    if include:
        return _matches(path, include)
    return path.suffix.lower() in TEXT_SUFFIXES or path.suffix == ""


def walk(
    root: Path, include: tuple[str, ...] = (), exclude: tuple[str, ...] = ()
) -> Iterator[Candidate | Skipped]:
    """Every file under root (or root itself) that may be text, and every one passed over with its reason."""
    if root.is_file():
        yield from _consider(root, include, exclude, explicit=True)
        return
    unreadable: list[OSError] = []
    for directory, subdirs, files in os.walk(root, onerror=unreadable.append):
        while unreadable:
            error = unreadable.pop()
            yield Skipped(Path(error.filename), f"cannot read folder: {error.strerror or error}")
        base = Path(directory)
        kept = []
        for name in sorted(subdirs):
            if not _valid_name(name):
                yield Skipped(base / name, "name is not valid UTF-8")
            elif (base / name).is_symlink():
                yield Skipped(base / name, "symbolic link")
            elif name.startswith("."):
                yield Skipped(base / name, "hidden folder")
            elif _matches(base / name, exclude):
                yield Skipped(base / name, "excluded")
            else:
                kept.append(name)
        subdirs[:] = kept
        for name in sorted(files):
            yield from _consider(base / name, include, exclude, explicit=False)


def _valid_name(name: str) -> bool:
    """Names that are not valid UTF-8 reach Python with surrogates, which the store cannot hold."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _consider(path: Path, include: tuple[str, ...], exclude: tuple[str, ...], explicit: bool):
    if not _valid_name(str(path)):
        yield Skipped(Path(os.fsdecode(os.fsencode(path)).encode("utf-8", "replace").decode("utf-8")),
                      "name is not valid UTF-8")
        return
    if not explicit and path.name.startswith("."):
        yield Skipped(path, "hidden file")
        return
    if _matches(path, exclude):
        yield Skipped(path, "excluded")
        return
    if not explicit and not _wanted_by_name(path, include):
        yield Skipped(path, "not a text file type")
        return
    try:
        # One lstat answers whether it is a link, a regular file, and its size and time (a link given
        # explicitly is followed).
        st = path.stat() if explicit else path.lstat()
    except OSError as exc:
        yield Skipped(path, f"cannot stat: {exc.strerror or exc}")
        return
    if stat.S_ISLNK(st.st_mode):
        # The link's target is indexed where it lies; indexing the link too would let a cleanup keep the
        # link and remove the file it points to.
        yield Skipped(path, "symbolic link")
        return
    if not stat.S_ISREG(st.st_mode):
        yield Skipped(path, "not a regular file")
        return
    yield Candidate(path, st.st_size, st.st_mtime_ns)


def read_bytes(path: Path) -> bytes:
    try:
        size = path.stat().st_size
        if size > MAX_FILE_BYTES:
            raise ReadError(str(path), f"larger than {MAX_FILE_BYTES // (1024 * 1024)} MiB")
        return path.read_bytes()
    except PermissionError:
        raise ReadError(str(path), "permission denied") from None
    except FileNotFoundError:
        raise ReadError(str(path), "vanished while reading") from None
    except IsADirectoryError:
        raise ReadError(str(path), "is a directory") from None
    except OSError as exc:
        raise ReadError(str(path), exc.strerror or str(exc)) from None


_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
# Detectors name legacy Chinese encodings by their subsets; GB18030 decodes them all.
_SUPERSETS = {"gb2312": "gb18030", "gbk": "gb18030", "cp936": "gb18030", "big5": "big5hkscs", "ascii": "utf-8"}
_COMMON_SINGLE_BYTE = ("cp1252", "latin_1", "iso8859_15")


def _utf16_without_bom(data: bytes) -> str | None:
    """UTF-16 text without a BOM shows NUL bytes in every other position."""
    head = data[:_SNIFF_BYTES]
    if len(head) < 4 or len(head) % 2:
        return None
    even, odd = head[0::2].count(0), head[1::2].count(0)
    half = len(head) // 2
    if odd > 0.3 * half and even < 0.05 * half:
        return "utf-16-le"
    if even > 0.3 * half and odd < 0.05 * half:
        return "utf-16-be"
    return None


def looks_binary(data: bytes) -> bool:
    head = data[:_SNIFF_BYTES]
    if any(head.startswith(bom) for bom, _ in _BOMS) or _utf16_without_bom(data):
        return False
    if b"\x00" in head:
        return True
    controls = len(head) - len(head.translate(None, _CONTROL_BYTES))
    return controls > 0.1 * max(1, len(head))


def decode(data: bytes, path: str = "<bytes>") -> tuple[str, str]:
    """Text and the encoding it was read with; raises ReadError for binary data."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return data.decode(encoding, errors="replace"), encoding
    utf16 = _utf16_without_bom(data)
    if utf16:
        return data.decode(utf16, errors="replace"), utf16
    if looks_binary(data):
        raise ReadError(path, "binary file")
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        pass
    matches = list(from_bytes(data[: 256 * 1024]))
    if not matches:
        raise ReadError(path, "binary file (no text encoding fits)")
    best = min(matches, key=lambda m: (m.chaos, -m.coherence))
    # Short Western text fits several single-byte code pages equally well; the
    # detector's pick among them is arbitrary, so the most widespread one wins
    # whenever it reads about as cleanly.
    for match in matches:
        if match.encoding in _COMMON_SINGLE_BYTE and match.chaos <= best.chaos + 0.1:
            best = match
            break
    encoding = _SUPERSETS.get(best.encoding.lower(), best.encoding)
    return data.decode(encoding, errors="replace"), encoding


class _VisibleText(HTMLParser):
    _HIDDEN = frozenset({"script", "style", "head", "template", "noscript"})
    _BREAKS = frozenset({"p", "div", "br", "li", "tr", "h1", "h2", "h3", "h4", "h5", "h6", "section", "article"})

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.parts: list[str] = []
        self._hidden_depth = 0

    def handle_starttag(self, tag, attrs):
        if tag in self._HIDDEN:
            self._hidden_depth += 1
        elif tag in self._BREAKS:
            self.parts.append("\n")

    def handle_endtag(self, tag):
        if tag in self._HIDDEN and self._hidden_depth:
            self._hidden_depth -= 1
        elif tag in self._BREAKS:
            self.parts.append("\n")

    def handle_data(self, data):
        if not self._hidden_depth:
            self.parts.append(data)


def html_to_text(markup: str) -> str:
    """The text a browser would show: tags, scripts and styles removed, entities decoded."""
    parser = _VisibleText()
    parser.feed(markup)
    parser.close()
    return "".join(parser.parts)


def file_text(path: Path, data: bytes) -> str:
    """Decoded text of a file; HTML reduced to its visible text."""
    text, _ = decode(data, str(path))
    if path.suffix.lower() in HTML_SUFFIXES:
        text = html_to_text(text)
    return text


def decode_file(path: Path) -> str:
    """A single file's text, for a query: read, decoded and (for HTML) reduced to visible text."""
    if not path.is_file():
        raise ReadError(str(path), "no such file")
    return file_text(path, read_bytes(path))
