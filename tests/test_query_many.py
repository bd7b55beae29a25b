"""Batch queries: Database.query_many / query_records and 'dedupdb query --records' answer as many single queries
would, without storing anything."""

from __future__ import annotations

import gzip
import io
import itertools
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

import dedupdb
from dedupdb.errors import DedupError, InputError
from dedupdb.ingest import querying
from dedupdb.ingest.records import RecordOptions

from .conftest import CHINESE, CHINESE_EDITED, CHINESE_OTHER, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, write

WORDS = ("river", "stone", "market", "window", "silver", "garden", "letter", "winter", "engine", "harbour", "candle",
         "forest", "mirror", "ladder", "pocket", "thunder")
HANZI = "天气很好我们一起去公园散步看到多人在湖边钓鱼孩子草地上放风筝大家都开心酒店服务态度非常差房间又小脏"
LONG = " ".join(f"{WORDS[i % 16]}{i // 16}" for i in range(400))  # a long text, for passages and containment

NO_TEXT = "no field 'text' (--text-field names the field holding the text)"  # a record without the text's field


def _corpus() -> list[str]:
    texts = [ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, CHINESE, CHINESE_EDITED, CHINESE_OTHER, LONG]
    for i in range(40):  # near-duplicate families, so that candidates and verdicts of every kind occur
        words = [WORDS[(i * 7 + j * 3) % 16] for j in range(30 + i % 10)]
        texts.append(" ".join(words))
        texts.append(" ".join(words[:-2] + ["changed", "ending"]))
        texts.append("".join(HANZI[(i * 5 + j) % len(HANZI)] for j in range(20 + i % 30)))
    return texts


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    folder = tmp_path_factory.mktemp("store")
    records = folder / "corpus.jsonl"
    records.write_text("".join(json.dumps({"id": str(i), "text": t}, ensure_ascii=False) + "\n"
                               for i, t in enumerate(_corpus())), encoding="utf-8")
    path = folder / "store.db"
    with dedupdb.open(path) as db:
        db.add([records], records=RecordOptions("jsonl", id_field="id"), workers=0)
    return path


def _jsonl_of(texts: list[str]) -> str:
    return "".join(json.dumps({"text": t}, ensure_ascii=False) + "\n" for t in texts)


