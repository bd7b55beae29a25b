"""Reading documents as the text a person sees: PDF, DOCX, ODT, EPUB and RTF.

Each reader takes the file's bytes and gives its text, or raises ReadError with a one-line reason that starts
with the class of failure ('locked: needs a password', 'damaged: ...', 'no text layer', 'took longer than ...').
Extraction is bounded: the text obeys the file limit, a ZIP member that inflates past it is refused before it is
inflated (a zip bomb), and a deadline stops a reader that takes too long. The libraries are imported only when a
document of their kind is read.
"""

from __future__ import annotations

import io
import re
import signal
import threading
import time
import zipfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import PurePosixPath
from xml.etree import ElementTree

from dedupdb.config import size_text
from dedupdb.errors import ReadError
from dedupdb.ingest.sources import DOCUMENT_SUFFIXES, decode_bytes, html_to_text
EXTRACT_SECONDS = 60.0  # the default time a document may take to read


def is_document(name: str) -> bool:
    return PurePosixPath(name).suffix.lower() in DOCUMENT_SUFFIXES


class _TimedOut(Exception):
    pass


class _Limits:
    """The bounds of one extraction: the most text (in UTF-8 bytes) and a deadline, checked as the reader goes
    (between pages, members, paragraphs) and, in a main thread, by an alarm that interrupts a slow step."""

    def __init__(self, name: str, max_bytes: int, seconds: float) -> None:
        self.name = name
        self.max_bytes = max_bytes
        self.seconds = seconds
        self.ends = time.monotonic() + seconds
        self.size = 0

    def check(self) -> None:
        if time.monotonic() > self.ends:
            raise _TimedOut()

    def add(self, text: str) -> str:
        """Count text toward the limit; ReadError past it."""
        self.size += len(text.encode("utf-8", "surrogatepass"))
        if self.size > self.max_bytes:
            raise ReadError(self.name, f"its text is larger than the file limit of {size_text(self.max_bytes)} "
                                       "(raise it with --max-file-size)")
        self.check()
        return text


@contextmanager
def _alarm(seconds: float) -> Iterator[None]:
    """Interrupt the block after seconds with _TimedOut, where signals can (the main thread of a process that
    has no timer of its own running); elsewhere the readers' own checks stop it."""
    usable = (
        hasattr(signal, "setitimer")
        and threading.current_thread() is threading.main_thread()
        and signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    )
    if not usable:
        yield
        return

    def expire(signum, frame):
        raise _TimedOut()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def extract(name: str, data: bytes, max_bytes: int, seconds: float = EXTRACT_SECONDS) -> str:
    """The visible text of the document named name (its suffix says the format), from its bytes."""
    reader = _READERS[PurePosixPath(name).suffix.lower()]
    limits = _Limits(name, max_bytes, seconds)
    try:
        with _alarm(seconds):
            text = reader(data, limits)
    except _TimedOut:
        raise ReadError(name, f"took longer than {seconds:g} s to read (raise it with --extract-timeout)") from None
    except ReadError:
        raise
    except (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError) as exc:
        raise ReadError(name, f"damaged: not a readable ZIP container ({exc})") from None
    except ElementTree.ParseError as exc:
        raise ReadError(name, f"damaged: malformed XML ({exc})") from None
    except (MemoryError, RecursionError) as exc:
        raise ReadError(name, f"damaged: {type(exc).__name__}") from None
    except Exception as exc:  # the formats' libraries raise many kinds on damaged input (zlib, struct, seek...)
        raise ReadError(name, f"damaged: {' '.join(str(exc).split())[:200] or type(exc).__name__}") from None
    if not text.strip():
        raise ReadError(name, "no text layer (a scanned or empty document)")
    return text


# --- PDF --------------------------------------------------------------------------------------------------------

# A line break between two CJK characters is where a line was wrapped, not a space in the text; a hyphen at a line
# end joins the halves of a word broken there.
_CJK = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff\uff00-\uffef"
_WRAPPED_CJK = re.compile(f"(?<=[{_CJK}])[ \\t]*\\r?\\n[ \\t]*(?=[{_CJK}])")
_HYPHENATED = re.compile(r"(?<=[a-z])-\r?\n(?=[a-z])")


def unwrap(text: str) -> str:
    return _HYPHENATED.sub("", _WRAPPED_CJK.sub("", text))


def _pdf(data: bytes, limits: _Limits) -> str:
    import pypdfium2 as pdfium

    try:
        document = pdfium.PdfDocument(data)
    except pdfium.PdfiumError as exc:
        message = str(exc)
        if "password" in message.lower():
            raise ReadError(limits.name, "locked: needs a password") from None
        raise ReadError(limits.name, f"damaged: {message.split('(PDFium: ')[-1].rstrip(').') or message}") from None
    pages = []
    try:
        for index in range(len(document)):
            page = document[index]
            try:
                textpage = page.get_textpage()
                try:
                    pages.append(limits.add(unwrap(textpage.get_text_bounded().replace("\r\n", "\n"))))
                finally:
                    textpage.close()
            finally:
                page.close()
    except pdfium.PdfiumError as exc:
        raise ReadError(limits.name, f"damaged: {exc}") from None
    finally:
        document.close()
    return "\n\n".join(pages)


# --- ZIP containers (DOCX, ODT, EPUB) ---------------------------------------------------------------------------

def _open_zip(data: bytes, limits: _Limits) -> zipfile.ZipFile:
    archive = zipfile.ZipFile(io.BytesIO(data))
    if any(info.flag_bits & 0x1 for info in archive.infolist()):
        raise ReadError(limits.name, "locked: needs a password")
    return archive


