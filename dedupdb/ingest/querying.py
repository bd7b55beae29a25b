"""The texts of a batch query (Database.query_many): read from a record file or given, and answered batch by batch
in worker processes (each sketches a batch, or a part of one, and searches the store for it), never stored.

Batches are handed out ahead of the one being waited for, so no worker waits; only those in flight are held, so
a corpus of any length streams through in bounded memory.
"""

from __future__ import annotations

import io
import tempfile
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from dedupdb.config import Settings
from dedupdb.errors import InputError
from dedupdb.ingest.records import (
    BadRecord,
    EndOfRecords,
    RecordOptions,
    compression_of,
    open_record_file,
    read_records,
    sniff_encoding,
)
from dedupdb.ingest.sources import readable_name
from dedupdb.ingest.workers import (
    PendingWork,
    WorkPool,
    bulk_collections,
    load_before_forking,
    load_for_workers,
)
from dedupdb.sketch.fingerprint import Sketch, queries_runs, sketch_texts
from dedupdb.text.normalize import normalize_lines, valid_utf8

STDIN = "-"
STANDARD_INPUT = "standard input"  # how errors name it
# Texts sketched and searched together: enough that the store is read once for many, few enough that two batches
# of long texts stay small in memory; a batch of long texts ends at so many characters (4,096 articles of 100 KB
# would hold 400 MB a batch, a few batches in flight).
QUERY_BATCH = 4096
QUERY_BATCH_CHARS = 16 * 1024 * 1024
# On a large store a batch is this share of the texts it holds, up to MAX_QUERY_BATCH: a batch's lookups read much
# the same blocks of the index for 4,096 texts as for 16,384, and at a million texts those blocks are most of it.
QUERY_BATCH_SHARE = 64
MAX_QUERY_BATCH = 16384
# Once a batch's lookups are made, its texts are scored this many at a time: the stored texts their candidates need
# are read for them together and held until they are answered, so a worker's memory does not grow with the batch.
QUERIES_SCORED_AT_ONCE = 4096
# A query text of at least this many bytes in all starts the workers at once; a smaller one is sketched here.
POOL_AT_ONCE_BYTES = 8 * 1024 * 1024
_SAMPLE_BYTES = 64 * 1024
_SPOOL_BYTES = 32 * 1024 * 1024

EMPTY_TEXT = "the query text is empty"
NOTHING_TO_COMPARE = "the query has no words or characters to compare (only punctuation or symbols)"
NOT_UNICODE = "the query text is not valid Unicode (it holds half a surrogate pair)"

# (bytes read, bytes in all or None when not known: a compressed file or standard input)
QueryProgress = Callable[[int, "int | None"], None]


@dataclass(slots=True)
class QueryText:
    """One text to look for: its id (the record's, or its position), where it stands in its file, and its text, or
    why there is none (a bad record)."""

    id: str
    text: str | None
    line: int | None = None
    error: str | None = None
    end_offset: int = 0  # bytes of the file read once this record is


@dataclass(slots=True)
class SketchedQuery:
    """What searching for one text needs, made in a worker: its sketch and, for a text shorter than two winnowing
    windows, every run hash it has (its few fingerprints need not be those a longer text holding it keeps)."""

    sketch: Sketch | None
    runs: np.ndarray | None
    error: str | None


def sketch_queries(settings: Settings, raws: list[str]) -> list[SketchedQuery]:
    """Normalize and sketch query texts (each distinct text once); a module-level function so workers can run it."""
    texts = normalize_lines([raw.replace("\n", " ") for raw in raws])  # normalize() of each, as query() does
    invalid = {t for t in texts if not t.isascii() and not valid_utf8(t)}
    distinct = list(dict.fromkeys(t for t in texts if t and t not in invalid))
    sketches = dict(zip(distinct, sketch_texts(settings, distinct)))
    short = [text for text, sketch in sketches.items() if 0 < sketch.shingles < 2 * settings.winnow_window]
    runs_of = dict(zip(short, queries_runs(settings, short)))
    out = []
    for text in texts:
        if not text:
            out.append(SketchedQuery(None, None, EMPTY_TEXT))
            continue
        if text in invalid:
            out.append(SketchedQuery(None, None, NOT_UNICODE))
            continue
        sketch = sketches[text]
        if sketch.shingles == 0:
            out.append(SketchedQuery(None, None, NOTHING_TO_COMPARE))
            continue
        runs = runs_of.get(text)
        # A query needs no word counts (they weigh a store's corpus): they are left out of what travels back.
        out.append(SketchedQuery(Sketch(sketch.content_hash, sketch.chars, sketch.shingles, sketch.minhash,
                                        sketch.sketch, sketch.simhash, None, sketch.tokens, sketch.fingerprints),
                                 runs, None))
    return out


