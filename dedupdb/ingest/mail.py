"""Reading mail: mbox mailboxes, single messages (.eml, a Maildir's files), each message as the text a person
reads: its subject and its decoded body, with attachments of a readable type as documents of their own.

Headers other than the subject are not text: two messages of one mailing list are not alike for their headers.
Splitting a mailbox runs where the file is read; parsing a message (decoding, attachments) runs in the workers.
"""

from __future__ import annotations

import email
import email.policy
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from email.header import decode_header, make_header
from email.message import Message
from pathlib import Path, PurePosixPath
from typing import BinaryIO

from dedupdb.config import size_text
from dedupdb.errors import ReadError
from dedupdb.ingest.documents import EXTRACT_SECONDS, extract
from dedupdb.ingest.records import MAIL_FORMATS
from dedupdb.ingest.sources import (
    COMPRESSED_SUFFIXES,
    DOCUMENT_SUFFIXES,
    HTML_SUFFIXES,
    TEXT_SUFFIXES,
    decode_bytes,
    html_to_text,
)
from dedupdb.text.normalize import valid_utf8

__all__ = ["MAIL_FORMATS", "mail_format", "messages_of", "parse_message", "MessageKeys"]
# The line that starts a message in an mbox file: 'From SENDER DATE'. A file of no text type that begins with one
# is a mailbox (Thunderbird's and mutt's have no suffix).
_FROM_LINE = re.compile(
    rb"From \S+ +(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun) +(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} "
    rb"+\d{1,2}:\d\d"
)
_ESCAPED_FROM = re.compile(rb"^>(>*From )")
_LINE_PIECE = 1 << 20
# Detectors and mailers name Chinese encodings by their subsets; the superset reads them all.
_CHARSETS = {"gb2312": "gb18030", "gbk": "gb18030", "x-gbk": "gb18030", "cp936": "gb18030", "big5": "big5hkscs",
             "us-ascii": "utf-8", "ascii": "utf-8", "ks_c_5601-1987": "euc-kr", "unicode-1-1-utf-7": "utf-7"}
_SUBJECT_PREFIX = re.compile(r"^\s*(?:(?:re|fwd?|fw|aw|wg|sv|vs|tr|回复|答复|转发)\s*(?:\[\d+\])?\s*[:：]\s*)+", re.I)
_FORWARD_MARK = re.compile(
    r"^\s*(?:-{2,}\s*(?:forwarded message|original message|转发的邮件|原始邮件)\s*-{2,}|begin forwarded message:)\s*$",
    re.I,
)
_HEADER_LINE = re.compile(r"^\s*\**(?:from|date|sent|to|cc|subject|reply-to|发件人|收件人|日期|时间|主题|抄送)\**\s*[:：]",
                          re.I)
_QUOTE = re.compile(r"^(?:[ \t]?>)+[ \t]?", re.M)
_FOOTER_RULE = re.compile(r"^_{20,}\s*$")
_FOOTER_LINES = 12  # a list footer under its rule of underscores is a few lines at the end of a body


def mail_format(path: Path) -> str | None:
    """'mbox' for a mailbox, 'message' for a file holding one message, None for any other file."""
    suffix = path.suffix.lower()
    if suffix in COMPRESSED_SUFFIXES or suffix in DOCUMENT_SUFFIXES:
        return None
    if suffix == ".eml":
        return "message"
    if suffix in (".mbox", ".mbx"):
        return "mbox"
    folder = path.parent
    if folder.name in ("cur", "new") and (folder.parent / "cur").is_dir() and (folder.parent / "new").is_dir():
        return "message"  # a Maildir's message
    if suffix in TEXT_SUFFIXES:
        return None
    try:
        with open(path, "rb") as stream:
            head = stream.read(256)
    except OSError:
        return None
    return "mbox" if _FROM_LINE.match(head) else None


@dataclass(slots=True)
class RawMessage:
    position: int        # 1-based, in its file
    data: bytes | None   # None when it is longer than the limit
    end_offset: int      # bytes of the file consumed once it is read


def split_mbox(stream: BinaryIO, start: int, position: int, hasher, max_bytes: int) -> Iterator[RawMessage]:
    """The messages of an mbox from byte start on (position messages lie before it). A message begins at a
    'From ' line at the start of the file or after a blank line; '>From ' lines in a body are unescaped. A
    message longer than max_bytes is given with no data, never held whole; hasher is fed every byte read."""
    stream.seek(start)
    offset = start
    parts: list[bytes] | None = None
    size = 0
    blank_before = True
    at_line_start = True

    def finished(end: int) -> RawMessage:
        data = None
        if parts is not None and size <= max_bytes:
            data = b"".join(parts)
        return RawMessage(position, data, end)

    while True:
        piece = stream.readline(_LINE_PIECE)
        if not piece:
            break
        if hasher is not None:
            hasher.update(piece)
        whole_line = at_line_start
        at_line_start = piece.endswith(b"\n")
        if whole_line and blank_before and piece.startswith(b"From "):
            if parts is not None:
                yield finished(offset)
            position += 1
            parts, size = [], 0
            offset += len(piece)
            blank_before = False
            continue
        offset += len(piece)
        if parts is None:  # bytes before the first 'From ' line: a message without its envelope line
            parts, size = [], 0
            position += 1
        if whole_line:
            blank_before = piece in (b"\n", b"\r\n")
            if piece.startswith(b">"):
                piece = _ESCAPED_FROM.sub(rb"\1", piece)
        size += len(piece)
        if size <= max_bytes:
            parts.append(piece)
        elif parts:
            parts.clear()
    if parts is not None:
        yield finished(offset)