def _queries() -> list[str]:
    corpus = _corpus()
    out = list(corpus[:12])
    out += [ENGLISH.upper(), ENGLISH_EDITED.replace("plan", "scheme"), CHINESE_EDITED.replace("开心", "高兴")]
    out += [LONG[1000:1400], LONG[2000:2100], " ".join(LONG.split()[50:58]), LONG + " and more words at its end"]
    out += [corpus[20] + " " + corpus[30], corpus[25][: len(corpus[25]) // 2], "", "   ", "!!! ???", "。，、", "word"]
    out += ["line one\nline two\r\nline three", "ＦＵＬＬ　ｗｉｄｔｈ text", CHINESE.replace("很", "\n很")]
    return out


def _single(db, text, **options):
    try:
        return db.query(text, **options), None
    except InputError as exc:
        return [], str(exc)


def _assert_same(db, texts, results, **options):
    results = list(results)
    assert len(results) == len(texts)
    for text, result in zip(texts, results):
        hits, error = _single(db, text, **options)
        assert (result.hits, result.error) == (hits, error), text


@pytest.mark.parametrize("options", [{}, {"containment": None}, {"threshold": 0.3, "top": 0}, {"containment": 0.3}])
@pytest.mark.parametrize("candidates", [500, 2])
def test_query_many_equals_single_queries(store, monkeypatch, options, candidates):
    """With the candidates a query scores for containment capped low too: a batch ranks them all at once (most
    fingerprints shared first, then by id), a single query one by one, and both keep the same ones."""
    from dedupdb.index import containment as finder

    monkeypatch.setattr(finder, "QUERY_CANDIDATES", candidates)
    monkeypatch.setattr(querying, "QUERY_BATCH", 9)  # several batches, one of them partial
    texts = _queries()
    with dedupdb.open(store) as db:
        before = db.store.counts()
        _assert_same(db, texts, db.query_many(texts, workers=0, **options), **options)
        assert db.store.counts() == before  # nothing was stored
    assert any(r.hits for r in dedupdb.open(store).query_many(texts, workers=0))


def _where_batches_go(monkeypatch) -> list[tuple]:
    """A list that records each batch answered here, ("here", texts), and each handed to the workers, ("workers",
    texts, shared out or not)."""
    events = []
    answer_here, submit = dedupdb.Database._answer_here, querying.WorkPool.submit
    monkeypatch.setattr(dedupdb.Database, "_answer_here",
                        lambda self, items, *a, **k: events.append(("here", len(items))) or answer_here(self, items, *a, **k))
    monkeypatch.setattr(querying.WorkPool, "submit",
                        lambda self, work, items, **k: events.append(("workers", len(items), k["spread"]))
                        or submit(self, work, items, **k))
    return events


@pytest.mark.parametrize("workers", [1, 2])
def test_query_many_in_worker_processes(store, monkeypatch, workers):
    """The workers answer every batch from their own read of the store, and the answers are query()'s, in order.
    The first two batches are shared out among them; a third proves the input long, and the batches from it on go
    out whole (a batch's lookups cost much the same for part of it), but for the last, shared out again."""
    monkeypatch.setattr(querying, "QUERY_BATCH", 80)
    events = _where_batches_go(monkeypatch)
    texts = (_queries() * 12)[:250]
    with dedupdb.open(store) as db:
        results = list(db.query_many(texts, workers=workers))
        # A second batch starts the workers, and they take the first too (their own calls are counted in their
        # copies of this list); one batch is all answered here.
        assert events == [("workers", 80, True), ("workers", 80, True), ("workers", 80, False), ("workers", 10, True)]
        _assert_same(db, texts, results)
        events.clear()
        results = list(db.query_many(texts[:160], workers=workers))  # two batches: both shared out
        assert events == [("workers", 80, True), ("workers", 80, True)]
        _assert_same(db, texts[:160], results)
        events.clear()
        assert [r.id for r in db.query_many(texts[:80], workers=workers)] == [str(i) for i in range(80)]
        assert events == [("here", 80)]


@pytest.mark.parametrize("workers", [1, 2])
def test_one_batch_on_a_large_store_is_shared_out_when_longer_than_a_small_stores(store, monkeypatch, workers):
    """On a large store a batch holds more texts (query_batch): an input that is one batch, but longer than a small
    store's batch (QUERY_BATCH), is shared out among the workers rather than answered on one core; one no longer
    is answered here, as on a small store."""
    monkeypatch.setattr(querying, "QUERY_BATCH", 80)
    monkeypatch.setattr(querying, "query_batch", lambda stored_texts: 200)
    events = _where_batches_go(monkeypatch)
    texts = (_queries() * 12)[:250]
    with dedupdb.open(store) as db:
        results = list(db.query_many(texts[:150], workers=workers))
        assert events == [("workers", 150, True)]
        _assert_same(db, texts[:150], results)
        events.clear()
        assert [r.id for r in db.query_many(texts[:80], workers=workers)] == [str(i) for i in range(80)]
        assert events == [("here", 80)]
        events.clear()
        results = list(db.query_many(texts, workers=workers))  # two batches: both shared out
        assert events == [("workers", 200, True), ("workers", 50, True)]
        _assert_same(db, texts, results)


@pytest.mark.parametrize("workers", [1, 2])
def test_a_large_record_file_gives_each_worker_whole_batches(store, monkeypatch, tmp_path, workers):
    """A record file known to be large starts the workers at once and hands each a whole batch (splitting one
    costs its lookups twice), several in flight, but for the last, shared out among them (one would work while
    the others wait); the answers are query()'s, in the file's order."""
    monkeypatch.setattr(querying, "QUERY_BATCH", 80)
    monkeypatch.setattr(querying, "POOL_AT_ONCE_BYTES", 1)
    events = []
    submit = querying.WorkPool.submit
    monkeypatch.setattr(querying.WorkPool, "submit",
                        lambda self, work, items, **k: events.append((len(items), k["spread"])) or submit(self, work, items, **k))
    texts = (_queries() * 12)[:250]
    path = tmp_path / "queries.jsonl"
    path.write_text("".join(json.dumps({"id": f"q{i}", "text": t}, ensure_ascii=False) + "\n" for i, t in enumerate(texts)),
                    encoding="utf-8")
    with dedupdb.open(store) as db:
        results = list(db.query_records(path, workers=workers))
        assert events == [(80, False), (80, False), (80, False), (10, True)]
        assert [r.id for r in results] == [str(line) for line in range(1, 251)]  # no id field: the line
        _assert_same(db, texts, results)
        # Standard input is large too, and its batches go out as they come: the last is not held back to be shared.
        events.clear()
        piped = list(db.query_records("-", RecordOptions("jsonl"), workers=workers, stdin=io.BytesIO(path.read_bytes())))
        assert events == [(80, False), (80, False), (80, False), (10, False)]
        assert [(r.id, r.hits) for r in piped] == [(r.id, r.hits) for r in results]
        # A batch of long texts ends early, at QUERY_BATCH_CHARS characters of text.
        bound = sum(map(len, texts[:30]))
        monkeypatch.setattr(querying, "QUERY_BATCH_CHARS", bound)
        events.clear()
        assert [(r.id, r.hits) for r in db.query_records(path, workers=workers)] == [(r.id, r.hits) for r in results]
        sizes, start = [n for n, _ in events], 0
        assert len(sizes) > 5 and sum(sizes) == len(texts)
        for n in sizes[:-1]:  # each batch but the last reaches the bound with its last text, and not before it
            assert sum(map(len, texts[start : start + n])) >= bound > sum(map(len, texts[start : start + n - 1]))
            start += n


def test_workers_find_a_store_opened_by_a_relative_path_after_a_change_of_folder(store, monkeypatch, tmp_path):
    monkeypatch.setattr(querying, "QUERY_BATCH", 80)
    monkeypatch.chdir(store.parent)
    texts = (_queries() * 12)[:200]
    with dedupdb.open(store.name, create=False) as db:
        monkeypatch.chdir(tmp_path)
        results = list(db.query_many(texts, workers=1))
        _assert_same(db, texts, results)
    assert not (tmp_path / store.name).exists()


@hypothesis_settings(max_examples=40, deadline=None,
                     suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.one_of(
    st.lists(st.sampled_from(WORDS), min_size=0, max_size=60).map(" ".join),
    st.text(alphabet=HANZI + "，。 ", min_size=0, max_size=60),
    st.sampled_from(_corpus()),
    st.tuples(st.sampled_from(_corpus()), st.integers(0, 200), st.integers(1, 300)).map(lambda t: t[0][t[1]:t[1] + t[2]]),
), min_size=1, max_size=12))
def test_query_many_is_single_queries_property(store, texts):
    with dedupdb.open(store) as db:
        _assert_same(db, texts, db.query_many(texts, workers=0))


def test_ids_given_or_by_position(store):
    with dedupdb.open(store) as db:
        results = list(db.query_many([ENGLISH, ("mine", CHINESE), ENGLISH_OTHER], workers=0))
        assert [r.id for r in results] == ["0", "mine", "2"]
        assert results[1].hits[0].exact
        with pytest.raises(InputError):
            list(db.query_many([ENGLISH, 42], workers=0))


def test_results_stream_from_an_endless_input(store, monkeypatch):
    monkeypatch.setattr(querying, "QUERY_BATCH", 5)
    with dedupdb.open(store) as db:
        first = list(itertools.islice(db.query_many(itertools.cycle([ENGLISH, CHINESE]), workers=0), 12))
    assert [r.hits[0].exact for r in first] == [True] * 12


def test_query_many_on_an_empty_store(tmp_path):
    with dedupdb.open(tmp_path / "empty.db") as db:
        results = list(db.query_many([ENGLISH, ""], workers=0))
    assert [r.hits for r in results] == [[], []]
    assert results[1].error == "the query text is empty"


@pytest.mark.parametrize("workers", [0, 1])
def test_half_a_surrogate_pair_is_a_query_error_not_a_crash(store, monkeypatch, workers):
    """A Python string can hold half a surrogate pair, which no store or encoding takes: query() and similarity()
    refuse it with one clear error, and a batch query answers it with that error, the texts around it answered as
    ever."""
    monkeypatch.setattr(querying, "QUERY_BATCH", 2)
    broken = "café \ud800 " + CHINESE
    with dedupdb.open(store) as db:
        with pytest.raises(InputError, match="not valid Unicode"):
            db.query(broken)
        with pytest.raises(InputError, match="text_b is not valid Unicode"):
            db.similarity(CHINESE, broken)
        results = list(db.query_many([ENGLISH, broken, CHINESE, "x \udfff y"] * 2, workers=workers))
    assert [r.error for r in results] == [None, querying.NOT_UNICODE, None, querying.NOT_UNICODE] * 2
    assert all(r.hits[0].exact for r in results if r.error is None) and not any(r.hits for r in results if r.error)


def test_query_records_of_files(store, tmp_path):
    texts = _queries()
    rows = [{"uid": f"u{i}", "body": t} for i, t in enumerate(texts)]
    jsonl = tmp_path / "q.jsonl.gz"
    with gzip.open(jsonl, "wt", encoding="utf-8") as fh:
        fh.writelines(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)
    with dedupdb.open(store) as db:
        seen = []
        results = list(db.query_records(jsonl, RecordOptions(text_field="body", id_field="uid"), workers=0,
                                        progress=lambda done, total: seen.append((done, total))))
        assert [r.id for r in results] == [r["uid"] for r in rows]
        _assert_same(db, texts, results)
        assert seen and seen[-1][1] == 0  # a compressed file's size in decompressed bytes is not known ahead

        lines = write(tmp_path / "q.txt", "\n".join([ENGLISH, "", CHINESE_EDITED]) + "\n")
        results = list(db.query_records(lines, workers=0))
        assert [(r.id, r.line) for r in results] == [("1", 1), ("3", 3)]
        assert results[0].hits[0].exact and results[1].hits

        empty = write(tmp_path / "empty.jsonl", "")
        assert list(db.query_records(empty, workers=0)) == []


def test_query_records_bad_records_and_bad_files(store, tmp_path):
    path = write(tmp_path / "bad.jsonl", json.dumps({"text": ENGLISH}) + "\n{oops\n" + json.dumps({"body": 1}) + "\n"
                 + json.dumps({"text": ENGLISH_OTHER}) + "\n")
    with dedupdb.open(store) as db:
        results = list(db.query_records(path, workers=0))
        assert [(r.line, r.error is None) for r in results] == [(1, True), (2, False), (3, False), (4, True)]
        assert results[1].error.startswith("invalid JSON") and results[2].error == NO_TEXT
        with pytest.raises(InputError, match="no such file"):
            db.query_records(tmp_path / "missing.jsonl")
        with pytest.raises(InputError, match="record format"):
            db.query_records("-", stdin=io.BytesIO(b""))
        (tmp_path / "broken.jsonl.gz").write_bytes(b"\x1f\x8b\x08\x00 not gzip at all")
        with pytest.raises(InputError, match="corrupt gzip"):
            list(db.query_records(tmp_path / "broken.jsonl.gz", workers=0))
        with pytest.raises(InputError, match="containment"):
            db.query_many([ENGLISH], containment=1.5)


def test_query_records_reads_on_past_what_the_parser_refuses(store, tmp_path):
    """An integer of more digits than Python converts, nesting deeper than its recursion and a NUL byte at the start
    are each one bad record, by file and by stream; a file of noise is refused with its name."""
    path = tmp_path / "q.jsonl"
    path.write_text('{"text": ' + "9" * 5000 + '}\n{"text": "a NUL \x00 here"}\n{"text": ' + "[" * 100_000
                    + "]" * 100_000 + '}\n{"text": "' + ENGLISH + '"}\n', encoding="utf-8")
    with dedupdb.open(store) as db:
        for results in (list(db.query_records(path, workers=0)),
                        list(db.query_records("-", RecordOptions("jsonl"), workers=0, stdin=io.BytesIO(path.read_bytes())))):
            assert [r.error for r in results] == ["invalid JSON (a number of more than 4,300 digits)",
                                                  "invalid JSON (Invalid control character at)",
                                                  "invalid JSON (nested too deeply)", None]
            assert results[3].hits[0].exact
        noise = tmp_path / "noise.jsonl"
        noise.write_bytes(bytes(range(256)) * 40)
        with pytest.raises(DedupError, match="noise.jsonl: binary file"):
            list(db.query_records(noise, workers=0))


@pytest.mark.parametrize("workers", [0, 2])
def test_an_input_that_breaks_off_is_answered_up_to_where_it_breaks(store, monkeypatch, workers):
    """Texts given before the input fails (an InputError: a compressed file cut short, an item of the wrong kind)
    are all answered, those of the batch it broke off in and those in flight too, then the error is raised."""
    monkeypatch.setattr(querying, "QUERY_BATCH", 50)
    texts = [f"{WORDS[i % 16]} {i} {WORDS[(i * 7) % 16]} {i * 7919 % 100_003}" for i in range(237)]

    def breaking():
        yield from texts
        raise InputError("the input broke off")

    answered = []
    with dedupdb.open(store) as db, pytest.raises(InputError, match="broke off"):
        for result in db.query_many(breaking(), workers=workers):
            answered.append(result.id)
    assert answered == [str(i) for i in range(237)]


def test_a_compressed_file_cut_short_is_answered_up_to_its_damage(store, tmp_path):
    """Cut short within its first 64 KiB, which the format is judged from, or further on: the records before the
    damage are answered (all but those of the last 16 KiB read), then its error."""
    import zlib

    texts = [f"{WORDS[i % 16]} {i * 7919 % 100_003} {WORDS[(i * 7) % 16]} {i * 104_729 % 1_000_003}" for i in range(6_000)]
    data = _jsonl_of(texts).encode("utf-8")
    whole = gzip.compress(data)
    per_piece = 16 * 1024 // min(len(line) for line in data.splitlines()) + 1  # lines a 16 KiB read may hold
    with dedupdb.open(store) as db:
        for cut in (len(whole) // 8, len(whole) // 2):
            path = tmp_path / f"cut{cut}.jsonl.gz"
            path.write_bytes(whole[:cut])
            recoverable = zlib.decompressobj(31).decompress(whole[:cut]).count(b"\n")
            answered = []
            with pytest.raises(InputError, match="corrupt gzip data"):
                for result in db.query_records(path, workers=0):
                    answered.append(result.id)
            assert recoverable > per_piece and answered == [str(i) for i in range(1, len(answered) + 1)]
            assert len(answered) >= recoverable - per_piece, (cut, recoverable, len(answered))


def test_a_named_pipe_is_read_as_it_is_written(store, tmp_path):
    """A named pipe given as the file (a shell's '<(...)') is read once, front to back, as standard input is:
    not refused as unseekable."""
    import os
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    body = _jsonl_of([ENGLISH, CHINESE]).encode("utf-8")

    def write():
        with open(fifo, "wb") as f:
            f.write(body)

    writer = threading.Thread(target=write)
    writer.start()
    with dedupdb.open(store) as db:
        results = list(db.query_records(fifo, RecordOptions("jsonl"), workers=0))
    writer.join()
    assert [r.id for r in results] == ["1", "2"] and all(r.hits[0].exact for r in results)


def test_library_arguments_of_the_wrong_kind_are_input_errors(store):
    """A wrong type or an out-of-range option is an InputError (OptionError for options) at the call, never a
    TypeError from deep inside, nor a generator that fails only once iterated."""
    from dedupdb.errors import OptionError

    with dedupdb.open(store) as db:
        for call in (lambda: db.query(b"bytes"), lambda: db.query(None), lambda: db.similarity("a b", 5),
                     lambda: db.query_many(None), lambda: db.query_many(ENGLISH), lambda: db.query_records(None),
                     lambda: db.query_records("q.jsonl", "jsonl"),
                     lambda: db.query_records("-", RecordOptions("jsonl"), stdin=io.StringIO("{}"))):
            with pytest.raises(InputError):
                call()
        for options in ({"top": -1}, {"top": "3"}, {"threshold": float("nan")}, {"threshold": 5},
                        {"containment": float("nan")}, {"threshold": "x"}):
            for call in (lambda o=options: db.query(ENGLISH, **o), lambda o=options: db.query_many([ENGLISH], workers=0, **o)):
                with pytest.raises(OptionError):
                    call()
        assert db.query(ENGLISH, top=np.int64(1), threshold=np.float64(0.5))[0].exact  # numpy's numbers are numbers
        assert db.query(ENGLISH, top=None) == db.query(ENGLISH, top=0)  # None, as 0: all


def test_query_records_from_stdin(store):
    rows = "".join(json.dumps({"id": f"s{i}", "text": t}, ensure_ascii=False) + "\n"
                   for i, t in enumerate([ENGLISH, CHINESE, ENGLISH_OTHER] * 30))
    with dedupdb.open(store) as db:
        for fmt in ("jsonl", "csv"):
            data = rows.encode() if fmt == "jsonl" else _csv(rows).encode()
            results = list(db.query_records("-", RecordOptions(fmt, id_field="id"), stdin=io.BytesIO(data), workers=0))
            assert [r.id for r in results] == [f"s{i}" for i in range(90)]
            assert all(r.hits and r.hits[0].exact for r in results)


def _csv(jsonl: str) -> str:
    import csv

    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["id", "text"])
    for line in jsonl.splitlines():
        row = json.loads(line)
        writer.writerow([row["id"], row["text"]])
    return out.getvalue()


# --- the command line ------------------------------------------------------------------------------------


@pytest.fixture
def indexed(cli, mixed_folder):
    assert cli("add", str(mixed_folder)).exit_code == 0
    return mixed_folder


def test_cli_query_records_json(cli, indexed, tmp_path):
    path = tmp_path / "posts.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as fh:
        for i, text in enumerate([ENGLISH_EDITED.replace("plan", "scheme"), "nothing like it at all", CHINESE]):
            fh.write(json.dumps({"id": f"p{i}", "text": text}, ensure_ascii=False) + "\n")
    result = cli("query", "--records", str(path), "--id-field", "id", "--format", "json", "--workers", "0")
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.stdout.splitlines()]
    assert [line["id"] for line in lines] == ["p0", "p1", "p2"]
    assert {m["key"].rsplit("/", 1)[-1] for m in lines[0]["matches"]} == {"report.txt", "report copy.txt",
                                                                          "report-edited.md"}
    assert lines[1]["matches"] == []
    exact = {m["key"].rsplit("/", 1)[-1] for m in lines[2]["matches"] if m["exact"] and m["jaccard"] == 1.0}
    assert exact == {"park-gb18030.txt", "park-utf16.txt"}
    assert set(lines[0]["matches"][0]) == {"key", "jaccard", "containment", "exact"}
    assert "Queried 3 records: 2 with matches" in result.stderr


