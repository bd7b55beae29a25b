"""The ingest loop: walk, read, skip what is unchanged, and hand batches to the indexer.

Reading, decoding, normalizing and sketching a batch (read_files, read_record_chunks, read_messages) run in
worker processes while the batch before it is written: of a record file this process only cuts the bytes into
chunks at line ends and hashes them, and of every sketch it only writes what the workers made ready to store. It knows no terminal: progress goes to an optional callback, and the outcome
comes back as an AddSummary for the caller to render.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO

import xxhash

from dedupdb import compiled
from dedupdb.config import (
    COMMIT_SECONDS,
    INGEST_BATCH,
    MAX_FILE_BYTES,
    SNIPPET_CHARS,
    Settings,
    ingest_batch,
    parse_size,
)
from dedupdb.errors import DatabaseError, DedupError, InputError, ReadError
from dedupdb.index.indexer import Indexer, NewDocument
from dedupdb.ingest.records import (
    EMPTY_RECORD,
    MAX_RECORD_BYTES,
    BadRecord,
    Chunk,
    ChunkCutter,
    CsvLayout,
    EndOfRecords,
    OpenEnd,
    Record,
    RecordOptions,
    chunk_records,
    compression_of,
    csv_layout,
    first_record,
    open_record_file,
    sniff_encoding,
)
from dedupdb.ingest.documents import EXTRACT_SECONDS
from dedupdb.ingest.mail import MAIL_FORMATS, MessageKeys, mail_format, messages_of, parse_message
from dedupdb.ingest.readers import file_decoded
from dedupdb.ingest.sources import Candidate, Skipped, WalkRules, read_bytes, readable_name, walk
from dedupdb.ingest.summary import STDIN_NAME, AddSummary, Progress
from dedupdb.ingest.workers import (
    COMPILE_SOON_BYTES,
    PendingWork,
    Work,
    WorkPool,
    default_workers,
    load_before_forking,
    load_for_workers,
    load_numba,
)
from dedupdb.sketch.fingerprint import Fingerprinter, Sketch, sketch_texts
from dedupdb.storage.contents import stored_columns
from dedupdb.storage.rows import FileRow
from dedupdb.storage.store import Store
from dedupdb.text.hashing import bytes_hash, content_hash
from dedupdb.text.normalize import normalize, normalize_lines

STDIN = "-"


def add_targets(paths: list[str | Path], records: RecordOptions | None) -> list[Path]:
    """The paths an add reads ('-': standard input), each checked before anything is read or stored: an add that
    fails on its arguments fails before the command line makes a new database for it."""
    targets = []
    for given in paths:
        if str(given) == STDIN:
            if records is None or records.format == "auto":
                raise InputError("reading standard input needs its record format: --records jsonl|csv|lines")
            targets.append(Path(STDIN))
            continue
        path = Path(given).expanduser()
        if not path.exists():
            raise InputError(f"no such file or folder: {readable_name(path)}")
        targets.append(path)
    return targets


def named_record_format(path: Path) -> str | None:
    """The record format of a file named by itself with no record options, or None for a document: JSON Lines
    ('add corpus.jsonl', '.ndjson', compressed or not) is a corpus, not one text; a compressed CSV or TSV, which
    would otherwise be passed over, is read as records too. A plain .csv stays a document, as in a folder."""
    fmt = RecordOptions("auto").format_for(path)
    return fmt if fmt == "jsonl" or (fmt and compression_of(path)) else None


# A batch of files holds at most about this many bytes of them (and batch_size() files): the workers hold a batch's
# texts and sketch them at once, some 15 bytes of memory a byte of text, so 200 files of 2.2 MB made an add's
# processes 2.1 GB at their peak, and a folder of e-books or logs grew without bound. A batch of records stops there
# too: this process holds its bytes (200 records of 1.3 MB: 1 GB).
FILE_BATCH_BYTES = 32 * 1024 * 1024
# An add of at least this many bytes starts its workers at once; a smaller one sketches its first batch here and
# starts them only if there is a second (a few files are done before workers would have started).
POOL_AT_ONCE_BYTES = 8 * 1024 * 1024
_SPOOL_BYTES = 32 * 1024 * 1024
# Batches the workers may read and sketch beyond the one this process writes while batches are of the smallest
# size (INGEST_BATCH); one once they grow. A batch's writing time varies (a merge of the index's runs falls on
# some batches): with a single batch ahead the workers wait out each long one, and this process each long
# sketching. A second made an add of 100,000 reviews 14% quicker. Larger batches (a store past 256,000 texts)
# keep one: a second there held 70 MB more at a million for 5% of the time.
BATCHES_AHEAD = 2


@dataclass
class _Pending:
    candidate: Candidate
    known_digest: str | None  # of the bytes indexed before, for a file the store holds
    existed: bool
    message: bool = False     # a file holding one message (.eml, a Maildir's): documents FILE#ID and attachments


@dataclass(frozen=True)
class FileRead:
    """What reading one changed file gave: made in a worker or inline, the same either way."""

    digest: str = ""
    unchanged: bool = False          # its bytes still hash to the digest indexed before
    text_hash: bytes | None = None   # content hash of its normalized text; None when it holds no text
    sketch: Sketch | None = None     # on the first file of a batch with that text
    snippet: str = ""
    bytes_read: int = 0
    error: str | None = None         # why it could not be read
    binary: bool = False
    warning: str | None = None       # read, but with a caveat (undecodable bytes replaced)
    message: "MessageRead | None" = None  # for a file holding one message: its documents (text_hash is None)
    columns: tuple | None = None     # the sketch as the contents table keeps it (columns_of), beside it


def columns_of(settings: Settings, sketches: list[Sketch]) -> list[tuple]:
    """The contents table's columns of each sketch (storage's stored_columns): made in a worker, so that the
    process writing the store does not code sketches or compute checksums. The sketches are made ready to
    travel to it."""
    for sketch in sketches:
        # The word counts are for a scale-out job's corpus IDF; an add has no use for them, and they are most of
        # what a sketch weighs on its way back from a worker (3 of 5.6 KB a review).
        sketch.words = None
    return stored_columns(Fingerprinter(settings).batch(sketches))


def read_files(settings: Settings, jobs: list[tuple[str, str | None, int, float, bool]]) -> list[FileRead]:
    """Read, decode (or extract, for a document; or parse, for a message), normalize and sketch files given as
    (path, digest indexed before or None, size limit, seconds a document may take, whether it is a message).

    The limits travel with each job: workers are forked once, so a limit set later in the parent would not
    reach them through a module global."""
    out: list[FileRead] = []
    texts: dict[bytes, str] = {}
    messages: list[tuple[int, bytes, int, float]] = []
    for path, known_digest, max_bytes, seconds, message in jobs:
        try:
            data = read_bytes(Path(path), max_bytes)
            digest = bytes_hash(data)
            if digest == known_digest:
                out.append(FileRead(digest, unchanged=True))
                continue
            if message:
                messages.append((len(out), data, max_bytes, seconds))
                out.append(FileRead(digest, bytes_read=len(data)))
                continue
            decoded = file_decoded(Path(path), data, max_bytes, seconds)
            raw = decoded.text
            text = normalize(raw)
        except ReadError as exc:
            out.append(FileRead(error=exc.reason, binary=exc.reason.startswith("binary")))
            continue
        text_hash = content_hash(text) if text else None
        if text_hash is not None:
            texts.setdefault(text_hash, text)
        out.append(FileRead(digest, False, text_hash, None, snippet(raw), len(data), warning=decoded.note))
    made = sketches_that_fit(settings, list(texts.values()))
    sketched = {sketch.content_hash for sketch in made}
    sketches = {s.content_hash: (s, c) for s, c in zip(made, columns_of(settings, made))}
    out = [replace(r, sketch=sketches[r.text_hash][0], columns=sketches.pop(r.text_hash)[1])
           if r.text_hash in sketches else r for r in out]
    # A text this process found no memory to sketch fails its file alone, saying how large it is.
    out = [FileRead(error=no_memory_for(texts[r.text_hash])) if r.text_hash in texts and r.text_hash not in sketched
           else r for r in out]
    if messages:
        parsed = read_messages(settings, [(data, max_bytes, seconds) for _, data, max_bytes, seconds in messages])
        for (index, *_), read in zip(messages, parsed):
            out[index] = replace(out[index], message=read)
    return out


def sketches_that_fit(settings: Settings, texts: list[str]) -> list[Sketch]:
    """sketch_texts() of the texts, leaving out those this process cannot find the memory for: a batch that runs
    out is sketched again a text at a time (a text of tens of MB takes hundreds; a process's address space may be
    limited, ulimit -v)."""
    try:
        return sketch_texts(settings, texts)
    except MemoryError:
        made = []
        for text in texts:
            try:
                made += sketch_texts(settings, [text])
            except MemoryError:
                pass
        return made


def no_memory_for(text: str) -> str:
    """Why a text was not sketched (sketches_that_fit left it out)."""
    return f"not enough memory to sketch its text ({len(text) / 2**20:.1f} MiB of it)"


def sketch_records(settings: Settings, raws: list[str]) -> list[tuple[bytes | None, Sketch | None, str | None]]:
    """(content hash, sketch, snippet) of each record's text (None for one without text); each distinct text of
    the list is sketched once, and only its first record carries the sketch. The snippets are made here too: in
    a worker, not in the process that writes the store. A text there was no memory to sketch gives (None, None,
    None)."""
    # Newlines inside a record are whitespace like any other once normalized.
    texts = normalize_lines([raw.replace("\n", " ") for raw in raws])
    hashes = [content_hash(t) if t else None for t in texts]
    distinct = {h: t for h, t in zip(hashes, texts) if h is not None}
    sketches = {s.content_hash: s for s in sketches_that_fit(settings, list(distinct.values()))}
    unsketched = set(distinct) - set(sketches)
    return [(None, None, "") if h is None else (None, None, None) if h in unsketched
            else (h, sketches.pop(h, None), snippet(raw)) for h, raw in zip(hashes, raws)]


@dataclass
class ChunkRead:
    """What reading the records of one chunk gave, in file order: (line, id, content hash or None for a record
    without text, snippet, bytes of its text, None) for a record, (line, None, None, '', 0, why) for a bad one;
    the sketch of each distinct text, once in the part of a batch a worker read; and, when the chunk ended
    inside a record, where that record begins (offset, line): the rows stop there."""

    rows: list[tuple[int, str | None, bytes | None, str, int, str | None]]
    sketches: list[Sketch]
    columns: list[tuple]  # of each sketch, as the contents table keeps it (columns_of)
    open_end: tuple[int, int] | None = None


# A job of read_record_chunks: how the file is read, and a chunk of its bytes or records read already.
RecordJob = tuple[RecordOptions, str, "CsvLayout | None", "Chunk | list[Record | BadRecord]"]


def read_record_chunks(settings: Settings, jobs: list[RecordJob]) -> list[ChunkRead]:
    """Parse, normalize and sketch the records of chunks of a record file (the writing process only cuts the
    file at line ends): one ChunkRead a job."""
    parsed: list[tuple[list[Record | BadRecord], tuple[int, int] | None]] = []
    for options, encoding, layout, piece in jobs:
        items: list[Record | BadRecord] = []
        open_end = None
        for item in piece if isinstance(piece, list) else chunk_records(piece, options, encoding, layout):
            if isinstance(item, OpenEnd):
                open_end = (item.offset, item.line)
                break
            items.append(item)
        parsed.append((items, open_end))
    texts = [item.text for items, _ in parsed for item in items if isinstance(item, Record)]
    sketched = sketch_records(settings, texts)
    made = iter(columns_of(settings, [sketch for _, sketch, _ in sketched if sketch is not None]))
    sketched = iter(sketched)
    out = []
    for items, open_end in parsed:
        rows, sketches, columns = [], [], []
        for item in items:
            if isinstance(item, BadRecord):
                rows.append((item.line, None, None, "", 0, item.reason))
                continue
            text_hash, sketch, text_snippet = next(sketched)
            if text_snippet is None:  # no memory to sketch it: a bad record, the others go on
                rows.append((item.line, None, None, "", 0, no_memory_for(item.text)))
                continue
            if sketch is not None:
                sketches.append(sketch)
                columns.append(next(made))
            size = len(item.text.encode("utf-8")) if text_hash is not None else 0
            rows.append((item.line, item.record_id, text_hash, text_snippet, size, None))
        out.append(ChunkRead(rows, sketches, columns, open_end))
    return out


@dataclass
class MessageRead:
    """What parsing one message gave: its id, and for its own text and each readable attachment (name None for
    the message itself) the content hash, snippet and size of the text, or why it could not be read; sketches
    of the texts first seen in this message (each distinct text of a batch is sketched once)."""

    message_id: str | None
    parts: list[tuple[str | None, bytes | None, str, int, str | None]]
    sketches: list[Sketch]


def read_messages(settings: Settings, jobs: list[tuple[bytes | None, int, float]]) -> list[MessageRead]:
    """Parse, normalize and sketch messages given as (raw bytes or None when too long, size limit, seconds an
    attachment may take). One result per job, in order: the pool joins the results of its workers' shares."""
    out: list[MessageRead] = []
    texts: dict[bytes, str] = {}
    first_in: dict[bytes, int] = {}
    for data, max_bytes, seconds in jobs:
        parsed = parse_message(data, max_bytes, seconds)
        parts = []
        for part in parsed.parts:
            if part.error is not None:
                parts.append((part.name, None, "", 0, part.error))
                continue
            raw = part.text or ""
            text = normalize(raw)
            text_hash = content_hash(text) if text else None
            if text_hash is not None and text_hash not in texts:
                texts[text_hash] = text
                first_in[text_hash] = len(out)
            parts.append((part.name, text_hash, snippet(raw), len(raw.encode("utf-8")), None))
        out.append(MessageRead(parsed.message_id, parts, []))
    made = sketches_that_fit(settings, list(texts.values()))
    for sketch in made:
        out[first_in[sketch.content_hash]].sketches.append(sketch)
    unsketched = set(texts) - {sketch.content_hash for sketch in made}
    if unsketched:  # a part there was no memory to sketch cannot be read, the rest go on
        for read in out:
            read.parts = [(name, None, "", 0, no_memory_for(texts[text_hash])) if text_hash in unsketched
                          else (name, text_hash, text_snippet, size, error)
                          for name, text_hash, text_snippet, size, error in read.parts]
    return out


