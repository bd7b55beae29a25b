"""Reading record files: one text per line, JSON Lines, or CSV with a header row.

Records stream from a binary file in bounded memory, each with its 1-based line
number and the byte offset just past it, so an ingest can stop after any record
and later resume (or read only what a grown file appended) from that offset.
"""

from __future__ import annotations

import bz2
import csv
import gzip
import io
import json
import lzma
import sys
import zlib
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import BinaryIO

from dedupdb.config import MAX_RECORD_BYTES, size_text
from dedupdb.errors import InputError, ReadError
from dedupdb.ingest.sources import decode
from dedupdb.text.normalize import valid_utf8

# Why a record whose text or id holds half a surrogate pair (a JSON escape can name one) is a bad record: the store
# cannot hold it.
UNPAIRED_SURROGATE = "not valid Unicode (an unpaired surrogate escape)"
# A record whose text is empty once normalized (blank, or only invisible characters): nothing to store or compare.
EMPTY_RECORD = "empty text"

FORMATS = ("jsonl", "csv", "lines")
# Mail files are read message by message as record files are read record by record (ingest/mail.py); these
# formats are chosen by the file, never asked for.
MAIL_FORMATS = ("mbox", "message")
_BY_SUFFIX = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "csv"}
_SAMPLE_BYTES = 64 * 1024
# Compressed record files are read through these (streamed, never decompressed whole); the record format is
# that of the suffix before the compression suffix ('a.jsonl.gz' is JSON Lines).
COMPRESSION_SUFFIXES = {".gz": "gzip", ".bz2": "bzip2", ".xz": "xz", ".zst": "zstd"}
# The lines of a CSV record are bounded together as they are read (whatever limit an add sets), so the csv
# module's own per-field limit must not cut in first.
csv.field_size_limit(2**31 - 1)