def test_cli_query_records_csv_fields_and_table(cli, indexed, tmp_path):
    path = tmp_path / "posts.csv"
    path.write_text(f"uid,body\nx1,\"{ENGLISH}\"\nx2,{CHINESE_OTHER}\n", encoding="utf-8")
    result = cli("query", "--records", str(path), "--text-field", "body", "--id-field", "uid", "--workers", "0")
    assert result.exit_code == 0, result.output
    rows = [line.split("\t") for line in result.stdout.splitlines()]
    assert {(r[0], r[1].rsplit("/", 1)[-1], r[2]) for r in rows} == {
        ("x1", "report.txt", "exact"), ("x1", "report copy.txt", "exact"),
        ("x1", "report-edited.md", "jaccard 0.900, contained 0.923"), ("x2", "hotel.txt", "exact")}


def test_cli_query_records_lines_hold_one_field_each_whatever_the_ids_hold(cli, indexed, tmp_path):
    """Control characters in an id (a tab, a newline, a NUL) are written escaped in the tab-separated lines, so no id
    can part a line or make one up; --format json gives the id as it is. An option out of its range, NaN among
    them, is a usage error."""
    path = tmp_path / "q.jsonl"
    forged = "a\tb\nFAKE\tKEY\t1.0\x00"
    path.write_text(json.dumps({"id": forged, "text": CHINESE_OTHER}) + "\n", encoding="utf-8")
    result = cli("query", "--records", str(path), "--id-field", "id", "--workers", "0")
    assert result.exit_code == 0, result.output
    assert [line.split("\t")[0] for line in result.stdout.splitlines()] == ["a\\tb\\nFAKE\\tKEY\\t1.0\\x00"]
    result = cli("query", "--records", str(path), "--id-field", "id", "--workers", "0", "--format", "json")
    assert json.loads(result.stdout)["id"] == forged
    for option in ("--containment", "--threshold"):
        assert cli("query", "--records", str(path), option, "nan").exit_code == 2
        assert cli("query", CHINESE_OTHER, option, "nan").exit_code == 2


