"""Records parsed in the workers: the writing process cuts a record file into chunks at line ends, and what the
chunks give (documents, keys, bad records, the offsets and digests an interrupted read resumes from) must be what
one uninterrupted read_records of the whole file gives, whatever the cuts, the interrupts and the content."""

from __future__ import annotations

import io
import json

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import dedupdb
from dedupdb.ingest import pipeline
from dedupdb.ingest.records import (
    BadRecord,
    ChunkCutter,
    EndOfRecords,
    OpenEnd,
    Record,
    RecordOptions,
    chunk_records,
    csv_layout,
    first_record,
    read_records,
)
from dedupdb.text.hashing import content_hash
from dedupdb.text.normalize import normalize_lines

from .conftest import interrupt_batch

LIMIT = 80  # bytes a record may take: some lines below are longer
WORDS = ["alpha", "beta", "gamma", "delta", "epsilon", "zeta", "eta", "theta", "天气", "公园", "散步"]


def _words(draw, low: int = 0, high: int = 6) -> str:
    return " ".join(draw(st.lists(st.sampled_from(WORDS), min_size=low, max_size=high)))


@st.composite
def jsonl_line(draw) -> str:
    kind = draw(st.sampled_from(["record", "record", "record", "blank", "bad json", "not object", "no text",
                                 "long", "crlf", "number"]))
    ident = draw(st.integers(0, 12))
    if kind == "record":
        return json.dumps({"id": ident, "text": _words(draw)}, ensure_ascii=False)
    if kind == "crlf":
        return json.dumps({"id": ident, "text": _words(draw, 1)}) + "\r"
    if kind == "number":
        return json.dumps({"id": ident, "text": draw(st.integers(-5, 5))})
    if kind == "blank":
        return draw(st.sampled_from(["", "   ", "\t"]))
    if kind == "bad json":
        return '{"id": 1, "text": "unfinished'
    if kind == "not object":
        return "[1, 2]"
    if kind == "no text":
        return json.dumps({"id": ident})
    return json.dumps({"id": ident, "text": "long " * 30})


@st.composite
def csv_line(draw) -> str:
    kind = draw(st.sampled_from(["row", "row", "row", "quoted", "multiline", "unclosed", "stray", "doubled",
                                 "width", "blank", "long", "no id"]))
    ident = draw(st.integers(0, 12))
    if kind == "row":
        return f"{ident},{_words(draw, 1)}"
    if kind == "quoted":
        return f'{ident},"{_words(draw)}, with a comma"'
    if kind == "multiline":
        return f'{ident},"{_words(draw, 1, 3)}\n{_words(draw, 0, 3)}\n{_words(draw, 1, 2)}"'
    if kind == "unclosed":
        return f'{ident},"{_words(draw, 1, 3)}'
    if kind == "stray":
        return f'{ident},five" {_words(draw, 1, 3)}'
    if kind == "doubled":
        return f'{ident},"say ""{_words(draw, 1, 2)}"" twice"'
    if kind == "width":
        return f"{ident},{_words(draw, 1, 2)},extra"
    if kind == "blank":
        return ""
    if kind == "no id":
        return f",{_words(draw, 1, 2)}"
    return f"{ident},{'long ' * 30}"


@st.composite
def line_line(draw) -> str:
    kind = draw(st.sampled_from(["text", "text", "text", "blank", "long"]))
    if kind == "text":
        return _words(draw, 1)
    if kind == "blank":
        return draw(st.sampled_from(["", "  "]))
    return "long " * 30


@st.composite
def record_file(draw) -> tuple[str, bytes]:
    fmt = draw(st.sampled_from(["jsonl", "csv", "lines"]))
    line = {"jsonl": jsonl_line, "csv": csv_line, "lines": line_line}[fmt]
    lines = draw(st.lists(line(), min_size=0, max_size=40))
    text = "\n".join((["id,text"] if fmt == "csv" else []) + lines)
    if draw(st.booleans()):
        text += "\n"  # or the last line has no newline
    return fmt, text.encode("utf-8")