def read_message_file(stream: BinaryIO, hasher, max_bytes: int) -> Iterator[RawMessage]:
    """A file that is one message."""
    data = stream.read(max_bytes + 1)
    size = len(data)
    if hasher is not None:
        hasher.update(data)
    while chunk := stream.read(1 << 20):  # past the limit: only counted and hashed
        size += len(chunk)
        if hasher is not None:
            hasher.update(chunk)
    yield RawMessage(1, data if size <= max_bytes else None, size)


@dataclass
class Part:
    """The message's own text (name None) or one attachment's, or why it could not be read."""

    name: str | None
    text: str | None = None
    error: str | None = None


@dataclass
class ParsedMessage:
    message_id: str | None
    parts: list[Part] = field(default_factory=list)


def too_large(max_bytes: int) -> str:
    return f"larger than the file limit of {size_text(max_bytes)} (raise it with --max-file-size)"


def parse_message(data: bytes | None, max_bytes: int, seconds: float = EXTRACT_SECONDS) -> ParsedMessage:
    """A message's id, its text (subject and body) and its readable attachments."""
    if data is None:
        return ParsedMessage(None, [Part(None, error=too_large(max_bytes))])
    try:
        # compat32: the modern policy parses every header into objects, ten times the cost, for headers that are
        # not read; the few read here are decoded by hand.
        message = email.message_from_bytes(data, policy=email.policy.compat32)
        message_id = _message_id(message)
        parts = [Part(None, _message_text(message, max_bytes))]
        parts += _attachments(message, max_bytes, seconds)
    except ReadError as exc:
        return ParsedMessage(None, [Part(None, error=exc.reason)])
    except Exception as exc:  # the email package raises many kinds on malformed input
        return ParsedMessage(None, [Part(None, error=f"damaged: cannot parse the message ({type(exc).__name__})")])
    return ParsedMessage(message_id, parts)


def _message_id(message: Message) -> str | None:
    value = " ".join(_header(message, "Message-ID").split()).strip("<>").strip()
    return value if value and valid_utf8(value) else None


def _decoded_words(raw: str) -> str:
    """A header value with its encoded words (=?charset?b?...?=) decoded, in their charsets' supersets."""
    if "=?" not in raw:
        return raw
    parts = []
    for chunk, charset in decode_header(raw):
        if isinstance(chunk, str):
            parts.append(chunk)
            continue
        charset = _CHARSETS.get((charset or "").lower(), charset or "utf-8")
        try:
            parts.append(chunk.decode(charset, "replace"))
        except LookupError:
            parts.append(chunk.decode("utf-8", "replace"))
    return "".join(parts)


def _header(message: Message, name: str) -> str:
    try:
        raw = message.get(name)
        if raw is None:
            return ""
        if not isinstance(raw, str):  # a header with bytes that are not ASCII
            raw = str(make_header(decode_header(raw)))
        return _decoded_words(raw)
    except Exception:  # an undecodable header is no text, not a failed message
        return ""


def subject_of(message: Message) -> str:
    return _SUBJECT_PREFIX.sub("", " ".join(_header(message, "Subject").split()))


def _is_attachment(part: Message) -> bool:
    disposition = (part.get("Content-Disposition") or "").split(";", 1)[0].strip().lower()
    return disposition == "attachment" or (disposition != "inline" and part.get_filename() is not None)


def _body_part(message: Message) -> Message | None:
    """The part a mail program shows as the body: the first text/plain part that is not an attachment, else the
    first text/html one; forwarded messages (message/rfc822) inside are not looked into."""
    found: dict[str, Message] = {}

    def visit(part: Message) -> None:
        kind = part.get_content_type()
        if kind == "message/rfc822" or (part is not message and _is_attachment(part)):
            return
        if part.is_multipart():
            for child in part.get_payload():
                visit(child)
        elif kind in ("text/plain", "text/html"):
            found.setdefault(kind, part)

    visit(message)
    return found.get("text/plain") or found.get("text/html")


def _message_text(message: Message, max_bytes: int) -> str:
    subject = subject_of(message)
    body_part = _body_part(message)
    body = ""
    if body_part is not None:
        body = part_text(body_part, max_bytes)
        if body_part.get_content_subtype() == "html":
            body = html_to_text(body)
    return "\n\n".join(t for t in (subject, clean_body(body)) if t)