def test_cli_query_records_stdin(cli, indexed):
    text = f"{ENGLISH}\n{CHINESE_OTHER}\n"
    result = cli("query", "--records", "-", "--record-format", "lines", "--format", "json", input=text)
    assert result.exit_code == 0, result.output
    assert [len(json.loads(line)["matches"]) for line in result.stdout.splitlines()] == [3, 1]
    refused = cli("query", "--records", "-", input=text)
    assert refused.exit_code == 1 and "record format" in refused.stderr and len(refused.stderr.splitlines()) == 1


def test_cli_query_records_empty_and_bad_files(cli, indexed, tmp_path):
    empty = write(tmp_path / "empty.jsonl", "")
    result = cli("query", "--records", str(empty), "--format", "json")
    assert result.exit_code == 0 and result.stdout == ""
    bad = write(tmp_path / "bad.jsonl", json.dumps({"text": ENGLISH}) + "\nnot json\n" + json.dumps({"text": ""}) + "\n")
    result = cli("query", "--records", str(bad), "--format", "json")
    assert result.exit_code == 23
    assert len(result.stdout.splitlines()) == 1 and json.loads(result.stdout)["matches"]
    assert "bad.jsonl:2: invalid JSON" in result.stderr and "bad.jsonl:3: the query text is empty" in result.stderr
    for args, message in [
        (("--records", str(tmp_path / "missing.jsonl")), "no such file"),
        (("--records", str(tmp_path)), "is a folder"),
        (("--records", str(bad), "some text"), "not two of them"),
        (("some text", "--text-field", "body"), "go with --records"),
    ]:
        result = cli("query", *args)
        assert result.exit_code == 1 and message in result.stderr and len(result.stderr.splitlines()) == 1, result.output
    broken = tmp_path / "broken.jsonl.gz"
    broken.write_bytes(b"\x1f\x8b\x08\x00 not gzip at all")
    result = cli("query", "--records", str(broken))
    assert result.exit_code == 1 and "corrupt gzip" in result.stderr