def _options(fmt: str) -> RecordOptions:
    return RecordOptions(fmt, None, "id" if fmt != "lines" else None, LIMIT).resolved(fmt)


def _reference(data: bytes, options: RecordOptions) -> list:
    return list(read_records(io.BytesIO(data), options, 0, 0, "utf-8", xxhash.xxh3_128()))


def _same(item) -> tuple:
    if isinstance(item, Record):
        return ("record", item.line, item.record_id, item.text, item.end_offset, item.end_line)
    if isinstance(item, BadRecord):
        return ("bad", item.line, item.reason, item.end_offset, item.end_line)
    return ("end", item.end_offset, item.end_line)


def _chunked(data: bytes, options: RecordOptions, sizes) -> tuple[list, str, tuple[int, int]]:
    """What the writing process and its workers make of the file: chunks cut at line ends and read apart, an open
    end read on from here whole; with the digest of all that was cut and where it ended."""
    stream = io.BytesIO(data)
    hasher = xxhash.xxh3_128()
    layout = None
    offset = line = 0
    if options.format == "csv":
        layout = csv_layout(stream, options, "utf-8", LIMIT)
        if layout is not None:
            hasher.update(data[: layout.header_end[0]])
            offset, line = layout.header_end
    stream.seek(offset)
    cutter = ChunkCutter(stream, offset, line, hasher, LIMIT, b'"' if layout else None)
    out = []
    while not cutter.ended:
        before = cutter.hasher.copy()
        piece = cutter.next(*next(sizes))
        if piece is None:
            break
        if isinstance(piece, BadRecord):
            out.append(piece)
            continue
        for item in chunk_records(piece, options, "utf-8", layout):
            if isinstance(item, OpenEnd):
                restart = before.copy()
                restart.update(piece.data[: item.offset - piece.offset])
                stream.seek(item.offset)
                first = first_record(stream, options, item.offset, item.line, "utf-8", restart, layout)
                cutter.resume(first.end_offset, first.end_line, restart)
                if isinstance(first, EndOfRecords):
                    cutter.ended = True
                else:
                    out.append(first)
                break
            out.append(item)
    return out, cutter.hasher.hexdigest(), (cutter.offset, cutter.line)


@settings(max_examples=300, deadline=None)
@given(record_file(), st.lists(st.tuples(st.integers(1, 6), st.integers(1, 200)), min_size=1), st.randoms())
def test_chunks_read_apart_give_what_one_read_gives(file, sizes, rnd):
    fmt, data = file
    options = _options(fmt)
    reference = _reference(data, options)
    cycle = iter(lambda: sizes[rnd.randrange(len(sizes))], None)
    items, digest, end = _chunked(data, options, cycle)
    assert [_same(i) for i in items] == [_same(i) for i in reference if not isinstance(i, EndOfRecords)]
    assert end == (reference[-1].end_offset, reference[-1].end_line)
    assert digest == xxhash.xxh3_128(data).hexdigest()  # every byte cut reached the hasher once, in order


def _expected(data: bytes, options: RecordOptions, name: str) -> tuple[dict[str, bytes], list[tuple[str, str]]]:
    """The documents (key -> content hash) and bad records one read_records of the file gives, as an add stores
    and reports them."""
    items = [i for i in _reference(data, options) if not isinstance(i, EndOfRecords)]
    texts = normalize_lines([i.text.replace("\n", " ") for i in items if isinstance(i, Record)])
    texts = iter(texts)
    documents: dict[str, bytes] = {}
    bad = []
    for item in items:
        if isinstance(item, BadRecord):
            bad.append((f"{name}:{item.line}", item.reason))
            continue
        text = next(texts)
        if not text:  # nothing to store: a bad record, said
            bad.append((f"{name}:{item.line}", "empty text"))
            continue
        key = f"{name}#{item.record_id}"
        if key in documents:
            bad.append((f"{name}:{item.line}", f"duplicate id {item.record_id!r}"))
            continue
        documents[key] = content_hash(text)
    return documents, bad