@dataclass(frozen=True)
class RecordOptions:
    """How to read record files: the format ('auto' picks by file suffix), the fields to use, and the record
    limit (None: MAX_RECORD_BYTES). They are stored with each record file, so a file read with another limit is
    read again: raising the limit brings in the records it left out."""

    format: str = "auto"
    text_field: str | None = None
    id_field: str | None = None
    max_record_bytes: int | None = None

    def __post_init__(self) -> None:
        if self.format not in ("auto", *FORMATS, *MAIL_FORMATS):
            raise InputError(f"unknown record format {self.format!r}; use one of auto, {', '.join(FORMATS)}")
        limit = self.max_record_bytes
        if limit is not None and (not isinstance(limit, int) or isinstance(limit, bool) or limit < 1):
            raise InputError(f"the record limit must be a number of bytes of at least 1, got {limit!r}")

    def format_for(self, path: Path) -> str | None:
        """The format a file is read in, or None when it is an ordinary document."""
        if self.format != "auto":
            return self.format
        return _BY_SUFFIX.get(inner_suffix(path))

    def resolved(self, fmt: str) -> "RecordOptions":
        """These options for one concrete format; JSONL and CSV read the field 'text' unless told otherwise."""
        text_field = self.text_field or ("text" if fmt in ("jsonl", "csv") else None)
        return RecordOptions(fmt, text_field, self.id_field, self.max_record_bytes)

    def to_json(self) -> str:
        fields = asdict(self)
        if fields["max_record_bytes"] is None:
            del fields["max_record_bytes"]  # files read with the default limit keep the JSON they always had
        return json.dumps(fields, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "RecordOptions":
        return cls(**json.loads(text))


def compression_of(path: Path | str) -> str | None:
    """The compression a file's name says it is in ('gzip', 'bzip2', 'xz', 'zstd'), or None."""
    return COMPRESSION_SUFFIXES.get(Path(path).suffix.lower())


def inner_suffix(path: Path) -> str:
    """The suffix that names a file's format, before any compression suffix ('.jsonl' of 'a.jsonl.gz')."""
    if compression_of(path):
        path = path.with_suffix("")
    return path.suffix.lower()


class CorruptCompressedFile(InputError):
    """A compressed record file whose data does not decompress (truncated or damaged)."""


def _decompression_errors(compression: str) -> tuple[type[BaseException], ...]:
    """What the decompressors raise on damaged data (gzip.BadGzipFile and bz2's errors are OSErrors). zstandard
    is imported only for a .zst file, so that starting dedupdb does not pay for it."""
    errors: tuple[type[BaseException], ...] = (EOFError, zlib.error, lzma.LZMAError, gzip.BadGzipFile)
    if compression == "zstd":
        import zstandard

        errors += (zstandard.ZstdError,)
    return errors


_PIECE = 16 * 1024  # decompressed bytes a read asks for at a time


class _Decompressed(io.RawIOBase):
    """The decompressed bytes of a compressed file, readable, and seekable as the record reader needs: forward by
    reading on, backward by starting over from the beginning (a resumed read seeks forward once; a CSV record
    given up after an unclosed quote seeks back a little). Damaged data raises CorruptCompressedFile."""

    def __init__(self, path: Path, compression: str) -> None:
        self._path = path
        self._compression = compression
        self._errors = _decompression_errors(compression)
        self._file: BinaryIO | None = None
        self._inner = None
        self._position = 0
        self._broken: CorruptCompressedFile | None = None  # met by a read that returned what came before it
        self._open()

    def _open(self) -> None:
        self._close_inner()
        self._file = open(self._path, "rb")
        try:
            if self._compression == "gzip":
                self._inner = gzip.GzipFile(fileobj=self._file, mode="rb")
            elif self._compression == "bzip2":
                self._inner = bz2.BZ2File(self._file, "rb")
            elif self._compression == "xz":
                self._inner = lzma.LZMAFile(self._file, "rb")
            else:
                import zstandard

                self._inner = zstandard.ZstdDecompressor().stream_reader(self._file, read_across_frames=True)
        except self._errors as exc:
            self._close_inner()
            raise self._corrupt(exc) from None
        self._position = 0
        self._broken = None

    def _corrupt(self, exc: BaseException) -> CorruptCompressedFile:
        detail = " ".join(str(exc).split()) or type(exc).__name__
        return CorruptCompressedFile(f"corrupt {self._compression} data ({detail})")

    def _close_inner(self) -> None:
        for item in (self._inner, self._file):
            if item is not None:
                item.close()
        self._inner = self._file = None

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        """Read in pieces of _PIECE bytes: where the data breaks off, what the pieces before it gave is returned
        and the error raised at the next read (a decompressor that fails inside one large read gives none of it),
        so that the records before the damage are read."""
        if self._broken is not None:
            raise self._broken
        view, filled = memoryview(buffer), 0
        while filled < len(view):
            try:
                data = self._inner.read(min(_PIECE, len(view) - filled))
            except (*self._errors, OSError) as exc:
                if isinstance(exc, OSError) and exc.errno is not None:
                    raise  # the disk, not the data ("Invalid data stream" of bz2 has no errno)
                self._broken = self._corrupt(exc)
                if not filled:
                    raise self._broken from None
                break
            if not data:
                break
            view[filled : filled + len(data)] = data
            filled += len(data)
        self._position += filled
        return filled

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_CUR:
            offset += self._position
        elif whence != io.SEEK_SET:
            raise io.UnsupportedOperation("a compressed file is seeked from its start only")
        if offset < self._position:
            self._open()
        while self._position < offset:
            chunk = bytearray(min(offset - self._position, 1 << 20))
            if not self.readinto(chunk):
                break
        return self._position

    def close(self) -> None:
        self._close_inner()
        super().close()


def open_record_file(path: Path) -> BinaryIO:
    """A record file opened for reading: its bytes, or for a compressed one its decompressed bytes, streamed
    (CorruptCompressedFile when they do not decompress)."""
    compression = compression_of(path)
    if compression is None:
        return open(path, "rb")
    return io.BufferedReader(_Decompressed(path, compression), 1 << 16)


# Not frozen: made by the hundred thousand in an add, and a frozen dataclass's __init__ costs six times as much.
@dataclass(slots=True)
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


def too_long(limit: int) -> str:
    return f"longer than the record limit of {size_text(limit)} (raise it with --max-record-size)"


class _TooLong(Exception):
    """A CSV record grew past the record limit while its lines were read (raised through the csv reader)."""


class _Lines:
    """Decoded lines of a binary stream, counting lines and bytes as they are consumed.

    A line longer than max_bytes is passed over in pieces, never held whole. For CSV the lines of one record
    are bounded together (begin_record): a record growing past max_bytes raises _TooLong. A record whose quote
    proves unclosed is given up with rewind(), back to the end of its first line; so the bytes read past that
    line reach the hasher only once the record is settled (end_record), and the hasher always holds each byte
    before self.offset exactly once."""

    def __init__(
        self, stream: BinaryIO, encoding: str, offset: int, line: int, hasher=None, max_bytes: int | None = None,
        hash_from: int | None = None,
    ) -> None:
        self.stream = stream
        self.encoding = encoding
        self.offset = offset
        self.line = line
        self.hasher = hasher
        self.max_bytes = MAX_RECORD_BYTES if max_bytes is None else max_bytes
        self.hash_from = offset if hash_from is None else hash_from  # the hasher holds the bytes before this
        self.too_long: list[int] = []  # numbers of lines passed over for their length, not yet reported
        self.exhausted = False         # the last read met the end of the stream
        self.text = ""                 # the last line read
        self.open_end = False          # the record just read ran on to the end of the stream, unfinished
        self._record_start: int | None = None
        self._first_end: tuple[int, int] | None = None  # (offset, line) just past the record's first line
        self._held: list[bytes] = []   # bytes of the record's further lines, for the hasher once it is settled
        self._discard = False          # those bytes are dropped: the record will be rewound

    def __iter__(self) -> "_Lines":
        return self

    def __next__(self) -> str:
        in_record = self._record_start is not None
        room = self.max_bytes - (self.offset - self._record_start if in_record else 0)
        if room < 0:
            raise _TooLong
        raw = self.stream.readline(room + 1)
        if not raw:
            self.exhausted = True
            raise StopIteration
        self._consumed(raw)
        if len(raw) > room and not raw.endswith(b"\n"):
            if self._first_end is not None:
                self._discard, self._held = True, []
            # Read the rest of an overlong line in pieces, so one line never has to fit in memory.
            while rest := self.stream.readline(1 << 20):
                self._consumed(rest, count_line=False)
                if rest.endswith(b"\n"):
                    break
            self._first_line_read()
            if in_record:
                raise _TooLong
            self.too_long.append(self.line)
            self.text = ""
            return self.text
        self._first_line_read()
        self.text = raw.decode(self.encoding, errors="replace")
        return self.text

    def _consumed(self, raw: bytes, count_line: bool = True) -> None:
        start = self.offset
        self.offset += len(raw)
        self.line += count_line
        if self.hasher is None or self.offset <= self.hash_from:
            return
        fresh = raw[self.hash_from - start :] if start < self.hash_from else raw
        if self._record_start is None or self._first_end is None:
            self.hasher.update(fresh)
        elif not self._discard:
            self._held.append(fresh)

    def _first_line_read(self) -> None:
        if self._record_start is not None and self._first_end is None:
            self._first_end = (self.offset, self.line)

    def begin_record(self) -> None:
        self._record_start, self._first_end, self._held, self._discard = self.offset, None, [], False
        self.open_end = False

    def end_record(self) -> None:
        """The record just read stands: what it spans is consumed for good."""
        if self.hasher is not None:
            for raw in self._held:
                self.hasher.update(raw)
        self._record_start, self._first_end, self._held, self._discard = None, None, [], False

    def rewind(self) -> None:
        """Give up the record just read from its second line on: reading goes on from there."""
        offset, line = self._first_end
        self._record_start, self._first_end, self._held, self._discard = None, None, [], False
        self.seek(offset, line)

    def seek(self, offset: int, line: int) -> None:
        self.stream.seek(offset)
        self.offset, self.line, self.exhausted = offset, line, False


def sniff_encoding(sample: bytes, name: str = "<bytes>") -> str:
    """The encoding of a record file (named name in an error), judged from its start (UTF-8 unless the bytes say
    otherwise)."""
    if not sample:
        return "utf-8"
    head = sample[: _SAMPLE_BYTES].rsplit(b"\n", 1)[0] if b"\n" in sample else sample
    try:
        _, encoding = decode(head, name)
    except ReadError:
        if not 0 < head.count(b"\x00") <= len(head) // 100:
            raise  # none, or as many as text of two or four bytes a character has (UTF-16, UTF-32): not stray
        # A stray NUL byte in a record is that record's fault, a bad record where it lies, as it is past this
        # sample: the file is binary only if it is so without them.
        _, encoding = decode(head.replace(b"\x00", b""), name)
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
    max_record_bytes: int | None = None,
) -> Iterator[Record | BadRecord]:
    """Records of a seekable stream from start_offset on (start_line lines lie before it); hasher, if
    given, is fed every byte read from start_offset on. A record longer than max_record_bytes (by default the
    options' limit, else MAX_RECORD_BYTES) is a BadRecord."""
    fmt = options.format
    limit = max_record_bytes or options.max_record_bytes or MAX_RECORD_BYTES
    if fmt == "csv":
        yield from _csv_records(stream, options, start_offset, start_line, encoding, hasher, limit)
        return
    stream.seek(start_offset)
    lines = _Lines(stream, encoding, start_offset, start_line, hasher, limit)
    for text in lines:
        at = (lines.offset, lines.line)
        if lines.too_long:
            yield BadRecord(lines.too_long.pop(), too_long(limit), *at)
            continue
        if lines.line == 1:
            text = text.lstrip("\ufeff")
        if not text.strip():
            continue
        if fmt == "lines":
            yield Record(lines.line, str(lines.line), text.rstrip("\r\n"), text.rstrip("\r\n"), *at)
            continue
        item = picked_record(text, options, lines.line)
        if isinstance(item, str):
            yield BadRecord(lines.line, item, *at)
        else:
            yield Record(lines.line, item[0], item[1], text.rstrip("\r\n"), *at)
    yield EndOfRecords(lines.offset, lines.line)