def test_cli_query_records_on_an_empty_database(cli, tmp_path):
    path = write(tmp_path / "q.jsonl", json.dumps({"text": ENGLISH}) + "\n")
    assert cli("init").exit_code == 0
    result = cli("query", "--records", str(path))
    assert result.exit_code == 1 and "database is empty" in result.stderr


def test_search_agrees_with_judging_every_stored_text(store):
    # A single query is a batch of one (search_many): its verdicts are held here against judge() of the query
    # and each stored text in turn, with no index. What it finds, brute force confirms with the same Jaccard and
    # SimHash distance; what brute force finds at a Jaccard of 0.8 or more, the index's bands find too.
    from dedupdb.sketch.verify import Signature, judge
    from dedupdb.text.normalize import normalize

    with dedupdb.open(store) as db:
        stored = db.store.sketches(db.store.all_content_ids())
        s = db.settings
        checked = 0
        for text in _queries():
            if not normalize(text):
                continue
            fp = db.fingerprinter.one(normalize(text))
            if fp.shingles == 0:
                continue
            found = {m.content_id: m for m in db.indexer.search(fp) if not m.exact}
            mine = Signature(fp.sketch, fp.simhash)
            for cid, (sketch, simhash) in stored.items():
                if sketch is None:
                    continue
                verdict = judge(mine, Signature(sketch, None if simhash is None else simhash & (2**64 - 1)),
                                s.threshold, s.simhash_distance, s.sketch_size)
                if cid in found:
                    assert verdict.duplicate, text
                    assert (found[cid].jaccard, found[cid].hamming) == (verdict.jaccard, verdict.hamming)
                    checked += 1
                elif verdict.duplicate and verdict.jaccard >= 0.8:
                    assert db.store.content_ids_by_hash([fp.content_hash]).get(fp.content_hash) == cid, text
        assert checked >= 10