def _stored(db) -> dict[str, bytes]:
    rows = db.store.conn.execute(
        "SELECT d.key, c.hash FROM documents d JOIN contents c ON c.id = d.content_id"
    ).fetchall()
    return {key: bytes(h) for key, h in rows}


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(record_file(), st.integers(1, 6), st.integers(1, 4), st.integers(1, 5))
def test_an_add_interrupted_anywhere_stores_what_one_read_gives(tmp_path_factory, file, batch, chunk, at):
    fmt, data = file
    folder = tmp_path_factory.mktemp("chunks")
    path = folder / f"r.{ {'jsonl': 'jsonl', 'csv': 'csv', 'lines': 'txt'}[fmt] }"
    path.write_bytes(data)
    options = RecordOptions(fmt, id_field="id" if fmt != "lines" else None, max_record_bytes=LIMIT)
    documents, bad = _expected(data, _options(fmt), str(path))
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline, "CHUNK_LINES", chunk)
        mp.setattr(pipeline, "CHUNK_BYTES", 64)
        with dedupdb.open(folder / "whole.db") as db:
            mp.setattr(pipeline, "INGEST_BATCH", batch)
            summary = db.add([path], records=options, workers=0)
            assert _stored(db) == documents
            assert summary.bad_records == bad
            whole = db.store.file_by_path(str(path))
        resume = interrupt_batch(mp, at=at, batch=batch)
        with dedupdb.open(folder / "resumed.db") as db:
            try:
                db.add([path], records=options, workers=0)
                interrupted = False
            except KeyboardInterrupt:
                interrupted = True
            resume()
            kept = set(_stored(db))
            summary = db.add([path], records=options, workers=0)
            assert _stored(db) == documents
            assert summary.records == (len(documents) - len(kept) if interrupted else 0)
            if interrupted:  # read on from the stored offset: the bad records after it, in order
                assert summary.bad_records == bad[len(bad) - len(summary.bad_records):]
            row = db.store.file_by_path(str(path))
            assert (row.size, row.records, row.digest) == (whole.size, whole.records, whole.digest)


def test_open_ends_with_a_batch_in_flight(tmp_path, db_path, monkeypatch):
    """With a worker, the batch cut after the one that met an open end is already being read when the open end
    shows: it is dropped, and the file is read on from the open record, as one read_records would."""
    rows = ["id,text"]
    for i in range(1, 400):
        if i % 23 == 0:
            rows.append(f'{i},"record {i} opens a quote that is never closed')
        elif i % 17 == 0:
            rows.append(f'{i},"a field across lines {i}\nits second line {i}"')
        elif i % 11 == 0:
            rows.append(f'{i},five" stray quote {i} ' + " ".join(WORDS[: i % 7 + 1]))
        else:
            rows.append(f"{i},record number {i} " + " ".join(WORDS[i % 5 :]))
    data = ("\n".join(rows) + "\n").encode()
    path = tmp_path / "r.csv"
    path.write_bytes(data)
    options = RecordOptions("csv", id_field="id")
    documents, bad = _expected(data, options.resolved("csv"), str(path))
    monkeypatch.setattr(pipeline, "CHUNK_LINES", 7)
    monkeypatch.setattr(pipeline, "CHUNK_BYTES", 256)
    monkeypatch.setattr(pipeline, "INGEST_BATCH", 20)
    with dedupdb.open(db_path) as db:
        summary = db.add([path], records=options, workers=1)
        assert _stored(db) == documents
        assert summary.bad_records == bad
        assert db.store.file_by_path(str(path)).digest == xxhash.xxh3_128(data).hexdigest()