def picked_record(line_text: str, options: RecordOptions, line: int) -> tuple[str, str] | str:
    """(id, text) of a line of JSON Lines (the line-th), or the reason it cannot be used: a bad record. The parser
    refuses more than malformed JSON: an integer of more digits than Python converts (a ValueError), nesting
    deeper than its recursion allows; each is that record's fault alone."""
    try:
        obj = json.loads(line_text)
    except json.JSONDecodeError as exc:
        return f"invalid JSON ({exc.msg})"
    except ValueError:
        return f"invalid JSON (a number of more than {sys.get_int_max_str_digits():,} digits)"
    except RecursionError:
        return "invalid JSON (nested too deeply)"
    return _pick(obj, options, line)


def _pick(obj, options: RecordOptions, line: int) -> tuple[str, str] | str:
    """(id, text) of a parsed record, or the reason it cannot be used."""
    if not isinstance(obj, dict):
        return "not a JSON object"
    text = obj.get(options.text_field)
    if text is None:
        return f"no field {options.text_field!r} (--text-field names the field holding the text)"
    if not isinstance(text, str):
        try:
            text = json.dumps(text, ensure_ascii=False) if not isinstance(text, (int, float)) else str(text)
        except RecursionError:
            return "invalid JSON (nested too deeply)"
    record_id = str(line)
    if options.id_field:
        value = obj.get(options.id_field)
        if value is None:
            return f"no field {options.id_field!r}"
        if value == "":
            return f"empty field {options.id_field!r}"
        record_id = str(value)
    if not valid_utf8(text) or not valid_utf8(record_id):  # a JSON escape can name half a surrogate pair
        return UNPAIRED_SURROGATE
    return record_id, text