def test_the_documents_of_contents_are_read_by_key(tmp_path):
    """What a query's hits are read from (Store.documents_of_contents): every document holding these contents, by
    key, a text held by several documents among them, with the fields a hit shows; a content no document holds
    gives none."""
    records = tmp_path / "corpus.jsonl"
    texts = [ENGLISH, ENGLISH, CHINESE, ENGLISH_EDITED, ENGLISH, LONG]
    records.write_text("".join(json.dumps({"id": f"r{i}", "text": t}, ensure_ascii=False) + "\n"
                               for i, t in enumerate(texts)), encoding="utf-8")
    with dedupdb.open(tmp_path / "store.db") as db:
        db.add([records], records=RecordOptions("jsonl", id_field="id"), workers=0)
        by_record = {d.record: d for d in db.store.documents_of_contents(list(range(1, 5)) + [10**6])}
        assert sorted(by_record) == [f"r{i}" for i in range(len(texts))]
        held = {d.content_id: [r for r, e in by_record.items() if e.content_id == d.content_id] for d in by_record.values()}
        assert sorted(map(len, held.values())) == [1, 1, 1, 3] and held[by_record["r0"].content_id] == ["r0", "r1", "r4"]
        ordered = db.store.documents_of_contents([by_record["r4"].content_id, by_record["r2"].content_id])
        assert [d.key for d in ordered] == sorted(d.key for d in ordered) and len(ordered) == 4
        for record, doc in by_record.items():
            text = texts[int(record[1:])]
            assert (doc.key, doc.path, doc.bytes) == (f"{records}#{record}", str(records), len(text.encode()))
            assert doc.snippet and doc.snippet.split()[0] in text
        assert [h.record for h in db.query(ENGLISH) if h.exact] == ["r0", "r1", "r4"]


