from __future__ import annotations

import json
import sqlite3

import pytest

import dedupdb
import dedupdb.ingest.pipeline as pipeline
from dedupdb.ingest.records import RecordOptions

from .conftest import CHINESE, CHINESE_EDITED, CHINESE_OTHER, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, interrupt_batch, write

NO_TEXT = "no field 'text' (--text-field names the field holding the text)"  # a record without the text's field


def _summary(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _cluster_keys(cli) -> list[set[str]]:
    clusters = json.loads(cli("report", "--format", "json").stdout)
    return [{m["key"].rsplit("/", 1)[-1] for m in c["members"]} for c in clusters]


def _jsonl(rows) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def test_jsonl_records_with_ids_and_a_malformed_line(cli, tmp_path):
    path = tmp_path / "posts.jsonl"
    body = _jsonl([{"id": "p1", "text": CHINESE}, {"id": "p2", "text": CHINESE_EDITED}]) + "{broken\n"
    body += _jsonl([{"id": "p3", "text": CHINESE_OTHER}, {"id": 4, "body": "no text here"}])
    write(path, body)
    summary = _summary(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert summary["records"] == 3
    assert [(b["where"].rsplit("/", 1)[-1], b["reason"]) for b in summary["bad_records"]] == [
        ("posts.jsonl:3", "invalid JSON (Expecting property name enclosed in double quotes)"),
        ("posts.jsonl:5", NO_TEXT),
    ]
    assert _cluster_keys(cli) == [{"posts.jsonl#p1", "posts.jsonl#p2"}]
    hits = json.loads(cli("query", CHINESE, "--format", "json").stdout)
    assert hits[0]["key"].endswith("posts.jsonl#p1") and hits[0]["record"] == "p1"


def test_a_corpus_named_by_itself_is_read_as_records(cli, tmp_path, db_path):
    """'dedupdb add corpus.jsonl', with no record option, stores its records, not the file as one text: JSON Lines
    named by itself (compressed or not) and a compressed CSV (which would be passed over) are corpora. In a folder,
    and for a plain .csv named by itself, a file stays one document as before."""
    import gzip

    rows = [{"id": "p1", "text": CHINESE}, {"id": "p2", "text": CHINESE_EDITED}, {"id": "p3", "text": ENGLISH}]
    write(tmp_path / "posts.jsonl", _jsonl(rows))
    (tmp_path / "posts.ndjson.gz").write_bytes(gzip.compress(_jsonl(rows).encode()))
    (tmp_path / "table.csv.gz").write_bytes(gzip.compress(f'id,text\nc1,"{ENGLISH_EDITED}"\n'.encode()))
    (tmp_path / "other.csv.gz").write_bytes(gzip.compress(b"id,body\n1,one two three\n"))
    write(tmp_path / "plain.csv", f'id,text\nx,"{ENGLISH_OTHER}"\n')
    folder = tmp_path / "notes"
    write(folder / "kept-whole.jsonl", _jsonl(rows[:1]))
    names = ["posts.jsonl", "posts.ndjson.gz", "table.csv.gz", "other.csv.gz", "plain.csv"]
    result = cli("add", *[str(tmp_path / n) for n in names], str(folder), "--format", "json")
    assert result.exit_code == 23, result.output
    summary = json.loads(result.stdout)
    assert summary["records"] == 7 and summary["bad_record_count"] == 0
    assert [(f["path"].rsplit("/", 1)[-1], f["reason"]) for f in summary["failed_paths"]] == [
        ("other.csv.gz", "no column 'text' in the header (id, body): --text-field names the column holding the text")]
    with sqlite3.connect(db_path) as conn:
        keys = sorted(k.rsplit("/", 1)[-1] for (k,) in conn.execute("SELECT key FROM documents"))
    assert keys == ["kept-whole.jsonl", "plain.csv", "posts.jsonl#1", "posts.jsonl#2", "posts.jsonl#3",
                    "posts.ndjson.gz#1", "posts.ndjson.gz#2", "posts.ndjson.gz#3", "table.csv.gz#2"]
    # The library reads a corpus named by itself the same way.
    with dedupdb.open(tmp_path / "library.db") as db:
        added = db.add([tmp_path / "posts.jsonl"])
        assert added.records == 3


def test_a_record_escaping_half_a_surrogate_pair_is_a_bad_record(cli, tmp_path):
    path = tmp_path / "posts.jsonl"
    # json.dumps writes a lone surrogate as the escape "\ud800", which decodes to a str no encoding can hold.
    rows = [{"text": ENGLISH}, {"text": "abc \ud800 def"}, {"id": "\udfff", "text": ENGLISH_OTHER}]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    summary = _summary(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert summary["records"] == 0 and summary["bad_record_count"] == 3  # no id, no id, a lone surrogate id
    summary = _summary(cli("add", str(path), "--records", "jsonl", "--format", "json", "--text-field", "text"))
    assert summary["records"] == 2
    assert [(b["where"].rsplit(":", 1)[-1], b["reason"]) for b in summary["bad_records"]] == [
        ("2", "not valid Unicode (an unpaired surrogate escape)")]


def test_json_the_parser_refuses_and_a_nul_byte_are_each_a_bad_record(cli, tmp_path):
    """Not only malformed JSON: an integer of more digits than Python converts, nesting deeper than its recursion,
    and a NUL byte (here in the file's first lines, which its encoding is judged from) are each that record's fault;
    the records after them are added."""
    path = tmp_path / "posts.jsonl"
    body = ('{"text": ' + "9" * 5000 + '}\n{"text": "' + ENGLISH + '"}\n{"text": ' + "[" * 100_000 + "]" * 100_000
            + '}\n{"text": "a NUL \x00 here"}\n{"text": "' + CHINESE + '"}\n')
    path.write_text(body, encoding="utf-8")
    summary = _summary(cli("add", str(path), "--text-field", "text", "--format", "json"))
    assert summary["records"] == 2
    assert [(b["where"].rsplit(":", 1)[-1], b["reason"]) for b in summary["bad_records"]] == [
        ("1", "invalid JSON (a number of more than 4,300 digits)"), ("3", "invalid JSON (nested too deeply)"),
        ("4", "invalid JSON (Invalid control character at)")]
    binary = tmp_path / "noise.jsonl"
    binary.write_bytes(bytes(range(256)) * 40)
    wide = tmp_path / "wide.txt"  # UTF-32 without a mark: NULs by the thousand are no stray ones
    wide.write_bytes("hello world line\n".encode("utf-32-le") * 50)
    for path, options in ((binary, ["--text-field", "text"]), (wide, ["--lines"])):
        result = cli("add", str(path), *options, "--format", "json")
        assert result.exit_code == 23
        assert json.loads(result.stdout)["failed_paths"] == [{"path": str(path), "reason": "binary file"}]


def test_a_record_of_empty_text_or_id_is_a_bad_record_said_so(cli, tmp_path):
    """A text that is empty, blank or only invisible characters has nothing to store: a bad record with its line (it
    was dropped unsaid), as a query of it is refused; an empty id is said to be empty, not missing."""
    path = tmp_path / "posts.jsonl"
    rows = [{"id": "a", "text": ""}, {"id": "b", "text": "   "}, {"id": "c", "text": "\u200b\u200d"},
            {"id": "", "text": ENGLISH}, {"id": "e", "text": ENGLISH}]
    path.write_text(_jsonl(rows), encoding="utf-8")
    summary = _summary(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert summary["records"] == 1
    assert [(b["where"].rsplit(":", 1)[-1], b["reason"]) for b in summary["bad_records"]] == [
        ("1", "empty text"), ("2", "empty text"), ("3", "empty text"), ("4", "empty field 'id'")]


def test_csv_with_sniffed_delimiter_and_text_field(cli, tmp_path):
    path = tmp_path / "table.csv"
    rows = ["id;body;lang", f'a;"{ENGLISH}";en', f'b;"{ENGLISH_EDITED}";en', f"c;{ENGLISH_OTHER.replace(',', '')};en",
            "d;too;many;fields"]
    write(path, "\n".join(rows) + "\n")
    summary = _summary(cli("add", str(path), "--text-field", "body", "--id-field", "id", "--format", "json"))
    assert summary["records"] == 3
    assert [b["reason"] for b in summary["bad_records"]] == ["4 fields where the header has 3"]
    assert _cluster_keys(cli) == [{"table.csv#a", "table.csv#b"}]


def test_missing_csv_column_fails_that_file_only(cli, tmp_path):
    write(tmp_path / "t.csv", "id,body\n1,hello there\n")
    write(tmp_path / "ok.txt", ENGLISH)
    result = cli("add", str(tmp_path), "--text-field", "text", "--format", "json")
    assert result.exit_code == 23, result.output  # a file that could not be read as records
    summary = json.loads(result.stdout)
    assert summary["failed"] == 1 and "no column 'text'" in summary["failed_paths"][0]["reason"]
    assert summary["added"] == 1


def test_lines_keyed_by_line_number(cli, tmp_path):
    path = write(tmp_path / "titles.txt", f"{CHINESE}\n\n{CHINESE_OTHER}\n{CHINESE}\n")
    summary = _summary(cli("add", str(path), "--lines", "--format", "json"))
    assert summary["records"] == 3
    clusters = json.loads(cli("report", "--format", "json").stdout)
    assert clusters[0]["kind"] == "exact"
    assert {m["key"].rsplit("/", 1)[-1] for m in clusters[0]["members"]} == {"titles.txt#1", "titles.txt#4"}


def test_stdin_needs_a_format_and_replaces_itself(cli):
    result = cli("add", "-")
    assert result.exit_code == 1 and "--records" in result.output
    data = _jsonl([{"id": 1, "text": ENGLISH}, {"id": 2, "text": ENGLISH_EDITED}])
    summary = _summary(cli("add", "-", "--records", "jsonl", "--id-field", "id", "--format", "json", input=data))
    assert summary["records"] == 2
    assert _cluster_keys(cli) == [{"stdin#1", "stdin#2"}]
    summary = _summary(cli("add", "-", "--records", "lines", "--format", "json", input=f"{ENGLISH_OTHER}\n"))
    assert summary["updated"] == 1
    assert _cluster_keys(cli) == []
    # A second corpus piped in takes the first's place: said, as a warning the summary line counts.
    assert summary["warnings"] == [{"path": "<stdin>", "message": "replaced the 2 records an earlier add of standard "
                                    "input stored: it is one source (save each corpus to a file to keep both)"}]
    result = cli("add", "-", "--records", "lines", input=f"{ENGLISH}\n")
    assert "warnings 1" in result.output


def test_grown_file_indexes_only_new_records(cli, tmp_path, db_path):
    path = tmp_path / "stream.jsonl"
    write(path, _jsonl([{"id": i, "text": f"{ENGLISH_OTHER} number {i}"} for i in range(3)]))
    assert _summary(cli("add", str(path), "--id-field", "id", "--format", "json"))["records"] == 3
    with open(path, "a", encoding="utf-8") as f:
        f.write(_jsonl([{"id": 3, "text": CHINESE}, {"id": 4, "text": CHINESE_EDITED}]))
    summary = _summary(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert summary["records"] == 2 and summary["updated"] == 1
    again = _summary(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert again["unchanged"] == 1 and again["records"] == 0
    with dedupdb.open(db_path) as db:
        assert db.store.counts()["documents"] == 5


def test_changed_file_is_reindexed_whole(cli, tmp_path, db_path):
    path = tmp_path / "s.jsonl"
    write(path, _jsonl([{"id": 1, "text": ENGLISH}, {"id": 2, "text": ENGLISH_OTHER}]))
    cli("add", str(path), "--id-field", "id")
    write(path, _jsonl([{"id": 1, "text": CHINESE}]))
    summary = _summary(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert summary["records"] == 1 and summary["updated"] == 1
    with dedupdb.open(db_path) as db:
        assert [h.key.rsplit("/", 1)[-1] for h in db.query(CHINESE)] == ["s.jsonl#1"]
        assert db.store.counts()["documents"] == 1


def test_duplicate_ids_are_reported(cli, tmp_path):
    path = write(tmp_path / "d.jsonl", _jsonl([{"id": 1, "text": ENGLISH}, {"id": 1, "text": ENGLISH_OTHER}]))
    summary = _summary(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert summary["records"] == 1 and summary["bad_records"][0]["reason"] == "duplicate id '1'"


@pytest.mark.parametrize(("commit_seconds", "kept"), [(0, 10), (3600, 0)])
def test_interrupted_record_file_resumes(tmp_path, db_path, monkeypatch, commit_seconds, kept):
    """Committed batches stay (with a commit per batch: the first); uncommitted ones go, and a rerun reads
    exactly the records that are not stored."""
    path = write(tmp_path / "big.txt", "".join(f"{ENGLISH_OTHER} line {i}\n" for i in range(25)))
    resume = interrupt_batch(monkeypatch, at=2, commit_seconds=commit_seconds)
    options = RecordOptions("lines")
    with dedupdb.open(db_path) as db:
        with pytest.raises(KeyboardInterrupt):
            db.add([path], records=options)
        assert db.store.counts()["documents"] == kept
        resume()
        summary = db.add([path], records=options)
        assert summary.records == 25 - kept
        keys = {r[0] for r in db.store.conn.execute("SELECT key FROM documents")}
        assert keys == {f"{path}#{i}" for i in range(1, 26)}


def test_overlong_line_is_a_bad_record_not_a_memory_spike(cli, tmp_path, monkeypatch):
    import dedupdb.ingest.records as records

    monkeypatch.setattr(records, "MAX_RECORD_BYTES", 1000)
    path = write(tmp_path / "big.txt", f"{ENGLISH}\n{'x' * 5000}\n{ENGLISH_OTHER}\n")
    summary = _summary(cli("add", str(path), "--lines", "--format", "json"))
    assert summary["records"] == 2 and summary["bad_record_count"] == 1
    assert summary["bad_records"][0]["where"].endswith("big.txt:2")


# --- progress by bytes -----------------------------------------------------------------------------------------


def test_progress_counts_bytes_and_moves_within_one_record_file(tmp_path, monkeypatch):
    """A single JSONL corpus moves the bar batch by batch (not 0/? until its end), and folders count bytes of
    every file found, so the ETA follows the work."""
    monkeypatch.setattr(pipeline, "INGEST_BATCH", 10)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": f"record number {i} says {'word ' * (i % 7)}"}) + "\n"
                              for i in range(95)))
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "a.txt").write_text("a note about something " * 20)
    (tmp_path / "notes" / "b.txt").write_text("another note " * 3)
    calls: list[tuple[int, int]] = []
    with dedupdb.open(tmp_path / "p.db") as db:
        db.add([corpus], records=RecordOptions("jsonl", id_field="id"), progress=lambda d, t: calls.append((d, t)), workers=0)
    size = corpus.stat().st_size
    assert {t for _, t in calls} == {size}
    assert len({d for d, _ in calls}) >= 9 and calls[-1] == (size, size)
    assert [d for d, _ in calls] == sorted(d for d, _ in calls)
    calls.clear()
    with dedupdb.open(tmp_path / "q.db") as db:
        db.add([tmp_path / "notes"], progress=lambda d, t: calls.append((d, t)), workers=0)
    total = sum(p.stat().st_size for p in (tmp_path / "notes").iterdir())
    assert calls[-1] == (total, total) and len(calls) == 2


def test_progress_bar_shows_sizes_on_a_terminal(tmp_path, monkeypatch):
    from dedupdb.cli import render

    drawn: list[tuple] = []

    class Recorder:
        def __init__(self, *columns, **kwargs):
            drawn.append(tuple(type(c).__name__ for c in columns))

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def add_task(self, *args, **kwargs):
            return 1

        def update(self, *args, **kwargs):
            drawn.append(kwargs)

    monkeypatch.setattr(render, "Progress", Recorder)
    monkeypatch.setattr(type(render.err_console), "is_terminal", property(lambda self: True))
    with render.progress_bar("Indexing", in_bytes=True) as update:
        update(512, 2048)
    assert "DownloadColumn" in drawn[0] and "TransferSpeedColumn" in drawn[0] and "TimeRemainingColumn" in drawn[0]
    assert drawn[1] == {"completed": 512, "total": 2048}