def given_texts(texts: Iterable[str | tuple[str, str]]) -> Iterator[QueryText]:
    """Texts given to query_many: each a string (its id its position, from 0) or an (id, text) pair."""
    for position, item in enumerate(texts):
        if isinstance(item, str):
            yield QueryText(str(position), item)
        elif isinstance(item, tuple) and len(item) == 2 and isinstance(item[1], str):
            yield QueryText(str(item[0]), item[1])
        else:
            raise InputError(f"query_many takes texts or (id, text) pairs; item {position} is {type(item).__name__}")


def sketch_items(settings: Settings, items: list[QueryText]) -> list[tuple[QueryText, SketchedQuery | None]]:
    """Each item with its sketch (None for a bad record)."""
    sketched = iter(sketch_queries(settings, [item.text for item in items if item.error is None]))
    return [(item, next(sketched) if item.error is None else None) for item in items]


# What a batch query's input is, which sets how its batches go out (answered_batches).
GIVEN = "given"    # texts given, or a file too small to start workers for: held to its first batch
FILE = "file"      # a file large enough: workers at once, its last batch shared out among them
STREAM = "stream"  # standard input: workers at once, each batch out as soon as it is read


def answered_batches(
    settings: Settings, items: Iterator[QueryText], workers: int, here: Callable[[list[QueryText]], list],
    there: Callable[[Settings, list[QueryText]], list], source: str = GIVEN,
    progress: Callable[[QueryText], None] | None = None, batch: int | None = None,
) -> Iterator[list]:
    """The answers to the items, batch by batch, in order. here(batch) answers a batch in this process; there
    (a module-level function, or a partial of one) answers a batch, or a part of one, in a worker, which sketches
    it, then searches a read of the store of its own: the store is only read, so the work grows with the workers.

    A large input (a FILE known to be large, or a STREAM) starts the workers at once and gives them whole
    batches, one more in flight than there are workers: a batch's lookups cost much the same for half as many
    texts (split in two, the batches of 82,523 Chinese reviews took 30% more CPU). A file's last batch alone is
    shared out among them (a stream's batches go out as they come). Any other input is held to its first batch:
    answered here if that is all and no longer than QUERY_BATCH, else the workers start with the second (or at the
    end) and take the first too, both shared out among them; a third proves the input long, and from it on it goes
    out as a large file's.
    batch: texts a batch (query_batch of the store's size; QUERY_BATCH by default).
    Memory stays bounded by the batches in flight, whatever the input's length. progress is called with the last
    item of each batch answered. Until the last answer is taken (or the answers are closed), this process collects
    garbage less often (workers.bulk_collections)."""
    with bulk_collections():
        yield from _answered_batches(settings, items, workers, here, there, source, progress, batch or QUERY_BATCH)