@dataclass(frozen=True)
class CsvDialect:
    """A CSV dialect as plain values: the sniffer's dialect is a class made on the fly, which cannot be pickled
    for a worker process; the csv module takes any object with these attributes."""

    delimiter: str
    quotechar: str | None
    escapechar: str | None
    doublequote: bool
    skipinitialspace: bool
    lineterminator: str
    quoting: int

    @classmethod
    def of(cls, dialect) -> "CsvDialect":
        return cls(dialect.delimiter, dialect.quotechar, dialect.escapechar, dialect.doublequote,
                   dialect.skipinitialspace, dialect.lineterminator, dialect.quoting)


@dataclass(frozen=True)
class CsvLayout:
    """What a CSV file's start says of all its records: the dialect, the header's width, the columns read, and
    where the header ends (offset, line)."""

    dialect: CsvDialect
    width: int
    text_at: int
    id_at: int | None
    header_end: tuple[int, int]


def csv_layout(stream: BinaryIO, options: RecordOptions, encoding: str, limit: int | None = None) -> CsvLayout | None:
    """The layout of a CSV file from its start (None when it holds no header); a header that cannot be read or
    lacks a column asked for raises InputError."""
    limit = limit or options.max_record_bytes or MAX_RECORD_BYTES
    stream.seek(0)
    sample = stream.read(_SAMPLE_BYTES).decode(encoding, errors="replace").lstrip("\ufeff")
    try:
        sniffed = csv.Sniffer().sniff("\n".join(sample.split("\n")[:20]) or ",", delimiters=",;\t|")
        sniffed.doublequote = True  # the sniffer says False when its sample has no "" in it
    except csv.Error:
        sniffed = csv.excel
    dialect = CsvDialect.of(sniffed)
    stream.seek(0)
    lines = _Lines(stream, encoding, 0, 0, None, limit)
    reader = csv.reader(lines, dialect, strict=True)
    first_line, header, problem = _next_row(reader, lines, dialect, None)
    while header is not None and len(header) <= 1 and not "".join(header).strip():  # blank lines before it
        first_line, header, problem = _next_row(reader, lines, dialect, None)
    if problem is not None:
        raise InputError(f"cannot read the CSV header on line {first_line}: {problem}")
    if header is None:
        return None
    header = [h.lstrip("\ufeff").strip() for h in header]
    if options.text_field not in header:
        raise InputError(f"no column {options.text_field!r} in the header ({', '.join(header[:10])}): "
                         "--text-field names the column holding the text")
    if options.id_field and options.id_field not in header:
        raise InputError(f"no column {options.id_field!r} in the header ({', '.join(header[:10])})")
    id_at = header.index(options.id_field) if options.id_field else None
    return CsvLayout(dialect, len(header), header.index(options.text_field), id_at, (lines.offset, lines.line))