def test_a_batch_verifies_its_near_duplicates_with_the_sketches_its_containment_search_read(store, monkeypatch):
    """A batch's containment search reads its candidates' sides first; verifying its near-duplicate candidates then
    reads only the sketches of those not among them, and takes the others from the sides: the same table as
    reading them all, and the same answers as query()'s."""
    from dedupdb.sketch.verify import SketchTable

    texts = _queries()
    with dedupdb.open(store) as db:
        asked = []
        sketch_columns = db.store.sketch_columns
        monkeypatch.setattr(db.store, "sketch_columns", lambda ids: asked.append(list(ids)) or sketch_columns(ids))
        alone = list(db.query_many(texts, workers=0, containment=None))
        read_alone = sum(map(len, asked))
        asked.clear()
        results = list(db.query_many(texts, workers=0))
        assert sum(map(len, asked)) < read_alone / 2 and any(r.hits for r in alone)
        _assert_same(db, texts, results)
        sides = {}
        ids = np.arange(1, 60, dtype=np.int64)
        db.indexer.containment.read_sides(ids[::2].tolist(), sides)
        asked.clear()
        taken, read = db.indexer._stored_sketches(ids, sides), SketchTable(*sketch_columns(ids.tolist()))
        assert asked == [ids[1::2].tolist()]
        for name in ("ids", "values", "lengths", "simhashes", "has_simhash"):
            assert np.array_equal(getattr(taken, name), getattr(read, name)), name


