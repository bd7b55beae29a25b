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

from dedupdb.config import MAX_FILE_BYTES, size_text
from dedupdb.errors import ReadError
from dedupdb.text.normalize import valid_utf8

TEXT_SUFFIXES = frozenset(
    ".txt .md .markdown .rst .org .tex .html .htm .xml .json .jsonl .csv .tsv .log .eml".split()
)
# Skipped by name, unread: files of these types are never text. A file of any other type, or without a suffix
# (README, LICENSE, foo.Debian, MPL-2.0), is taken when its first bytes read as text.
BINARY_SUFFIXES = frozenset(
    """.jpg .jpeg .png .gif .bmp .tif .tiff .webp .ico .icns .heic .heif .psd .raw .cr2 .nef .dng .svgz
    .mp3 .wav .flac .ogg .oga .opus .m4a .aac .wma .aiff .mid .midi
    .mp4 .m4v .mkv .mov .avi .wmv .flv .webm .mpg .mpeg .3gp
    .zip .tar .tgz .tbz2 .txz .7z .rar .lz .lz4 .lzma .z .cab .arj .jar .war .ear .apk .ipa .aar .deb .rpm .dmg
    .iso .img .whl .egg .msi .pkg .snap .crx .xpi
    .doc .xls .xlsx .ppt .pptx .ods .odp .odg .pages .numbers .key .mobi .azw .azw3 .djvu
    .exe .dll .so .dylib .o .obj .a .lib .ko .bin .elf .class .pyc .pyo .pyd .wasm .beam .dex
    .ttf .otf .woff .woff2 .eot
    .sqlite .sqlite3 .db .mdb .accdb .dbf .parquet .feather .arrow .avro .orc .npy .npz .pkl .pickle .h5 .hdf5
    .mat .pt .pth .onnx .safetensors .ckpt .tflite .gguf
    .swf .blend .fbx .glb .stl .3ds .dwg""".split()
)
# Read by their own readers (ingest/documents.py, ingest/mail.py) as the text a person sees.
DOCUMENT_SUFFIXES = frozenset({".pdf", ".docx", ".odt", ".epub", ".rtf"})
MAIL_SUFFIXES = frozenset({".eml", ".mbox", ".mbx"})
HTML_SUFFIXES = frozenset({".html", ".htm"})
# A text file compressed ('corpus.jsonl.gz') is found by the walk too; only record files are read compressed.
COMPRESSED_SUFFIXES = frozenset({".gz", ".bz2", ".xz", ".zst"})
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


@dataclass(frozen=True)
class WalkRules:
    """Which files a walk through folders takes. By default: files of a text type by suffix, and files of another
    type or none whose first bytes read as text. `include` globs add files whatever their type; `only` globs
    replace the default choice (only files matching one are taken). With follow_symlinks, links to files and
    folders are followed, each link by its own path; a link back to a folder above it or above the root (a loop)
    is skipped."""

    include: tuple[str, ...] = ()
    only: tuple[str, ...] = ()
    follow_symlinks: bool = False


def _matches(path: Path, patterns: tuple[str, ...]) -> bool:
    text = path.as_posix()
    return any(fnmatch.fnmatch(path.name, p) or fnmatch.fnmatch(text, p) for p in patterns)


def _wanted_by_name(path: Path, rules: WalkRules) -> bool | None:
    """True or False by the name alone; None when only the content can tell."""
    if rules.include and _matches(path, rules.include):
        return True
    if rules.only:
        return _matches(path, rules.only)
    suffix = path.suffix.lower()
    if suffix in COMPRESSED_SUFFIXES:
        return path.with_suffix("").suffix.lower() in TEXT_SUFFIXES
    if suffix in TEXT_SUFFIXES or suffix in DOCUMENT_SUFFIXES or suffix in MAIL_SUFFIXES:
        return True
    if suffix in BINARY_SUFFIXES:
        return False
    return None


def _not_text(path: Path) -> str | None:
    """Why a file of no known type is not text, judged from its first few KiB; None when they read as text. A
    file that cannot be opened is left to the read, which reports it as failed."""
    try:
        with open(path, "rb") as stream:
            head = stream.read(_SNIFF_BYTES)
    except OSError:
        return None
    try:
        decode_bytes(head, str(path))
    except ReadError as exc:
        return exc.reason
    return None