def _answered_batches(settings, items, workers, here, there, source, progress, batch) -> Iterator[list]:
    large = source != GIVEN
    pool: WorkPool | None = _pool(settings, workers) if large and workers > 0 else None
    ahead = workers if large else 1  # batches in flight beyond the one waited for
    in_flight: deque[tuple[list[QueryText], PendingWork]] = deque()
    first: list[QueryText] | None = None  # the first batch of an input not known to be large
    # A large file's latest batch, handed out whole once the next is read: the last one is shared out among the
    # workers, which would otherwise all wait on the one that took it (a fifth of 20,000 records' wall time on two).
    # A stream's batches go out as they are read: its answers come while it is still being written.
    hold = source == FILE  # and an input given that proves long
    held: list[QueryText] | None = None

    def hand_out(chunk: list[QueryText], spread: bool) -> None:
        in_flight.append((chunk, pool.submit(there, chunk, part_items=batch, min_items=1, spread=spread)))

    def take_back() -> list:
        chunk, work = in_flight.popleft()
        return _reported(chunk, work.result(), progress)

    # The input's own failure (a compressed file cut short, a text of the wrong type), raised once what came before
    # it is answered.
    broken: InputError | None = None
    try:
        for chunk in _chunks(items, batch):
            if isinstance(chunk, InputError):
                broken = chunk
                break
            if workers == 0:
                yield _reported(chunk, here(chunk), progress)
                continue
            if hold:
                if held is not None:
                    hand_out(held, spread=False)
                    if len(in_flight) > ahead:
                        yield take_back()
                held = chunk
                continue
            if pool is None and first is None:
                first = chunk
                continue
            if pool is None:
                pool = _pool(settings, workers)
                hand_out(first, spread=True)
                first = None
                hand_out(chunk, spread=True)
                # Two batches are shared out; an input of more is long, and goes out as a large file does, whole
                # batches held back by one: 40,000 short Chinese reviews (7 MB) against a million took 22.2 s
                # against 26.7 shared out (docs/benchmarks.md).
                hold, held, ahead = True, None, workers
                continue
            hand_out(chunk, spread=False)  # a stream's
            if len(in_flight) > ahead:
                yield take_back()
        if first is not None and len(first) > QUERY_BATCH:
            # One batch, but longer than a small store's: the workers share it out (on a large store, 4,097 to
            # 15,625 texts would otherwise be answered on one core).
            pool = _pool(settings, workers)
            held = first
        elif first is not None:
            yield _reported(first, here(first), progress)
        if held is not None:
            hand_out(held, spread=True)
        while in_flight:
            yield take_back()
        if broken is not None:
            raise broken
    finally:
        if pool is not None:
            pool.close()


def _pool(settings: Settings, workers: int) -> WorkPool:
    """The workers of a batch query, which is large (its input, or a second batch). As a large add does: numba and
    the compiled sketching and decoding are loaded before they are forked, so that they share their pages."""
    load_before_forking()
    return WorkPool(settings, workers, load_for_workers)


def _reported(chunk: list[QueryText], answers: list, progress) -> list:
    if progress is not None and chunk:
        progress(chunk[-1])
    return answers