@dataclass(frozen=True)
class OpenEnd:
    """Where the records read from a chunk stop being certain: the record starting here (offset, line) ran on to
    the chunk's end, and the bytes after the chunk decide what it is."""

    offset: int
    line: int


def _csv_records(
    stream: BinaryIO, options: RecordOptions, start_offset: int, start_line: int, encoding: str, hasher, limit: int,
    layout: CsvLayout | None = None, open_end: bool = False,
):
    """CSV records from start_offset on. With a layout, the header is not read again (nor fed to the hasher).
    With open_end the stream is a chunk that may end inside a record: a record that runs on to its end is not
    judged, an OpenEnd is yielded in its place and reading stops."""
    if layout is None:
        layout = csv_layout(stream, options, encoding, limit)
        if layout is None:
            yield EndOfRecords(*_consume(stream, encoding, start_offset, start_line, hasher, limit))
            return
        if start_offset < layout.header_end[0]:
            # The header's bytes go to the hasher as the records' do.
            stream.seek(start_offset)
            _feed(stream, layout.header_end[0] - start_offset, hasher)
            start_offset, start_line = layout.header_end
    dialect = layout.dialect
    stream.seek(start_offset)
    lines = _Lines(stream, encoding, start_offset, start_line, hasher, limit)
    reader = csv.reader(lines, dialect, strict=True)
    while True:
        began = (lines.offset, lines.line)
        first_line, row, problem = _next_row(reader, lines, dialect, layout.width)
        at = (lines.offset, lines.line)
        if open_end and lines.open_end:
            yield OpenEnd(*began)
            return
        if problem is not None:
            yield BadRecord(first_line, problem, *at)
            continue
        if row is None:
            yield EndOfRecords(*at)
            return
        if not row or all(not cell.strip() for cell in row):
            continue
        if len(row) != layout.width:
            yield BadRecord(first_line, f"{len(row)} fields where the header has {layout.width}", *at)
            continue
        record_id = row[layout.id_at] if layout.id_at is not None else str(first_line)
        if layout.id_at is not None and not record_id:
            yield BadRecord(first_line, f"no value for {options.id_field!r}", *at)
            continue
        out = io.StringIO()
        csv.writer(out, dialect).writerow(row)
        yield Record(first_line, record_id, row[layout.text_at], out.getvalue().rstrip("\r\n"), *at)


def _feed(stream: BinaryIO, length: int, hasher) -> None:
    while length > 0:
        chunk = stream.read(min(length, 1 << 20))
        if not chunk:
            return
        if hasher is not None:
            hasher.update(chunk)
        length -= len(chunk)


def _consume(stream: BinaryIO, encoding: str, offset: int, line: int, hasher, limit: int) -> tuple[int, int]:
    """Read a stream to its end from offset on (a CSV file with no header: blank lines at most), feeding the
    hasher; where it ends, (offset, line)."""
    stream.seek(offset)
    lines = _Lines(stream, encoding, offset, line, hasher, limit)
    for _ in lines:
        pass
    return lines.offset, lines.line