def part_text(part: Message, max_bytes: int) -> str:
    """A text part decoded: its transfer encoding undone, its charset honoured (by its superset), or guessed
    when it names none or one Python does not know."""
    payload = part.get_payload(decode=True) or b""
    if len(payload) > max_bytes:
        raise ReadError("", too_large(max_bytes))
    charset = (part.get_content_charset() or "").lower()
    charset = _CHARSETS.get(charset, charset)
    if charset:
        try:
            return payload.decode(charset, "replace")
        except LookupError:
            pass
    try:
        return decode_bytes(payload).text
    except ReadError:
        return ""


def clean_body(body: str) -> str:
    """A body as the text it carries: quotation marks, the header block of a forwarded message, the signature
    (after '-- ') and a list's footer (under a rule of underscores) taken out."""
    body = _QUOTE.sub("", body.replace("\r\n", "\n"))
    lines = body.split("\n")
    kept: list[str] = []
    in_forward_header = False
    for line in lines:
        if line.rstrip() == "--":  # '-- ': the signature follows
            break
        if _FORWARD_MARK.match(line):
            in_forward_header = True
            continue
        if in_forward_header:
            if _HEADER_LINE.match(line) or (line.strip() and line.startswith((" ", "\t"))):
                continue
            if not line.strip():
                in_forward_header = False
                continue
            in_forward_header = False
        kept.append(line)
    for index in range(len(kept) - 1, max(-1, len(kept) - _FOOTER_LINES - 1), -1):
        if _FOOTER_RULE.match(kept[index]):
            kept = kept[:index]
            break
    return "\n".join(kept).strip()


_ATTACHMENT_SUFFIXES = (DOCUMENT_SUFFIXES | TEXT_SUFFIXES) - {".eml", ".json", ".jsonl", ".csv", ".tsv", ".log"}


def _attachments(message: Message, max_bytes: int, seconds: float) -> list[Part]:
    """Attachments of a readable type (documents and text files), and forwarded messages, each a Part named
    after its file name (a repeated name gets ' (2)', ' (3)'...)."""
    out: list[Part] = []
    names: dict[str, int] = {}

    def named(name: str) -> str:
        names[name] = names.get(name, 0) + 1
        return name if names[name] == 1 else f"{name} ({names[name]})"

    forwarded = 0
    for part in message.walk():
        if part is message:
            continue
        if part.get_content_type() == "message/rfc822":
            inner = part.get_payload()
            inner = inner[0] if isinstance(inner, list) and inner else inner
            if isinstance(inner, Message):
                forwarded += 1
                try:
                    out.append(Part(named(f"forwarded-{forwarded}.eml"), _message_text(inner, max_bytes)))
                except ReadError as exc:
                    out.append(Part(named(f"forwarded-{forwarded}.eml"), error=exc.reason))
            continue
        if part.is_multipart():
            continue
        filename = _filename(part)
        if filename is None or PurePosixPath(filename).suffix.lower() not in _ATTACHMENT_SUFFIXES:
            continue
        name = named(filename)
        try:
            out.append(Part(name, _attachment_text(part, filename, max_bytes, seconds)))
        except ReadError as exc:
            out.append(Part(name, error=exc.reason))
    return out


def _filename(part: Message) -> str | None:
    try:
        name = part.get_filename()
        name = _decoded_words(str(make_header(decode_header(name)))) if name and "=?" in name else name
    except Exception:
        return None
    if not name:
        return None
    name = " ".join(name.replace("/", "_").replace("\\", "_").split())
    return name if name and valid_utf8(name) else None


def _attachment_text(part: Message, filename: str, max_bytes: int, seconds: float) -> str:
    suffix = PurePosixPath(filename).suffix.lower()
    if suffix in DOCUMENT_SUFFIXES:
        data = part.get_payload(decode=True) or b""
        if len(data) > max_bytes:
            raise ReadError(filename, too_large(max_bytes))
        return extract(filename, data, max_bytes, seconds)
    text = part_text(part, max_bytes)
    return html_to_text(text) if suffix in HTML_SUFFIXES else text


class MessageKeys:
    """The keys of a file's messages: FILE#MESSAGE-ID, or FILE#N (its 1-based position) when it has no id or
    repeats one already taken; an attachment is the message's key, '/', and its name."""

    def __init__(self, path: str, taken: Callable[[str], bool]) -> None:
        self.path = path
        self.taken = taken

    def message(self, message_id: str | None, position: int) -> tuple[str, str]:
        """(key, record id) of a message."""
        if message_id is not None:
            key = f"{self.path}#{message_id}"
            if not self.taken(key):
                return key, message_id
        return f"{self.path}#{position}", str(position)

    @staticmethod
    def attachment(message_key: str, message_record: str, name: str) -> tuple[str, str]:
        return f"{message_key}/{name}", f"{message_record}/{name}"


def messages_of(stream: BinaryIO, fmt: str, start: int, position: int, hasher, max_bytes: int):
    """The raw messages of a mail file from byte start on."""
    if fmt == "mbox":
        return split_mbox(stream, start, position, hasher, max_bytes)
    stream.seek(0)
    return read_message_file(stream, hasher, max_bytes)