def query_batch(stored_texts: int) -> int:
    """Texts a batch query answers together against a store holding this many distinct texts."""
    return max(QUERY_BATCH, min(MAX_QUERY_BATCH, stored_texts // QUERY_BATCH_SHARE))


def _chunks(items: Iterator[QueryText], size: int) -> Iterator[list[QueryText] | InputError]:
    """The items in batches of size, each cut short at QUERY_BATCH_CHARS characters of text. Where the input breaks
    off (a compressed file cut short), the texts read before that come as a batch, then the error: they are
    answered before it is raised."""
    chunk: list[QueryText] = []
    chars = 0
    try:
        for item in items:
            chunk.append(item)
            chars += len(item.text or "")
            if len(chunk) >= size or chars >= QUERY_BATCH_CHARS:
                yield chunk
                chunk, chars = [], 0
    except InputError as exc:
        if chunk:
            yield chunk
        yield exc
        return
    if chunk:
        yield chunk


# --- record files --------------------------------------------------------------------------------------


def record_format(path: str | Path, options: RecordOptions) -> RecordOptions:
    """The options a query's record file is read with: as asked, else by its suffix, else one text per line
    (named on the command line, the file is records whatever its suffix). Standard input needs its format."""
    if str(path) == STDIN:
        if options.format == "auto":
            raise InputError("reading standard input needs its record format: --record-format jsonl|csv|lines")
        return options.resolved(options.format)
    return options.resolved(options.format_for(Path(path)) or "lines")


def query_records_of(
    path: str | Path, options: RecordOptions, stdin: BinaryIO | None = None
) -> tuple[Iterator[QueryText], int | None, bool]:
    """The records of a file (or of standard input, '-') as query texts, bad records included; the file's size in
    bytes when the offsets of its records count them (not for a compressed file or a stream); and whether it is a
    stream, read once as it is written: standard input, or a named pipe (a shell's '<(...)')."""
    resolved = record_format(path, options)
    if str(path) == STDIN:
        return _stdin_records(stdin, resolved), None, True
    file = Path(path).expanduser()
    if not file.exists():
        raise InputError(f"no such file: {readable_name(file)}")
    if file.is_dir():
        raise InputError(f"{readable_name(file)} is a folder; give a record file")
    try:
        if not file.is_file():  # a pipe (or a device): opening it waits for a writer, as reading standard input does
            return _stdin_records(open(file, "rb"), resolved, readable_name(file), owned=True), None, True
        stream = open_record_file(file)
    except OSError as exc:
        raise InputError(f"cannot read {readable_name(file)}: {exc.strerror or exc}") from None
    compressed = compression_of(file) is not None
    # A compressed file's start is looked at in its buffer, not read: cut short within it, a read would raise and
    # give none of it, where the records before the damage are to be answered.
    sample = stream.peek(_SAMPLE_BYTES)[:_SAMPLE_BYTES] if compressed else stream.read(_SAMPLE_BYTES)
    return _records(stream, resolved, sample, readable_name(file)), None if compressed else file.stat().st_size, False


def _records(stream: BinaryIO, options: RecordOptions, sample: bytes, name: str) -> Iterator[QueryText]:
    with stream:
        encoding = sniff_encoding(sample, name)
        for item in read_records(stream, options, 0, 0, encoding):
            if isinstance(item, BadRecord):
                yield QueryText(str(item.line), None, item.line, item.reason, item.end_offset)
            elif isinstance(item, EndOfRecords):
                return
            else:
                yield QueryText(item.record_id, item.text, item.line, None, item.end_offset)


def _stdin_records(stdin: BinaryIO | None, options: RecordOptions, name: str = STANDARD_INPUT,
                   owned: bool = False) -> Iterator[QueryText]:
    """Standard input (or a stream so named, closed once read where owned), read as it comes: JSON Lines and lines
    straight through, so answers come while it is still being written; CSV, which the reader seeks back in, through
    a spool (in memory up to 32 MiB, then on disk)."""
    import sys

    if stdin is None and sys.stdin is None:  # started with standard input closed ('<&-')
        raise InputError("standard input is closed")
    source = stdin if stdin is not None else sys.stdin.buffer
    if options.format == "csv":
        spool = tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES)
        while chunk := source.read(1 << 20):
            spool.write(chunk)
        if owned:
            source.close()
        spool.seek(0)
        return _records(spool, options, spool.read(_SAMPLE_BYTES), name)
    stream = io.BufferedReader(_ForwardOnly(source, owned), _SAMPLE_BYTES)
    return _records(stream, options, stream.peek(_SAMPLE_BYTES)[:_SAMPLE_BYTES], name)


class _ForwardOnly(io.RawIOBase):
    """A stream read once, front to back (a pipe): seeking is allowed only to where it is, which is all the reader
    of JSON Lines and lines asks (the buffer above it serves a seek back within what it holds)."""

    def __init__(self, source: BinaryIO, owned: bool = False) -> None:
        self._source = source
        self._owned = owned  # closed with this stream (a named pipe opened for it; never standard input)
        self._position = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self._source.read(len(buffer))
        buffer[: len(data)] = data
        self._position += len(data)
        return len(data)

    def tell(self) -> int:
        return self._position

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        target = offset + (self._position if whence == io.SEEK_CUR else 0)
        if whence not in (io.SEEK_SET, io.SEEK_CUR) or target != self._position:
            raise io.UnsupportedOperation("standard input is read once, front to back")
        return self._position

    def close(self) -> None:
        if self._owned and not self.closed:
            self._source.close()
        super().close()