def _identity(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino


def _ancestors(root: Path) -> set[tuple[int, int]]:
    """The identities of the folders above root: by the path given, and by its real path (root may be a link)."""
    folders = {*Path(os.path.abspath(root)).parents, *Path(os.path.realpath(root)).parents}
    return {identity for identity in map(_identity, folders) if identity is not None}


def walk(root: Path, rules: WalkRules = WalkRules(), exclude: tuple[str, ...] = ()) -> Iterator[Candidate | Skipped]:
    """Every file under root (or root itself) that may be text, and every one passed over with its reason."""
    if root.is_file():
        yield from _consider(root, rules, exclude, explicit=True)
        return
    if root.exists() and not root.is_dir():  # a named pipe, a device: nothing to walk, and no file to read
        yield Skipped(root, "not a regular file")
        return
    follow = rules.follow_symlinks
    # Followed links can lead back up: each folder's own identity and those of the folders above it, by the path
    # os.walk gives it (a link's path, for a followed link). The folders above the root count too: a link to one
    # of them would walk folders outside the root (and the root again, through it).
    top = {_identity(root), *(_ancestors(root) if follow else ())}
    above: dict[str, frozenset] = {os.fspath(root): frozenset(top)}
    unreadable: list[OSError] = []
    for directory, subdirs, files in os.walk(root, onerror=unreadable.append, followlinks=follow):
        while unreadable:
            error = unreadable.pop()
            yield Skipped(Path(error.filename), f"cannot read folder: {error.strerror or error}")
        base = Path(directory)
        chain = above.pop(directory, frozenset())
        kept = []
        for name in sorted(subdirs):
            path = base / name
            if not valid_utf8(name):
                yield Skipped(path, "name is not valid UTF-8")
            elif not follow and path.is_symlink():
                yield Skipped(path, "symbolic link")
            elif name.startswith(".") and not _maildir_folder(path):
                yield Skipped(path, "hidden folder")
            elif _matches(path, exclude):
                yield Skipped(path, "excluded")
            elif not follow:
                kept.append(name)
            else:
                identity = _identity(path)
                if identity is None:
                    yield Skipped(path, "cannot stat")
                elif identity in chain:
                    yield Skipped(path, "symbolic link loop: leads back to a folder above it")
                else:
                    above[os.path.join(directory, name)] = chain | {identity}
                    kept.append(name)
        subdirs[:] = kept
        for name in sorted(files):
            yield from _consider(base / name, rules, exclude, explicit=False)
    for error in unreadable:  # the root itself, which os.walk could not list
        yield Skipped(Path(error.filename), f"cannot read folder: {error.strerror or error}")


def _maildir_folder(path: Path) -> bool:
    """A Maildir++ folder ('.Sent', '.Archive'): hidden by its name, but mail the user keeps."""
    return (path / "cur").is_dir() and (path.parent / "cur").is_dir()


def readable_name(path: str | Path) -> str:
    """A name that may not be valid UTF-8, shown with U+FFFD where its bytes do not decode."""
    return os.fsencode(path).decode("utf-8", "replace")


def _consider(path: Path, rules: WalkRules, exclude: tuple[str, ...], explicit: bool):
    if not valid_utf8(str(path)):
        yield Skipped(Path(readable_name(path)), "name is not valid UTF-8")
        return
    if not explicit and path.name.startswith("."):
        yield Skipped(path, "hidden file")
        return
    if _matches(path, exclude):
        yield Skipped(path, "excluded")
        return
    wanted = True if explicit else _wanted_by_name(path, rules)
    if wanted is False:
        yield Skipped(path, "not a text file type")
        return
    try:
        # One lstat answers whether it is a link, a regular file, and its size and time (a link given
        # explicitly, or any when links are followed, is looked through with stat).
        st = path.stat() if explicit or rules.follow_symlinks else path.lstat()
    except OSError as exc:
        broken = isinstance(exc, FileNotFoundError) and path.is_symlink()
        yield Skipped(path, "broken symbolic link" if broken else f"cannot stat: {exc.strerror or exc}")
        return
    if stat.S_ISLNK(st.st_mode):
        # The link's target is indexed where it lies; indexing the link too would let a cleanup keep the
        # link and remove the file it points to (when links are followed, a file and a link to it are one file
        # to the cleanup, which never removes either: see database._with_links).
        yield Skipped(path, "symbolic link")
        return
    if not stat.S_ISREG(st.st_mode):
        yield Skipped(path, "not a regular file")
        return
    if wanted is None:
        why = _not_text(path)
        if why is not None:
            yield Skipped(path, why)
            return
    yield Candidate(path, st.st_size, st.st_mtime_ns)


def read_bytes(path: Path, max_bytes: int = MAX_FILE_BYTES) -> bytes:
    """A file's bytes; ReadError for one larger than max_bytes, naming the option that raises the limit."""
    too_large = f"larger than the file limit of {size_text(max_bytes)} (raise it with --max-file-size)"
    try:
        with open(path, "rb") as stream:
            if os.fstat(stream.fileno()).st_size > max_bytes:
                raise ReadError(str(path), too_large)
            data = stream.read()
        if len(data) > max_bytes:  # grew while it was read
            raise ReadError(str(path), too_large)
        return data
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
_PAST_BOM = {  # the codec that reads what follows each BOM
    codecs.BOM_UTF32_LE: "utf-32-le",
    codecs.BOM_UTF32_BE: "utf-32-be",
    codecs.BOM_UTF8: "utf-8",
    codecs.BOM_UTF16_LE: "utf-16-le",
    codecs.BOM_UTF16_BE: "utf-16-be",
}
# Detectors name legacy Chinese encodings by their subsets; GB18030 decodes them all.
_SUPERSETS = {"gb2312": "gb18030", "gbk": "gb18030", "cp936": "gb18030", "big5": "big5hkscs", "ascii": "utf-8"}
_COMMON_SINGLE_BYTE = ("cp1252", "latin_1", "iso8859_15")
_DETECT_BYTES = 256 * 1024  # what the detector is shown of a text


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


@dataclass(frozen=True)
class Decoded:
    text: str
    encoding: str
    replaced: int = 0  # bytes that did not decode, each run of them replaced by U+FFFD

    @property
    def note(self) -> str | None:
        """What the reader should know about this decoding, if anything."""
        if not self.replaced:
            return None
        noun = "byte" if self.replaced == 1 else "bytes"
        return f"{self.replaced} undecodable {noun} replaced by U+FFFD (read as {self.encoding})"


def few_replacements(characters: int) -> int:
    """How many replacement characters a text may hold and still be read as text with a few bad bytes: one in
    1,000 characters, and 8 in a shorter text (a byte dropped inside a 3-byte character can spoil 4 places)."""
    return max(8, characters // 1000)


def _decode_counting(
    data: bytes, encoding: str, tolerant: bool = False, skip: int = 0, name: str | None = None
) -> Decoded | None:
    """data (past its first skip bytes, a BOM) decoded with every undecodable run of bytes replaced by U+FFFD,
    counting the bytes replaced; with tolerant, None when more than a few places (few_replacements) need it.
    The codec must not look for a BOM: decoding goes on in pieces after each bad byte."""
    # A text has at most as many characters as bytes: stopping past that bound never refuses one that fits.
    allowed = few_replacements(len(data)) if tolerant else None
    view = memoryview(data)[skip:]
    parts: list[str] = []
    position = replaced = places = 0
    while True:
        try:
            parts.append(str(view[position:], encoding))
            break
        except UnicodeDecodeError as exc:
            parts.append(str(view[position : position + exc.start], encoding))
            parts.append("\ufffd")
            replaced += exc.end - exc.start
            places += 1
            position += exc.end
            if allowed is not None and places > allowed:
                return None
    text = "".join(parts)
    if tolerant and places > few_replacements(len(text)):
        return None
    return Decoded(text, name or encoding, replaced)


def _non_ascii(text: str) -> int:
    return len(text) - len(text.encode("ascii", "ignore"))


def _mostly_utf8(data: bytes) -> Decoded | None:
    """UTF-8 with a few stray bytes: read as UTF-8 when it holds at least as many valid multi-byte characters as
    places replaced (text in a legacy encoding shows almost none, and goes on to the detector)."""
    decoded = _decode_counting(data, "utf-8", tolerant=True)
    if decoded is None:
        return None
    places = decoded.text.count("\ufffd")
    return decoded if _non_ascii(decoded.text) - places >= places else None


def _legacy_with_bad_bytes(data: bytes) -> Decoded | None:
    """Text in a legacy encoding with a few stray bytes. GB18030 reads almost any byte pair as some character, so
    a rough reading in it drops the bytes that no double-byte encoding can hold; the detector then names the
    encoding of what is left (GB18030, Big5, Shift-JIS, EUC-KR...), and the text is read in that one."""
    rough = _decode_counting(data, "gb18030", tolerant=True)
    if rough is None:
        return None
    cleaned = rough.text[:_DETECT_BYTES].replace("\ufffd", "").encode("gb18030")[:_DETECT_BYTES]
    from charset_normalizer import from_bytes  # only for bytes that are not UTF-8: most adds never need it

    matches = list(from_bytes(cleaned))
    if not matches:
        return None
    return _decode_counting(data, _best_encoding(matches), tolerant=True)


def _best_encoding(matches) -> str:
    best = min(matches, key=lambda m: (m.chaos, -m.coherence))
    # Short Western text fits several single-byte code pages equally well; the
    # detector's pick among them is arbitrary, so the most widespread one wins
    # whenever it reads about as cleanly.
    for match in matches:
        if match.encoding in _COMMON_SINGLE_BYTE and match.chaos <= best.chaos + 0.1:
            best = match
            break
    return _SUPERSETS.get(best.encoding.lower(), best.encoding)


def decode(data: bytes, path: str = "<bytes>") -> tuple[str, str]:
    """Text and the encoding it was read with; raises ReadError for binary data."""
    decoded = decode_bytes(data, path)
    return decoded.text, decoded.encoding


def decode_bytes(data: bytes, path: str = "<bytes>") -> Decoded:
    """Text, the encoding it was read with and how many undecodable bytes were replaced; ReadError for binary
    data. Text with a few bad bytes (see few_replacements) is read with them replaced, never dropped."""
    for bom, encoding in _BOMS:
        if data.startswith(bom):
            return _decode_counting(data, _PAST_BOM[bom], skip=len(bom), name=encoding)
    utf16 = _utf16_without_bom(data)
    if utf16:
        return _decode_counting(data, utf16)
    if looks_binary(data):
        raise ReadError(path, "binary file")
    try:
        return Decoded(data.decode("utf-8"), "utf-8")
    except UnicodeDecodeError:
        pass
    mostly_utf8 = _mostly_utf8(data)
    if mostly_utf8 is not None:
        return mostly_utf8
    from charset_normalizer import from_bytes

    matches = list(from_bytes(data[:_DETECT_BYTES]))
    if not matches:
        # The detector decodes strictly, so one stray byte rules every encoding out.
        decoded = _decode_counting(data, "utf-8", tolerant=True) or _legacy_with_bad_bytes(data)
        if decoded is None:
            raise ReadError(path, "binary file (no text encoding fits)")
        return decoded
    # The detector saw at most the first 256 KiB: bad bytes past them are counted here.
    return _decode_counting(data, _best_encoding(matches))


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


def plain_decoded(path: Path, data: bytes) -> Decoded:
    """A text file decoded; HTML reduced to its visible text (documents and mail have readers of their own:
    ingest/readers.py chooses)."""
    decoded = decode_bytes(data, str(path))
    if path.suffix.lower() in HTML_SUFFIXES:
        decoded = Decoded(html_to_text(decoded.text), decoded.encoding, decoded.replaced)
    return decoded


def file_identity(path: str) -> tuple[int, int] | None:
    """(device, inode) of a file, the same for every hard link to it; None when it cannot be looked at."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_dev, st.st_ino