def _next_row(reader, lines: _Lines, dialect, width: int | None) -> tuple[int, list[str] | None, str | None]:
    """The next CSV record as (its first line, its fields, None); (first line, None, None) at the end; or (first
    line, None, why it is bad).

    The reader is strict, so a quote that is never closed shows: the record runs to the end of the file, or a
    later quote breaks it (a quote inside a quoted field not followed by a delimiter), or it spans several lines
    and comes out with another number of fields than the header (width). Such a record is reported on its first
    line and reading resumes on the line after it, so the records the open quote swallowed are read after all.
    A quoted field holding newlines, delimiters and doubled quotes is a record like any other. A stray quote
    within one line (1,"abc"def) is read as the csv module always did, unless it leaves a quote open."""
    lines.begin_record()
    first = lines.line + 1
    resumed = f"reading resumed at line {first + 1}"
    try:
        row = next(reader)
    except StopIteration:
        lines.end_record()
        return first, None, None
    except _TooLong:
        if lines.line > first:
            lines.rewind()
            return first, None, f"unclosed quote, or a record {too_long(lines.max_bytes)}; {resumed}"
        lines.end_record()
        return first, None, too_long(lines.max_bytes)
    except csv.Error as exc:
        lines.open_end = lines.exhausted  # a quote still open where the stream ends
        if lines.line > first:
            last, at_end = lines.line, lines.exhausted
            lines.rewind()
            if at_end:
                return first, None, f"unclosed quote: the quoted field runs on to the end of the file; {resumed}"
            return first, None, f"unclosed quote: the quoted field runs on to line {last} and breaks there ({exc}); {resumed}"
        lines.end_record()
        if lines.exhausted:
            return first, None, "unclosed quote: the quoted field runs on to the end of the file"
        row = _lenient_row(lines.text, dialect)
        if row is None:
            return first, None, f"invalid CSV ({exc})"
        if any("\n" in cell for cell in row):
            return first, None, f"unclosed quote: a quoted field does not end on its line ({exc})"
        return first, row, None
    if width is not None and lines.line > first and len(row) != width:
        last = lines.line
        lines.rewind()
        return first, None, (
            f"unclosed quote: the quoted field runs on to line {last}, leaving {len(row)} fields where the header "
            f"has {width}; {resumed}"
        )
    lines.end_record()
    return first, row, None


def _lenient_row(text: str, dialect) -> list[str] | None:
    """One line parsed as the csv module does by default: a quote after a closing quote is kept as text. A field
    still open at the end of the line comes out holding its newline."""
    try:
        return next(csv.reader([text if text.endswith("\n") else text + "\n"], dialect, strict=False), [])
    except csv.Error:
        return None


# --- records read in another process: the file cut into chunks at line ends ----------------------------------


class _Window(io.BytesIO):
    """A chunk of a file, read at the file's own offsets (the record readers seek by them)."""

    def __init__(self, data: bytes, base: int) -> None:
        super().__init__(data)
        self._base = base

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        if whence == io.SEEK_SET:
            offset -= self._base
        return super().seek(offset, whence) + self._base

    def tell(self) -> int:
        return super().tell() + self._base


@dataclass(slots=True)
class Chunk:
    """Bytes of a record file from a record's start to a line end (or the end of the file: final)."""

    data: bytes
    offset: int
    line: int   # lines before it
    lines: int  # lines in it
    final: bool


def chunk_records(
    chunk: Chunk, options: RecordOptions, encoding: str, layout: CsvLayout | None
) -> Iterator[Record | BadRecord | OpenEnd]:
    """The records of a chunk, as read_records gives them from the chunk's offset in the whole file. A CSV record
    that runs on past the end of a chunk that is not the file's last ends the chunk's records with an OpenEnd:
    only the bytes after it can say what it is."""
    window = _Window(chunk.data, chunk.offset)
    limit = options.max_record_bytes or MAX_RECORD_BYTES
    if options.format == "csv":
        if layout is None:
            return
        items = _csv_records(window, options, chunk.offset, chunk.line, encoding, None, limit, layout,
                             open_end=not chunk.final)
    else:
        items = read_records(window, options, chunk.offset, chunk.line, encoding, None, limit)
    for item in items:
        if not isinstance(item, EndOfRecords):
            yield item