def _member(archive: zipfile.ZipFile, name: str, limits: _Limits) -> bytes:
    """A member's bytes, refused before inflating when it says it is larger than the file limit, and cut off if it
    inflates past what it said (a ZIP's sizes are claims)."""
    try:
        info = archive.getinfo(name)
    except KeyError:
        raise ReadError(limits.name, f"damaged: {name} is missing") from None
    too_large = ReadError(limits.name, f"refused: {name} inflates past the file limit of "
                                       f"{size_text(limits.max_bytes)} (raise it with --max-file-size)")
    if info.file_size > limits.max_bytes:
        raise too_large
    with archive.open(info) as stream:
        data = stream.read(limits.max_bytes + 1)
    if len(data) > limits.max_bytes:
        raise too_large
    limits.check()
    return data


def _xml(data: bytes) -> ElementTree.Element:
    # ElementTree expands no external entities, and the expat it uses refuses exponential entity expansion.
    return ElementTree.fromstring(data)


_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"


def _docx(data: bytes, limits: _Limits) -> str:
    archive = _open_zip(data, limits)
    root = _xml(_member(archive, "word/document.xml", limits))
    paragraphs = []
    for paragraph in root.iter(f"{_W}p"):
        parts = []
        for node in paragraph.iter():
            if node.tag == f"{_W}t" and node.text:
                parts.append(node.text)
            elif node.tag == f"{_W}tab":
                parts.append("\t")
            elif node.tag in (f"{_W}br", f"{_W}cr"):
                parts.append("\n")
        paragraphs.append(limits.add("".join(parts)))
    return "\n".join(paragraphs)


_TEXT = "{urn:oasis:names:tc:opendocument:xmlns:text:1.0}"
_OFFICE = "{urn:oasis:names:tc:opendocument:xmlns:office:1.0}"


def _odf_text(node: ElementTree.Element, out: list[str]) -> None:
    """The text of an ODF element: spaces (text:s), tabs and line breaks are elements of their own."""
    if node.text:
        out.append(node.text)
    for child in node:
        if child.tag == f"{_TEXT}s":
            out.append(" " * int(child.get(f"{_TEXT}c", "1") or 1))
        elif child.tag == f"{_TEXT}tab":
            out.append("\t")
        elif child.tag == f"{_TEXT}line-break":
            out.append("\n")
        elif child.tag != f"{_OFFICE}annotation":
            _odf_text(child, out)
        if child.tail:
            out.append(child.tail)


def _odt(data: bytes, limits: _Limits) -> str:
    archive = _open_zip(data, limits)
    root = _xml(_member(archive, "content.xml", limits))
    body = root.find(f"{_OFFICE}body")
    paragraphs = []
    for node in (body if body is not None else root).iter():
        if node.tag in (f"{_TEXT}p", f"{_TEXT}h"):
            out: list[str] = []
            # Paragraphs nest (a note's paragraph inside a paragraph): each is read once, at the outermost.
            _odf_text(node, out)
            paragraphs.append(limits.add("".join(out)))
            node.clear()
    return "\n".join(paragraphs)


_CONTAINER = "{urn:oasis:names:tc:opendocument:xmlns:container}"
_OPF = "{http://www.idpf.org/2007/opf}"


def _epub(data: bytes, limits: _Limits) -> str:
    archive = _open_zip(data, limits)
    container = _xml(_member(archive, "META-INF/container.xml", limits))
    rootfile = container.find(f".//{_CONTAINER}rootfile")
    if rootfile is None or not rootfile.get("full-path"):
        raise ReadError(limits.name, "damaged: META-INF/container.xml names no package")
    package_path = PurePosixPath(rootfile.get("full-path"))
    package = _xml(_member(archive, str(package_path), limits))
    manifest = {
        item.get("id"): item.get("href")
        for item in package.iter(f"{_OPF}item")
        if item.get("id") and item.get("href")
    }
    chapters = []
    for itemref in package.iter(f"{_OPF}itemref"):
        href = manifest.get(itemref.get("idref"))
        if href is None or itemref.get("linear") == "no":
            continue
        member = _resolve(package_path.parent, href)
        markup = decode_bytes(_member(archive, member, limits), f"{limits.name}!{member}").text
        chapters.append(limits.add(html_to_text(markup)))
    return "\n\n".join(chapters)


def _resolve(folder: PurePosixPath, href: str) -> str:
    from urllib.parse import unquote

    parts: list[str] = []
    for part in (folder / unquote(href.split("#", 1)[0])).parts:
        if part == "..":
            if parts:
                parts.pop()
        elif part not in (".", ""):
            parts.append(part)
    return "/".join(parts)


# --- RTF --------------------------------------------------------------------------------------------------------

def _rtf(data: bytes, limits: _Limits) -> str:
    from striprtf.striprtf import rtf_to_text

    if not data.lstrip().startswith(b"{\\rtf"):
        raise ReadError(limits.name, "damaged: not an RTF document (no {\\rtf header)")
    # RTF is 7-bit: other characters are escapes that rtf_to_text decodes in the document's code page.
    text = rtf_to_text(data.decode("latin-1"), errors="replace")
    return limits.add(text)


_READERS: dict[str, Callable[[bytes, _Limits], str]] = {
    ".pdf": _pdf,
    ".docx": _docx,
    ".odt": _odt,
    ".epub": _epub,
    ".rtf": _rtf,
}