def message_documents(
    read: MessageRead, own_key: str, own_id: str, file_id: int, mtime_ns: int, failed: list[tuple[str, str]]
) -> list[NewDocument]:
    """The documents of one message read: its own text under own_key, each readable attachment under
    own_key/NAME; a part that could not be read goes to failed under its key."""
    documents = []
    for name, text_hash, text_snippet, size, error in read.parts:
        key, record_id = (own_key, own_id) if name is None else MessageKeys.attachment(own_key, own_id, name)
        if error is not None:
            failed.append((key, error))
        elif text_hash is not None:
            documents.append(NewDocument(key, file_id, record_id, text_hash, size, mtime_ns, text_snippet))
    return documents


def _sketches_of(results: list[Sketch | None]) -> dict[bytes, Sketch]:
    return {s.content_hash: s for s in results if s is not None}


class Ingest:
    def __init__(
        self,
        store: Store,
        indexer: Indexer,
        workers: int | None = None,
        max_file_bytes: int | str | None = None,
        max_record_bytes: int | str | None = None,
        extract_seconds: float | None = None,
    ) -> None:
        """max_file_bytes: larger files are reported as failed (default config.MAX_FILE_BYTES, 64 MiB);
        max_record_bytes: longer records are reported as bad (default records.MAX_RECORD_BYTES, 16 MiB). Both
        take bytes or a size such as '200K', '64M', '1G'. extract_seconds: a document (or a message's
        attachment) that takes longer to read is reported as failed (default 60)."""
        if extract_seconds is not None and not extract_seconds > 0:
            raise InputError(f"the extraction time limit must be a number of seconds above 0, got {extract_seconds!r}")
        self.extract_seconds = EXTRACT_SECONDS if extract_seconds is None else float(extract_seconds)
        self.max_file_bytes = MAX_FILE_BYTES if max_file_bytes is None else parse_size(max_file_bytes, "max_file_size")
        self.max_record_bytes = None if max_record_bytes is None else parse_size(max_record_bytes, "max_record_size")
        self.store = store
        self.indexer = indexer
        self.summary = AddSummary()
        self._pending: list[_Pending] = []
        self._pending_bytes = 0  # the sizes of the files pending
        self._known: dict[str, FileRow] = {}  # what the store knew of these files before this run
        self._named: set[str] = set()  # the files given by name, not found in a folder given
        self._workers = default_workers() if workers is None else workers
        self._pool: WorkPool | None = None
        self._warming: threading.Thread | None = None
        self._awaited = False  # the pool started before the compiled code was in numba's cache (compiled.py)
        self._batches = 0
        self._in_flight: deque[tuple[PendingWork, Callable]] = deque()
        self._progress: Progress | None = None
        self._bytes_total = 0
        self._bytes_before = 0  # of the files done
        self._stored_before = 0  # distinct texts the store held when this add began (at most)
        self._reading_last = False  # the last input is being read: its batches in flight are the add's last

    # --- batches in flight -------------------------------------------------------

    def submit(self, work: Work, items: list, apply: Callable[[list], None], ahead: int | None = None,
               **parts) -> None:
        """Have work(settings, items) done (by workers once the ingest proves large) and apply(results) run in
        order: while batch N is written, the workers read and sketch up to `ahead` batches after it (by default
        BATCHES_AHEAD while batches are of the smallest size, else one). parts: how the items are shared out
        (WorkPool.submit)."""
        self._batches += 1
        if self._pool is None and self._workers > 0 and self._batches >= 2:
            self._start_pool()
        if self._awaited and not compiled.awaiting():
            self._take_compiled()
        pending = self._pool.submit(work, items, **parts) if self._pool else None
        if pending is None:
            self._drain()
            apply(work(self.indexer.settings, items))
            return
        self._in_flight.append((pending, apply))
        if ahead is None:
            ahead = BATCHES_AHEAD if self.batch_size() <= INGEST_BATCH else 1
        while len(self._in_flight) > ahead:
            self._apply_oldest()

    def _apply_oldest(self) -> None:
        pending, apply = self._in_flight.popleft()
        apply(pending.result())

    def _drain(self) -> None:
        """Apply every batch in flight, in order. Those of a large add's last input are its last: while this process
        writes them, its workers done, the store's log is checkpointed on the idle core (Store.checkpoint_aside),
        which leaves the close less to copy."""
        if self._reading_last and self._pool is not None and self._in_flight:
            self.store.checkpoint_aside()
        while self._in_flight:
            self._apply_oldest()

    def _start_pool(self) -> None:
        self._pool = WorkPool(self.indexer.settings, self._workers, load_for_workers,
                              compile_soon=self._bytes_total >= COMPILE_SOON_BYTES, below_the_writer=True)
        self._awaited = compiled.awaiting()
        # While the workers load the compiled sketching and sketch the first batch (two seconds or more on two
        # cores, this process idle), it loads its own compiled code, which that batch's writing would wait for.
        self._warming = threading.Thread(target=self.indexer.load_compiled, name="dedupdb-warm-up", daemon=True)
        self._warming.start()

    def _take_compiled(self) -> None:
        """The compiled code this add awaited is in numba's cache now (another process compiled it): load it, so
        that the rest of a large first add verifies and decodes compiled, as the workers now sketch."""
        self._awaited = False
        load_numba()
        self.indexer.load_compiled()

    def _close_pool(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._warming is not None:
            self._warming.join()  # never left loading while the interpreter shuts down
            self._warming = None

    def run(
        self,
        paths: list[Path],
        rules: WalkRules = WalkRules(),
        exclude: tuple[str, ...] = (),
        progress: Progress | None = None,
        records: RecordOptions | None = None,
        stdin: BinaryIO | None = None,
    ) -> AddSummary:
        started = time.perf_counter()
        roots = []
        for path in add_targets(paths, records):
            if str(path) == STDIN:
                continue
            resolved = path.resolve()
            if readable_name(resolved) != str(resolved):
                # Its bytes reach Python as surrogates, which the store cannot hold: this one fails, the rest go on.
                self.summary.failed.append((readable_name(resolved), "name is not valid UTF-8"))
                continue
            roots.append(resolved)
        self._named = {str(root) for root in roots if not root.is_dir()}
        found: list[Candidate] = []
        seen: set[str] = set()
        for root in roots:
            for item in walk(root, rules, exclude):
                if isinstance(item, Skipped):
                    self.summary.skipped.append((str(item.path), item.reason))
                elif str(item.path) not in seen:  # overlapping paths given (a folder and a file inside it)
                    seen.add(str(item.path))
                    found.append(item)
        for root in roots:
            rows = self.store.files_under(str(root)) if root.is_dir() else [self.store.file_by_path(str(root))]
            self._known.update((row.path, row) for row in rows if row is not None)
        self._progress, self._bytes_total = progress, sum(c.size for c in found)
        self._stored_before = self.store.content_id_bound()  # for the batches' size, which an estimate serves
        if self._workers > 0 and self._bytes_total >= POOL_AT_ONCE_BYTES:
            # Plainly a large add: the workers start before this process sketches anything, so they are forked
            # small (a process that has sketched Chinese holds its segmenter's dictionary, and every fork a copy), but
            # with numba and the compiled sketching and decoding: loaded here first, their pages are shared with the
            # workers (75 MiB of PSS a worker against 103 when each loaded its own), and this process verifies and
            # decodes compiled from its first batch (load_before_forking).
            load_before_forking()
            self._start_pool()
        with self.store.grouped_commits(COMMIT_SECONDS):
            try:
                if any(str(p) == STDIN for p in paths):
                    self._reading_last = not found
                    self._ingest_stdin(stdin, self._with_limit(records.resolved(records.format)))
                for position, candidate in enumerate(found):
                    self._reading_last = position == len(found) - 1
                    options = self._record_options(candidate, records) or self._mail_options(candidate)
                    if options and options.format == "message":
                        self._consider(candidate, message=True)
                        if self._batch_full():
                            self._flush()
                    elif options:
                        self._flush()
                        self._ingest_record_file(candidate, options)
                    elif compression_of(candidate.path):
                        self.summary.skipped.append((str(candidate.path), _COMPRESSED_DOCUMENT))
                    else:
                        self._consider(candidate)
                        if self._batch_full():
                            self._flush()
                    self._bytes_before += candidate.size
                    self.report_progress(0)
                self._flush()
                self._drain()
            finally:
                # An interrupted batch is simply not applied (its files are read again next time); the batches
                # applied before it are committed on the way out.
                self._in_flight.clear()
                self._close_pool()
            for root in roots:
                if root.is_dir():
                    self._notice_missing(root, seen)
        self.summary.seconds = time.perf_counter() - started
        return self.summary

    def batch_size(self) -> int:
        """Documents per batch: more as the store grows (config.ingest_batch), counting what this add stored."""
        return ingest_batch(self._stored_before + self.summary.new_contents, INGEST_BATCH)

    def report_progress(self, within_file: int) -> None:
        """Bytes read so far: the files done, and this many of the file being read (a record file, batch by
        batch, so a single large corpus moves the bar too)."""
        if self._progress:
            self._progress(min(self._bytes_before + within_file, self._bytes_total), self._bytes_total)

    def _record_options(self, candidate: Candidate, records: RecordOptions | None) -> RecordOptions | None:
        """How to read a file as records: as asked, or as it was read before when nothing is asked, so that a
        plain 'add FOLDER' keeps reading a record file as records."""
        if records is not None:
            fmt = records.format_for(candidate.path)
            return self._with_limit(records.resolved(fmt)) if fmt else None
        known = self._known.get(str(candidate.path))
        if known is not None and known.kind == "records" and known.options:
            return self._with_limit(RecordOptions.from_json(known.options))
        fmt = named_record_format(candidate.path) if str(candidate.path) in self._named else None
        return self._with_limit(RecordOptions("auto").resolved(fmt)) if fmt else None

    def _mail_options(self, candidate: Candidate) -> RecordOptions | None:
        """A mailbox or a saved message is read message by message, as a record file is read record by record."""
        fmt = mail_format(candidate.path)
        return RecordOptions(fmt) if fmt else None

    def _with_limit(self, options: RecordOptions) -> RecordOptions:
        """The record limit asked for in this add, if one was; it is part of how the file is read, so a file read
        before with another limit is read again."""
        return options if self.max_record_bytes is None else replace(options, max_record_bytes=self.max_record_bytes)

    # --- whole files ---------------------------------------------------------------

    def _consider(self, candidate: Candidate, message: bool = False) -> None:
        path = str(candidate.path)
        known = self._known.get(path)
        live = known is not None and known.status != "missing"
        if live and known.size == candidate.size and known.mtime_ns == candidate.mtime_ns:
            self.summary.unchanged += 1
            return
        self._pending.append(_Pending(candidate, known.digest if live else None, live, message))
        self._pending_bytes += candidate.size

    def _batch_full(self) -> bool:
        """Whether the files pending make a batch: as many as batch_size(), or FILE_BATCH_BYTES of them."""
        return len(self._pending) >= self.batch_size() or self._pending_bytes >= FILE_BATCH_BYTES

    def _flush(self) -> None:
        if not self._pending:
            return
        batch, held, self._pending, self._pending_bytes = self._pending, self._pending_bytes, [], 0
        jobs = [(str(i.candidate.path), i.known_digest, self.max_file_bytes, self.extract_seconds, i.message)
                for i in batch]
        # A few large files are worth the workers as many small ones are (WorkPool.submit's min_items).
        parts = {"min_items": 1} if held >= FILE_BATCH_BYTES // 8 else {}
        self.submit(read_files, jobs, lambda reads: self._apply(batch, reads), **parts)

    def _apply(self, batch: list[_Pending], reads: list[FileRead]) -> None:
        read: list[tuple[_Pending, FileRead]] = []
        additions: list[NewDocument] = []
        with self.store.transaction():
            for item, result in zip(batch, reads):
                path, c = str(item.candidate.path), item.candidate
                own_error = result.message.parts[0][4] if result.message is not None else None
                if result.error is not None or own_error is not None:
                    failed = self.summary.skipped if result.binary else self.summary.failed
                    failed.append((path, result.error or own_error))
                elif result.unchanged:
                    self.store.touch_file(self._known[path].id, c.size, c.mtime_ns)
                    self.summary.unchanged += 1
                else:
                    read.append((item, result))
                    self.summary.bytes_read += result.bytes_read
                    if result.warning:
                        self.summary.warnings.append((path, result.warning))
            read = self._not_stored_meanwhile(read)
            file_ids = self.store.save_files([self._file_row(i, r) for i, r in read])
            removals = []
            for item, result in read:
                c = item.candidate
                file_id = file_ids[str(c.path)]
                if item.existed:
                    removals += self.store.documents_of_file(file_id)
                if result.message is not None:
                    additions += self._message_documents(str(c.path), file_id, c.mtime_ns, result.message)
                elif result.text_hash:
                    additions.append(
                        NewDocument(str(c.path), file_id, None, result.text_hash, c.size, c.mtime_ns, result.snippet)
                    )
            self.indexer.remove_documents(removals)
            sketches = _sketches_of([r.sketch for r in reads])
            sketches.update((s.content_hash, s) for r in reads if r.message is not None for s in r.message.sketches)
            columns = {r.sketch.content_hash: r.columns for r in reads if r.sketch is not None and r.columns}
            self.summary.new_contents += self.indexer.add_documents(additions, sketches, columns)
        for item, _ in read:
            (self.summary.updated if item.existed else self.summary.added).append(str(item.candidate.path))

    @staticmethod
    def _file_row(item: _Pending, result: FileRead) -> tuple:
        c = item.candidate
        if result.message is None:
            return (str(c.path), c.size, c.mtime_ns, result.digest, "indexed" if result.text_hash else "empty",
                    "file", 0, None)
        # A message is read like a record file of one record: its documents are parts of the file, never cleaned.
        has_text = any(part[1] is not None for part in result.message.parts)
        return (str(c.path), c.size, c.mtime_ns, result.digest, "indexed" if has_text else "empty", "records", 1,
                _ONE_MESSAGE)

    def _message_documents(self, path: str, file_id: int, mtime_ns: int, read: "MessageRead") -> list[NewDocument]:
        """The documents of a file holding one message, keyed FILE#MESSAGE-ID (FILE#1 without one)."""
        own_key, own_id = MessageKeys(path, lambda key: False).message(read.message_id, 1)
        documents = message_documents(read, own_key, own_id, file_id, mtime_ns, self.summary.failed)
        self.summary.records += len(documents)
        return documents

    def _not_stored_meanwhile(self, read: list[tuple[_Pending, FileRead]]) -> list[tuple[_Pending, FileRead]]:
        """The files of `read` still to be stored, seen under the write lock: what is new or changed was decided
        from the store as it was when this add began, and another add of the same files may have stored them
        since. A file stored meanwhile with the bytes read here is unchanged; one stored with other bytes is
        replaced, its documents dropped first, as if this add had known it."""
        stored = self.store.existing_keys([str(i.candidate.path) for i, _ in read if not i.existed])
        out = []
        for item, result in read:
            path, c = str(item.candidate.path), item.candidate
            if not item.existed and path not in stored:
                out.append((item, result))
                continue
            row = self.store.file_by_path(path)
            before = self._known.get(path)
            if row is not None and before is not None and row == before:
                out.append((item, result))  # as this add found it: nobody else wrote it
            elif row is not None and row.status != "missing" and row.kind == "file" and row.digest == result.digest:
                self.store.touch_file(row.id, c.size, c.mtime_ns)
                self.summary.unchanged += 1
            else:
                out.append((replace(item, existed=True), result))
        return out

    # --- record files --------------------------------------------------------------

    def _ingest_record_file(self, candidate: Candidate, options: RecordOptions) -> None:
        """A record file read whole, or only past what an earlier read got through when that part is unchanged.

        A compressed file is read through its decompressed bytes; its stored size and offset are of those, and
        its digest carries the compressed size ('HASH@SIZE'), which with its time tells a changed file. A
        compressed file that changed cannot be appended to in general, so it is read again whole; an
        interrupted read of one (no time stored yet) goes on past the decompressed bytes it got through, once
        they hash as before."""
        path = str(candidate.path)
        known = self._known.get(path)
        live = known is not None and known.status != "missing"
        same_reading = live and known.kind == "records" and known.options == options.to_json()
        compressed = compression_of(candidate.path) is not None
        size_tag = f"@{candidate.size}" if compressed else ""
        if compressed:
            same_size = same_reading and known.digest.endswith(size_tag)
        else:
            same_size = same_reading and known.size == candidate.size
        if same_size and known.mtime_ns == candidate.mtime_ns:
            self.summary.unchanged += 1
            return
        if compressed:
            may_go_on = same_reading and known.mtime_ns == 0  # an interrupted read
        else:
            may_go_on = same_reading and candidate.size >= known.size
        mail = options.format in MAIL_FORMATS
        try:
            with open_record_file(candidate.path) as stream:
                hasher = xxhash.xxh3_128()
                start = (0, 0)
                if (
                    may_go_on
                    and _ends_a_line(stream, known.size)
                    and _hash_prefix(stream, known.size, hasher) == known.digest.split("@")[0]
                ):
                    start = (known.size, known.records)  # grown, or read part-way before: go on from there
                    if not compressed and known.size == candidate.size:
                        with self.store.transaction():
                            self.store.touch_file(known.id, candidate.size, candidate.mtime_ns)
                        self.summary.unchanged += 1
                        return
                else:
                    hasher = xxhash.xxh3_128()
                reader = _MailRead if mail else _RecordRead
                read = reader(self, path, candidate.mtime_ns, options, replace=live and start == (0, 0))
                read.watched, read.found = True, known
                read.digest_suffix = size_tag
                read.run(stream, start, hasher, None if compressed else candidate.size)
        except OSError as exc:
            self.summary.failed.append((path, exc.strerror or str(exc)))
            return
        except DatabaseError:
            raise  # the store, not this file, failed (a full disk): the whole add stops, one line
        except DedupError as exc:
            # A ReadError names what it read (its bytes, here): the path beside it says which file.
            self.summary.failed.append((path, exc.reason if isinstance(exc, ReadError) else str(exc)))
            return
        (self.summary.updated if live else self.summary.added).append(path)

    def _ingest_stdin(self, stdin: BinaryIO | None, options: RecordOptions) -> None:
        """Standard input is read as the record file '<stdin>': each add replaces what it held before."""
        import sys

        if stdin is None and sys.stdin is None:  # started with standard input closed ('<&-')
            raise InputError("standard input is closed")
        source = stdin if stdin is not None else sys.stdin.buffer
        with tempfile.SpooledTemporaryFile(max_size=_SPOOL_BYTES) as spool:  # record reading needs to seek
            size = 0
            while chunk := source.read(1 << 20):
                spool.write(chunk)
                size += len(chunk)
            known = self.store.file_by_path(STDIN_NAME)
            live = known is not None and known.status != "missing"
            held = len(self.store.documents_of_file(known.id)) if live else 0
            read = _RecordRead(self, STDIN_NAME, time.time_ns(), options, replace=live, key_prefix="stdin")
            read.run(spool, (0, 0), xxhash.xxh3_128(), size)
        (self.summary.updated if live else self.summary.added).append(STDIN_NAME)
        if held:  # said, since a second corpus piped in would otherwise take the first's place unnoticed
            note = (f"replaced the {held:,} records an earlier add of standard input stored: it is one source (save "
                    "each corpus to a file to keep both)")
            self.summary.warnings.append((STDIN_NAME, note))

    # --- vanished files ------------------------------------------------------------

    def _notice_missing(self, root: Path, seen: set[str]) -> None:
        gone = [f for f in self.store.files_under(str(root)) if f.status != "missing" and f.path not in seen]
        gone = [f for f in gone if _vanished(f.path)]
        if not gone:
            return
        with self.store.transaction():
            for f in gone:
                self.indexer.remove_documents(self.store.documents_of_file(f.id))
                self.store.set_file_status(f.id, "missing")
        self.summary.missing += [f.path for f in gone]


# A record file goes to the workers in chunks of about this many lines or bytes (a CSV chunk runs on until its
# quotes are even): each is one worker's task, small enough that the parts of a batch spread over the workers.
CHUNK_LINES = 256
CHUNK_BYTES = 1 << 20


class _RecordRead:
    """Streams one record file into the store in batches; the file row records how far it got, so an
    interrupted read resumes and a grown file is read only past what was read before.

    This process only cuts the file into chunks at line ends and hashes its bytes; the workers parse, normalize
    and sketch the records. A CSV chunk may prove to end inside a record (its quotes misled the cut): the
    records before it are stored, the batch read after it is dropped, and reading goes on from that record, read
    here whole, as read_records would."""

    def __init__(
        self, ingest: Ingest, path: str, mtime_ns: int, options: RecordOptions, replace: bool, key_prefix: str = ""
    ) -> None:
        self.ingest = ingest
        self.path = path
        self.mtime_ns = mtime_ns
        self.options = options
        self.replace = replace  # the records stored for this file so far are to be dropped first
        self.key_prefix = key_prefix or path
        self.digest_suffix = ""  # '@SIZE' for a compressed file: its compressed size, stored with the digest
        # With watched, the file's row as this read found it or last wrote it (standard input is not watched: each
        # add of it replaces what it held). Another add reading the same file moves the row on: this read then
        # leaves the file to it (the records are the same), rather than store them twice or call them duplicates.
        self.watched = False
        self.found: FileRow | None = None
        self.left = False
        self.encoding = "utf-8"
        self.layout: CsvLayout | None = None
        # Set by the batch that met an open end: (offset, line, hasher) of the record to read on from; the
        # batches read after it, of an older generation, are dropped.
        self.restart: tuple[int, int, object] | None = None
        self.generation = 0

    def run(self, stream: BinaryIO, start: tuple[int, int], hasher, size: int | None) -> None:
        """Read from start on; the read is done once offset reaches size (None: once the records end, for a
        compressed file whose decompressed size is known only then)."""
        stream.seek(0)
        self.encoding = sniff_encoding(stream.read(64 * 1024))
        limit = self.options.max_record_bytes or MAX_RECORD_BYTES
        offset, line = start
        quote = None
        if self.options.format == "csv":
            self.layout = csv_layout(stream, self.options, self.encoding, limit)
            if self.layout is not None:
                quote = (self.layout.dialect.quotechar or "").encode(self.encoding, errors="ignore")
                if offset < self.layout.header_end[0]:
                    stream.seek(offset)
                    hasher.update(stream.read(self.layout.header_end[0] - offset))
                    offset, line = self.layout.header_end
        stream.seek(offset)
        cutter = ChunkCutter(stream, offset, line, hasher, limit, quote)
        parsed: list[Record | BadRecord] = []  # read here after an open end: first in the next batch
        while True:
            pieces: list[Chunk | list] = [parsed] if parsed else []
            starts: list = [None] if parsed else []
            parsed = []
            lines, target, held = 0, self.ingest.batch_size(), 0
            while lines < target and held < FILE_BATCH_BYTES and not cutter.ended:  # this process holds the bytes
                before = cutter.hasher.copy()
                piece = cutter.next(min(CHUNK_LINES, target - lines), CHUNK_BYTES)
                if piece is None:
                    break
                if isinstance(piece, BadRecord):  # a line too long to be read: no worker needs it
                    pieces.append([piece])
                    starts.append(None)
                    lines += 1
                    continue
                pieces.append(piece)
                starts.append(before)
                lines += piece.lines
                held += len(piece.data)
            done = cutter.ended and (size is None or cutter.offset >= size)
            digest = cutter.hasher.hexdigest() + self.digest_suffix
            self._flush(pieces, starts, cutter.offset, cutter.line, digest, done)
            if cutter.ended:
                # The last batch is stored before this file is left: a chunk of it may end open, and the file
                # must then be read on from there.
                self.ingest._drain()
            if self.left:
                return
            if self.restart is not None:
                self.ingest._drain()  # the batch cut after the open end: dropped, its generation is gone
                offset, line, hasher = self.restart
                self.restart = None
                stream.seek(offset)
                item = first_record(stream, self.options, offset, line, self.encoding, hasher, self.layout)
                cutter.resume(item.end_offset, item.end_line, hasher)
                if isinstance(item, EndOfRecords):
                    cutter.ended = True
                else:
                    parsed = [item]
                continue
            if cutter.ended:
                break
        self.ingest.summary.bytes_read += cutter.offset - start[0]

    def _flush(self, pieces, starts, offset: int, line: int, digest: str, done: bool) -> None:
        generation = self.generation
        jobs = [(self.options, self.encoding, self.layout, piece) for piece in pieces]
        self.ingest.submit(
            read_record_chunks, jobs,
            lambda results: self._apply(generation, pieces, starts, results, offset, line, digest, done),
            part_items=1, min_items=1,
        )
        if not self.digest_suffix:  # a compressed file's offsets count decompressed bytes: it moves the bar at its end
            self.ingest.report_progress(offset)

    def _apply(self, generation: int, pieces, starts, results: list[ChunkRead], offset: int, line: int,
               digest: str, done: bool) -> None:
        store = self.ingest.store
        if self.left or generation != self.generation:
            return
        rows: list = []
        sketches: dict[bytes, Sketch] = {}
        columns: dict[bytes, tuple] = {}
        for piece, before, read in zip(pieces, starts, results):
            rows += read.rows
            for sketch, made in zip(read.sketches, read.columns):
                sketches[sketch.content_hash] = sketch
                columns[sketch.content_hash] = made
            if read.open_end is not None:
                # The chunk ended inside a record: store what came before it, and read on from there.
                offset, line = read.open_end
                hasher = before.copy()
                hasher.update(piece.data[: offset - piece.offset])
                digest, done = hasher.hexdigest() + self.digest_suffix, False
                self.restart = (offset, line, hasher)
                self.generation += 1
                break
        summary = self.ingest.summary
        with store.transaction():
            file_id = self._save_progress(offset, line, digest, done)
            if file_id is None:
                return
            # Earlier batches are in the store by now, so a repeated id shows either there or in this batch:
            # no set of every key read needs to be held, however long the file.
            prefix = self.key_prefix + "#"
            taken = store.existing_keys([prefix + row[1] for row in rows if row[5] is None])
            documents = []
            for record_line, record_id, text_hash, text_snippet, size, reason in rows:
                if reason is not None:
                    summary.note_bad(f"{self.path}:{record_line}", reason)
                    continue
                if text_hash is None:  # as a query of it is refused: said, not dropped unseen
                    summary.note_bad(f"{self.path}:{record_line}", EMPTY_RECORD)
                    continue
                key = prefix + record_id
                if key in taken:
                    summary.note_bad(f"{self.path}:{record_line}", f"duplicate id {record_id!r}")
                    continue
                taken.add(key)
                documents.append(NewDocument(key, file_id, record_id, text_hash, size, self.mtime_ns, text_snippet))
            summary.new_contents += self.ingest.indexer.add_documents(documents, sketches, columns)
            summary.records += len(documents)
            self._saw_own_write()

    def _save_progress(self, offset: int, line: int, digest: str, done: bool) -> int | None:
        """Within the batch's transaction: record how far the file is read (its row) and drop what it held before
        on the first batch of a read that replaces it; returns the file's id, or None when another add has moved
        its row on since (the file is then left to it)."""
        store = self.ingest.store
        if self.watched and store.file_by_path(self.path) != self.found:
            self.left = True
            return None
        ids = store.save_files(
            [(self.path, offset, self.mtime_ns if done else 0, digest, "indexed", "records", line,
              self.options.to_json())]
        )
        file_id = ids[self.path]
        if self.replace:
            self.ingest.indexer.remove_documents(store.documents_of_file(file_id))
            self.replace = False
        return file_id

    def _saw_own_write(self) -> None:
        """The file's row as this read last wrote it, to tell another add's writes from its own."""
        if self.watched:
            self.found = self.ingest.store.file_by_path(self.path)


class _MailRead(_RecordRead):
    """Streams a mailbox into the store in batches of messages, each message
    a document keyed FILE#MESSAGE-ID, each readable attachment one keyed FILE#MESSAGE-ID/NAME. The file row
    counts the messages read in place of lines, so a grown mailbox is read from its first new message on."""

    def run(self, stream: BinaryIO, start: tuple[int, int], hasher, size: int | None) -> None:
        ingest = self.ingest
        batch: list = []
        held = 0
        offset, position = start
        for message in messages_of(stream, self.options.format, start[0], start[1], hasher, ingest.max_file_bytes):
            offset, position = message.end_offset, message.position
            batch.append(message)
            held += len(message.data or b"")
            # A message can be long and bring attachments: a batch is bounded by its bytes too.
            if len(batch) >= max(1, ingest.batch_size() // 8) or held >= _MAIL_BATCH_BYTES:
                self._flush(batch, offset, position, hasher.hexdigest(), done=False)
                batch, held = [], 0
                if self.left:
                    return
        self._flush(batch, offset, position, hasher.hexdigest(), done=True)
        ingest.summary.bytes_read += offset - start[0]

    def _flush(self, batch, offset: int, line: int, digest: str, done: bool) -> None:
        ingest = self.ingest
        jobs = [(m.data, ingest.max_file_bytes, ingest.extract_seconds) for m in batch]
        self.ingest.submit(
            read_messages, jobs, lambda results: self._apply(batch, results, offset, line, digest, done),
            ahead=1,  # a batch of messages may hold _MAIL_BATCH_BYTES: one ahead bounds what is held
        )
        self.ingest.report_progress(offset)

    def _apply(self, batch, reads, offset: int, line: int, digest: str, done: bool) -> None:
        store, summary = self.ingest.store, self.ingest.summary
        if self.left:
            return
        with store.transaction():
            file_id = self._save_progress(offset, line, digest, done)
            if file_id is None:
                return
            wanted = [f"{self.path}#{r.message_id}" for r in reads if r.message_id is not None]
            taken = store.existing_keys(wanted)
            keys = MessageKeys(self.path, taken.__contains__)
            documents = []
            for message, read in zip(batch, reads):
                own_key, own_id = keys.message(read.message_id, message.position)
                taken.add(own_key)
                documents += message_documents(read, own_key, own_id, file_id, self.mtime_ns, summary.failed)
            sketches = {s.content_hash: s for read in reads for s in read.sketches}
            summary.new_contents += self.ingest.indexer.add_documents(documents, sketches)
            summary.records += len(documents)
            self._saw_own_write()


_ONE_MESSAGE = RecordOptions("message").to_json()
_MAIL_BATCH_BYTES = 32 * 1024 * 1024  # of raw messages in one batch (two batches are held at once)
_COMPRESSED_DOCUMENT = (
    "compressed: read only as records (--records auto reads JSONL and CSV by their suffix; --lines, one a line)"
)


def _vanished(path: str) -> bool:
    """True only when the file is really not there: a folder that cannot be read says nothing of its files."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def _ends_a_line(stream: BinaryIO, offset: int) -> bool:
    """Whether what was read before ended with a whole line: only then can reading go on from there (a last
    line still being written when it was read must be read again whole)."""
    if offset == 0:
        return True
    stream.seek(offset - 1)
    return stream.read(1) == b"\n"


def _hash_prefix(stream: BinaryIO, length: int, hasher) -> str:
    """Feed the first length bytes of stream to hasher and return its digest."""
    stream.seek(0)
    remaining = length
    while remaining > 0:
        chunk = stream.read(min(remaining, 1 << 20))
        if not chunk:
            break
        hasher.update(chunk)
        remaining -= len(chunk)
    return hasher.hexdigest()


_SNIPPET_TRY = SNIPPET_CHARS + SNIPPET_CHARS // 4  # raw characters that nearly always give a whole snippet


def snippet(raw_text: str) -> str:
    """The start of the original text with its whitespace collapsed, for listings. A start collapsed is the
    start of the whole collapsed, so a short start is tried first: it is enough unless its whitespace is long."""
    head = " ".join(raw_text[:_SNIPPET_TRY].split())
    if len(head) < SNIPPET_CHARS and len(raw_text) > _SNIPPET_TRY:
        head = " ".join(raw_text[: SNIPPET_CHARS * 4].split())
    return head[:SNIPPET_CHARS]