_BLOCK_BYTES = 1 << 20


class ChunkCutter:
    """Cuts a record file's bytes, from a record's start on, into Chunks that end at line ends, and feeds every
    byte cut to the hasher in order: the framing alone, so that parsing the records is left to other processes.

    A line longer than the record limit is never held: it is passed over in pieces and given as the BadRecord
    read_records would give. For CSV a chunk is cut where the quotes seen since its start are even, which for a
    well-formed file is always between records; where that guess is wrong (a stray quote, an unclosed one) the
    chunk's reader says so with an OpenEnd."""

    def __init__(
        self, stream: BinaryIO, offset: int, line: int, hasher, limit: int, quote: bytes | None = None
    ) -> None:
        self.stream = stream
        self.offset = offset  # of the next byte to cut (the stream is read ahead of it, into _buffer)
        self.line = line
        self.hasher = hasher
        self.limit = limit
        self.quote = quote or None
        self.ended = False  # all of the stream was cut
        self._buffer = b""
        self._eof = False

    def _fill(self) -> None:
        block = self.stream.read(_BLOCK_BYTES)
        if block:
            self._buffer += block
        else:
            self._eof = True

    def next(self, max_lines: int, max_bytes: int) -> Chunk | BadRecord | None:
        """The next chunk of about max_lines lines or max_bytes bytes, a line too long to be a record, or None
        once the stream is cut to its end."""
        lines = pos = odd = 0
        while True:
            nl = self._buffer.find(b"\n", pos)
            if nl < 0:
                if len(self._buffer) - pos > self.limit:
                    return self._cut(pos, lines) if pos else self._pass_long_line()
                if not self._eof:
                    self._fill()
                    continue
                if len(self._buffer) > pos:  # a last line without its newline
                    return self._cut(len(self._buffer), lines + 1)
                if pos:
                    return self._cut(pos, lines)
                self.ended = True
                return None
            if nl - pos > self.limit:
                return self._cut(pos, lines) if pos else self._pass_long_line()
            if self.quote:
                odd ^= self._buffer.count(self.quote, pos, nl) & 1
            pos, lines = nl + 1, lines + 1
            if pos == len(self._buffer) and not self._eof:
                self._fill()  # whether anything follows decides whether the chunk is the last
            if (lines >= max_lines or pos >= max_bytes) and (not odd or pos >= 4 * max_bytes):
                return self._cut(pos, lines)

    def _cut(self, length: int, lines: int) -> Chunk:
        data, self._buffer = self._buffer[:length], self._buffer[length:]
        if self.hasher is not None:
            self.hasher.update(data)
        final = self._eof and not self._buffer
        chunk = Chunk(data, self.offset, self.line, lines, final)
        self.offset += length
        self.line += lines
        self.ended = final
        return chunk

    def _pass_long_line(self) -> BadRecord:
        """The line at the cut is longer than the limit: feed it to the hasher in pieces, to its newline."""
        while True:
            nl = self._buffer.find(b"\n")
            length = nl + 1 if nl >= 0 else len(self._buffer)
            piece, self._buffer = self._buffer[:length], self._buffer[length:]
            if self.hasher is not None:
                self.hasher.update(piece)
            self.offset += length
            if nl >= 0 or self._eof:
                break
            self._fill()
        if not self._buffer and not self._eof:
            self._fill()
        self.line += 1
        self.ended = self._eof and not self._buffer
        return BadRecord(self.line, too_long(self.limit), self.offset, self.line)

    def resume(self, offset: int, line: int, hasher) -> None:
        """Go on cutting from another place (the stream is already there) with a hasher holding the bytes
        before it."""
        self.offset, self.line, self.hasher = offset, line, hasher
        self._buffer, self._eof, self.ended = b"", False, False


def first_record(
    stream: BinaryIO, options: RecordOptions, offset: int, line: int, encoding: str, hasher,
    layout: CsvLayout | None,
) -> Record | BadRecord | EndOfRecords:
    """The one record (or bad record, or the end) read_records gives first from a record's start at offset,
    however far it has to look; the stream and the hasher are left just past it."""
    limit = options.max_record_bytes or MAX_RECORD_BYTES
    if options.format == "csv" and layout is not None:
        items = _csv_records(stream, options, offset, line, encoding, hasher, limit, layout)
    else:
        items = read_records(stream, options, offset, line, encoding, hasher, limit)
    return next(items)