def test_a_batch_looks_the_index_up_once_and_scores_its_texts_in_parts(store, monkeypatch):
    """A batch's lookups of the index (near-duplicate keys, containment fingerprints) are made once for all its
    texts; its texts are then scored QUERIES_SCORED_AT_ONCE at a time, the stored texts each part needs read for
    it alone, and every answer is query()'s."""
    texts = _queries()
    monkeypatch.setattr(querying, "QUERY_BATCH", len(texts))  # one batch
    monkeypatch.setattr(querying, "QUERIES_SCORED_AT_ONCE", 5)
    with dedupdb.open(store) as db:
        calls = {"match_index": 0, "containment_postings": 0, "containment_sides": 0}
        for name in calls:
            real = getattr(db.store, name)
            monkeypatch.setattr(db.store, name, lambda *a, _real=real, _name=name: calls.__setitem__(
                _name, calls[_name] + 1) or _real(*a))
        results = list(db.query_many(texts, workers=0))
        assert calls["match_index"] == 1 and calls["containment_postings"] <= 2  # a second for common phrasing
        assert calls["containment_sides"] > 1  # the parts' own reads
        monkeypatch.undo()
        _assert_same(db, texts, results)
        monkeypatch.setattr(querying, "QUERY_BATCH", len(texts))
        for part in (1, 7, len(texts)):
            monkeypatch.setattr(querying, "QUERIES_SCORED_AT_ONCE", part)
            again = list(db.query_many(texts, workers=0))
            assert [(r.id, r.hits, r.error) for r in again] == [(r.id, r.hits, r.error) for r in results], part


def test_a_batch_grows_with_the_store():
    """A batch query answers 4,096 texts together on a small store and more on a large one (a batch's lookups read
    most of a large store's index), at most MAX_QUERY_BATCH."""
    assert querying.query_batch(0) == querying.query_batch(50_000) == querying.QUERY_BATCH == 4096
    assert querying.query_batch(1_000_000) == 1_000_000 // querying.QUERY_BATCH_SHARE == 15_625
    assert querying.query_batch(10_000_000) == querying.MAX_QUERY_BATCH == 16_384


def test_near_duplicate_candidates_of_part_of_a_batch_are_its_own():
    """NearCandidates.part: the exact copies and (query, candidate) pairs of queries start to stop, numbered from 0."""
    from dedupdb.index.indexer import NearCandidates

    found = NearCandidates([None, 7, None, 9], np.array([0, 0, 2, 3, 3]), np.array([5, 6, 5, 1, 2]))
    part = found.part(1, 3)
    assert part.exact == [7, None] and part.queries.tolist() == [1] and part.candidates.tolist() == [5]
    last = found.part(3, 8)
    assert last.exact == [9] and last.queries.tolist() == [0, 0] and last.candidates.tolist() == [1, 2]
    assert found.part(4, 8).exact == [] and len(found.part(4, 8).queries) == 0
