"""Reading record files: one text per line, JSON Lines, or CSV with a header row.

Records stream from a binary file in bounded memory, each with its 1-based line
number and the byte offset just past it, so an ingest can stop after any record
and later resume (or read only what a grown file appended) from that offset.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

from .errors import InputError
from .sources import decode

FORMATS = ("jsonl", "csv", "lines")
_BY_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "csv"}
_SAMPLE_BYTES = 64 * 1024
MAX_RECORD_BYTES = 16 * 1024 * 1024  # a longer line is reported as a bad record, never held in memory
csv.field_size_limit(16 * 1024 * 1024)


@dataclass(frozen=True)
class RecordOptions:
    """How to read record files: the format ('auto' picks by file suffix) and the fields to use."""

    format: str = "auto"
    text_field: str | None = None
    id_field: str | None = None

    def __post_init__(self) -> None:
        if self.format not in ("auto", *FORMATS):
            raise InputError(f"unknown record format {self.format!r}; use one of auto, {', '.join(FORMATS)}")

    def format_for(self, path: Path) -> str | None:
        """The format a file is read in, or None when it is an ordinary document."""
        if self.format != "auto":
            return self.format
        return _BY_SUFFIX.get(path.suffix.lower())

    def resolved(self, fmt: str) -> "RecordOptions":
        """These options for one concrete format; JSONL and CSV read the field 'text' unless told otherwise."""
        text_field = self.text_field or ("text" if fmt in ("jsonl", "csv") else None)
        return RecordOptions(fmt, text_field, self.id_field)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RecordOptions":
        return cls(**json.loads(text))


@dataclass(frozen=True)
class Record:
    line: int          # where the record starts, 1-based
    record_id: str     # the id field, or the line number
    text: str
    raw: str           # the record as it stands in the file (a JSON line, a CSV row, a line)
    end_offset: int    # bytes of the file consumed once this record is read
    end_line: int = 0  # lines consumed by then (a CSV record may span several)


@dataclass(frozen=True)
class BadRecord:
    line: int
    reason: str
    end_offset: int
    end_line: int = 0


@dataclass(frozen=True)
class EndOfRecords:
    """Where reading stopped: everything up to here was consumed, blank lines included."""

    end_offset: int
    end_line: int


class _Lines:
    """Decoded lines of a binary stream, counting lines and bytes as they are consumed."""

    def __init__(self, stream: BinaryIO, encoding: str, offset: int, line: int, hasher=None) -> None:
        self.stream = stream
        self.encoding = encoding
        self.offset = offset
        self.line = line
        self.hasher = hasher
        self.too_long: list[int] = []  # numbers of lines passed over for their length, not yet reported

    def __iter__(self) -> Iterator[str]:
        while True:
            raw = self.stream.readline(MAX_RECORD_BYTES + 1)
            if not raw:
                return
            self._consumed(raw)
            if len(raw) > MAX_RECORD_BYTES and not raw.endswith(b"\n"):
                # Read the rest of an overlong line in pieces, so one line never has to fit in memory.
                while (rest := self.stream.readline(1 << 20)) and self._consumed(rest, count_line=False):
                    if rest.endswith(b"\n"):
                        break
                self.too_long.append(self.line)
                yield ""
                continue
            yield raw.decode(self.encoding, errors="replace")

    def _consumed(self, raw: bytes, count_line: bool = True) -> bool:
        self.offset += len(raw)
        self.line += count_line
        if self.hasher is not None:
            self.hasher.update(raw)
        return True


def sniff_encoding(sample: bytes) -> str:
    """The encoding of a record file, judged from its start (UTF-8 unless the bytes say otherwise)."""
    if not sample:
        return "utf-8"
    _, encoding = decode(sample[: _SAMPLE_BYTES].rsplit(b"\n", 1)[0] if b"\n" in sample else sample)
    if encoding.startswith("utf-16") or encoding.startswith("utf-32"):
        raise InputError("record files in UTF-16 or UTF-32 are not supported; convert them to UTF-8")
    return "utf-8" if encoding in ("utf-8-sig", "ascii") else encoding


def read_records(
    stream: BinaryIO,
    options: RecordOptions,
    start_offset: int = 0,
    start_line: int = 0,
    encoding: str = "utf-8",
    hasher=None,
) -> Iterator[Record | BadRecord]:
    """Records of a seekable stream from start_offset on (start_line lines lie before it); hasher, if
    given, is fed every byte read from start_offset on."""
    fmt = options.format
    if fmt == "csv":
        yield from _csv_records(stream, options, start_offset, start_line, encoding, hasher)
        return
    stream.seek(start_offset)
    lines = _Lines(stream, encoding, start_offset, start_line, hasher)
    for text in lines:
        at = (lines.offset, lines.line)
        if lines.too_long:
            yield BadRecord(lines.too_long.pop(), f"longer than {MAX_RECORD_BYTES // (1 << 20)} MiB", *at)
            continue
        if lines.line == 1:
            text = text.lstrip("\ufeff")
        if not text.strip():
            continue
        if fmt == "lines":
            yield Record(lines.line, str(lines.line), text.rstrip("\r\n"), text.rstrip("\r\n"), *at)
            continue
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as exc:
            yield BadRecord(lines.line, f"invalid JSON ({exc.msg})", *at)
            continue
        item = _pick(obj, options, lines.line)
        if isinstance(item, str):
            yield BadRecord(lines.line, item, *at)
        else:
            yield Record(lines.line, item[0], item[1], text.rstrip("\r\n"), *at)
    yield EndOfRecords(lines.offset, lines.line)


def _pick(obj, options: RecordOptions, line: int) -> tuple[str, str] | str:
    """(id, text) of a parsed record, or the reason it cannot be used."""
    if not isinstance(obj, dict):
        return "not a JSON object"
    text = obj.get(options.text_field)
    if text is None:
        return f"no field {options.text_field!r}"
    if not isinstance(text, str):
        text = json.dumps(text, ensure_ascii=False) if not isinstance(text, (int, float)) else str(text)
    if options.id_field:
        value = obj.get(options.id_field)
        if value is None or value == "":
            return f"no field {options.id_field!r}"
        return str(value), text
    return str(line), text


def _csv_records(stream: BinaryIO, options: RecordOptions, start_offset: int, start_line: int, encoding: str, hasher):
    stream.seek(0)
    sample = stream.read(_SAMPLE_BYTES).decode(encoding, errors="replace").lstrip("\ufeff")
    try:
        dialect = csv.Sniffer().sniff("\n".join(sample.split("\n")[:20]) or ",", delimiters=",;\t|")
        dialect.doublequote = True  # the sniffer says False when its sample has no "" in it
    except csv.Error:
        dialect = csv.excel
    stream.seek(0)
    lines = _Lines(stream, encoding, 0, 0, hasher if start_offset == 0 else None)
    header_reader = csv.reader(lines, dialect)
    try:
        header = [h.lstrip("\ufeff").strip() for h in next(header_reader)]
    except StopIteration:
        yield EndOfRecords(lines.offset, lines.line)
        return
    if options.text_field not in header:
        raise InputError(f"no column {options.text_field!r} in the header ({', '.join(header[:10])})")
    if options.id_field and options.id_field not in header:
        raise InputError(f"no column {options.id_field!r} in the header ({', '.join(header[:10])})")
    text_at = header.index(options.text_field)
    id_at = header.index(options.id_field) if options.id_field else None
    if start_offset > lines.offset:
        stream.seek(start_offset)
        lines = _Lines(stream, encoding, start_offset, start_line, hasher)
    reader = csv.reader(lines, dialect)
    while True:
        first_line = lines.line + 1
        try:
            row = next(reader)
        except StopIteration:
            yield EndOfRecords(lines.offset, lines.line)
            return
        except csv.Error as exc:
            yield BadRecord(first_line, f"invalid CSV ({exc})", lines.offset, lines.line)
            continue
        at = (lines.offset, lines.line)
        while lines.too_long:
            yield BadRecord(lines.too_long.pop(), f"longer than {MAX_RECORD_BYTES // (1 << 20)} MiB", *at)
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            yield BadRecord(first_line, f"{len(row)} fields where the header has {len(header)}", *at)
            continue
        record_id = row[id_at] if id_at is not None else str(first_line)
        if id_at is not None and not record_id:
            yield BadRecord(first_line, f"no value for {options.id_field!r}", *at)
            continue
        out = io.StringIO()
        csv.writer(out, dialect).writerow(row)
        yield Record(first_line, record_id, row[text_at], out.getvalue().rstrip("\r\n"), *at)
