"""The text of one file, by its kind: a document (PDF, DOCX, ODT, EPUB, RTF), a saved message, or text."""

from __future__ import annotations

from pathlib import Path

from dedupdb.config import MAX_FILE_BYTES
from dedupdb.errors import ReadError
from dedupdb.ingest.documents import EXTRACT_SECONDS, extract, is_document
from dedupdb.ingest.mail import mail_format, parse_message
from dedupdb.ingest.sources import Decoded, plain_decoded, read_bytes


def file_decoded(
    path: Path, data: bytes, max_bytes: int = MAX_FILE_BYTES, seconds: float = EXTRACT_SECONDS
) -> Decoded:
    """A file's text as a person reads it, with how it was decoded: a document's extracted text ('encoding' names
    its format), or a text file decoded (HTML reduced to its visible text)."""
    if is_document(path.name):
        return Decoded(extract(str(path), data, max_bytes, seconds), path.suffix.lower().lstrip("."))
    return plain_decoded(path, data)


def file_text(path: Path, data: bytes, max_bytes: int = MAX_FILE_BYTES, seconds: float = EXTRACT_SECONDS) -> str:
    return file_decoded(path, data, max_bytes, seconds).text


def decode_file(path: Path, max_bytes: int = MAX_FILE_BYTES) -> str:
    """A single file's text, for a query: a document's text, a saved message's subject and body, a text file."""
    if not path.is_file():
        raise ReadError(str(path), "no such file")
    fmt = mail_format(path)
    if fmt == "mbox":
        raise ReadError(str(path), "a mailbox holds many messages: add it, or query one message saved as .eml")
    data = read_bytes(path, max_bytes)
    if fmt == "message":
        parsed = parse_message(data, max_bytes)
        own = parsed.parts[0]
        if own.error:
            raise ReadError(str(path), own.error)
        return own.text or ""
    return file_text(path, data, max_bytes)
