"""Record files compressed as corpora ship (.gz, .bz2, .xz, .zst): read streamed, resumed, re-read when changed,
exported back; a damaged one fails alone, and a compressed plain document is skipped with its reason."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import os

import pytest
import zstandard

import dedupdb
from dedupdb.ingest.records import RecordOptions, open_record_file

from .conftest import CHINESE, CHINESE_EDITED, CHINESE_OTHER, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, interrupt_batch

COMPRESSORS = {
    ".gz": gzip.compress,
    ".bz2": bz2.compress,
    ".xz": lzma.compress,
    ".zst": lambda data: zstandard.ZstdCompressor().compress(data),
}


def _summary(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _jsonl(rows) -> str:
    return "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows)


def _compressed(path, text: str):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(COMPRESSORS["." + path.name.rsplit(".", 1)[1]](text.encode("utf-8")))
    return path


def _keys(db_path) -> set[str]:
    with dedupdb.open(db_path) as db:
        return {r[0].rsplit("/", 1)[-1] for r in db.store.conn.execute("SELECT key FROM documents")}


ROWS = [{"id": "a", "text": ENGLISH}, {"id": "b", "text": ENGLISH_EDITED}, {"id": "c", "text": CHINESE_OTHER}]
CSV = 'id,text\na,"' + ENGLISH + '"\nb,"' + ENGLISH_EDITED + '"\nc,"' + CHINESE_OTHER + '"\n'
REASON = "compressed: read only as records (--records auto reads JSONL and CSV by their suffix; --lines, one a line)"
LINES = f"{ENGLISH}\n{ENGLISH_EDITED}\n{CHINESE_OTHER}\n"


@pytest.mark.parametrize("suffix", list(COMPRESSORS))
@pytest.mark.parametrize(("kind", "body", "args", "expected"), [
    ("jsonl", _jsonl(ROWS), ("--id-field", "id"), {"#a", "#b", "#c"}),
    ("csv", CSV, ("--id-field", "id"), {"#a", "#b", "#c"}),
    ("txt", LINES, ("--lines",), {"#1", "#2", "#3"}),
])
def test_each_compression_reads_each_format(cli, tmp_path, db_path, suffix, kind, body, args, expected):
    path = _compressed(tmp_path / f"corpus.{kind}{suffix}", body)
    summary = _summary(cli("add", str(path), *args, "--format", "json"))
    assert summary["added"] == 1 and summary["records"] == 3 and summary["failed"] == 0, summary
    assert _keys(db_path) == {f"corpus.{kind}{suffix}{k}" for k in expected}
    clusters = json.loads(cli("report", "--format", "json").stdout)
    assert [sorted(m["key"].rsplit("#", 1)[1] for m in c["members"]) for c in clusters] == [
        sorted(k[1:] for k in expected)[:2]
    ]
    again = _summary(cli("add", str(path), *args, "--format", "json"))
    assert again["unchanged"] == 1 and again["records"] == 0 and again["updated"] == 0
    # a plain 'add' of the folder keeps reading it as records, and finds it unchanged
    folder = _summary(cli("add", str(tmp_path), "--format", "json"))
    assert folder["unchanged"] == 1 and folder["records"] == 0


def test_folder_walk_finds_compressed_record_files_by_inner_suffix(cli, tmp_path, db_path):
    root = tmp_path / "corpus"
    _compressed(root / "a.jsonl.gz", _jsonl([{"id": 1, "text": ENGLISH}]))
    _compressed(root / "b.jsonl.xz", _jsonl([{"id": 1, "text": ENGLISH_EDITED}]))
    _compressed(root / "notes.txt.gz", ENGLISH_OTHER)
    _compressed(root / "photo.jpg.gz", "not text")
    summary = _summary(cli("add", str(root), "--text-field", "text", "--id-field", "id", "--format", "json"))
    assert summary["added"] == 2 and summary["records"] == 2 and summary["failed"] == 0, summary
    skipped = {os.path.basename(s["path"]): s["reason"] for s in summary["skipped_paths"]}
    assert skipped == {"photo.jpg.gz": "not a text file type", "notes.txt.gz": REASON}
    assert _keys(db_path) == {"a.jsonl.gz#1", "b.jsonl.xz#1"}
    # without record options, a compressed plain document is skipped with its reason, not as a binary file
    other = tmp_path / "other"
    _compressed(other / "notes.txt.gz", ENGLISH_OTHER)
    plain = _summary(cli("add", str(other), "--format", "json"))
    assert plain["skipped_paths"] == [{
        "path": str(other / "notes.txt.gz"),
        "reason": REASON,
    }]


def test_changed_compressed_file_is_read_again_whole(cli, tmp_path, db_path):
    path = _compressed(tmp_path / "s.jsonl.gz", _jsonl([{"id": 1, "text": ENGLISH}, {"id": 2, "text": ENGLISH_OTHER}]))
    assert _summary(cli("add", str(path), "--id-field", "id", "--format", "json"))["records"] == 2
    # the same records and then one more: a compressed file is not appended to, but read again whole
    rows = [{"id": 1, "text": ENGLISH}, {"id": 2, "text": ENGLISH_OTHER}, {"id": 3, "text": CHINESE}]
    _compressed(path, _jsonl(rows))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    summary = _summary(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert summary["updated"] == 1 and summary["records"] == 3
    assert _keys(db_path) == {"s.jsonl.gz#1", "s.jsonl.gz#2", "s.jsonl.gz#3"}
    # replaced by other records: the old ones go
    _compressed(path, _jsonl([{"id": 9, "text": CHINESE_EDITED}]))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 2 * 10**9))
    summary = _summary(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert summary["updated"] == 1 and summary["records"] == 1
    assert _keys(db_path) == {"s.jsonl.gz#9"}
    with dedupdb.open(db_path) as db:
        assert db.store.counts()["documents"] == 1
        assert [h.key.rsplit("/", 1)[-1] for h in db.query(CHINESE_EDITED)] == ["s.jsonl.gz#9"]


def test_same_size_changed_time_is_read_again(cli, tmp_path, db_path):
    path = _compressed(tmp_path / "t.txt.bz2", f"{ENGLISH}\n")
    _summary(cli("add", str(path), "--lines", "--format", "json"))
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    summary = _summary(cli("add", str(path), "--lines", "--format", "json"))
    assert summary["updated"] == 1 and summary["records"] == 1
    assert _keys(db_path) == {"t.txt.bz2#1"}


def test_export_unique_of_a_compressed_corpus(cli, tmp_path):
    root = tmp_path / "corpus"
    _compressed(root / "part-1.jsonl.gz", _jsonl([{"id": "a", "text": ENGLISH}, {"id": "b", "text": CHINESE}]))
    _compressed(root / "part-2.jsonl.zst", _jsonl([{"id": "c", "text": ENGLISH_EDITED}, {"id": "d", "text": CHINESE_OTHER}]))
    _summary(cli("add", str(root), "--id-field", "id", "--format", "json"))
    result = cli("export", "--unique")
    assert result.exit_code == 0, result.output
    out = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["id"] for r in out] == ["a", "b", "d"]
    assert out[0] == {"id": "a", "text": ENGLISH}
    full = cli("export")
    assert [json.loads(line)["id"] for line in full.stdout.splitlines()] == ["a", "b", "c", "d"]


def test_export_leaves_out_a_compressed_file_changed_since(cli, tmp_path):
    path = _compressed(tmp_path / "x.jsonl.gz", _jsonl([{"id": "a", "text": ENGLISH}]))
    _summary(cli("add", str(path), "--id-field", "id", "--format", "json"))
    _compressed(path, _jsonl([{"id": "a", "text": ENGLISH}, {"id": "b", "text": CHINESE}]))
    result = cli("export")
    assert result.stdout.strip() == ""
    assert "changed since it was indexed" in result.output


def test_corrupt_gz_fails_alone_with_a_one_line_reason(cli, tmp_path, db_path):
    root = tmp_path / "corpus"
    _compressed(root / "good.jsonl.gz", _jsonl([{"id": 1, "text": ENGLISH}]))
    _compressed(root / "good.csv.xz", CSV)
    whole = gzip.compress(_jsonl([{"id": i, "text": f"{ENGLISH_OTHER} {i}"} for i in range(200)]).encode())
    (root / "truncated.jsonl.gz").write_bytes(whole[: len(whole) // 2])
    (root / "garbage.jsonl.gz").write_bytes(b"this is not gzip data at all\n")
    (root / "garbage.jsonl.bz2").write_bytes(b"BZh9 nope nope nope")
    result = cli("add", str(root), "--id-field", "id", "--format", "json")
    assert result.exit_code == 23, result.output  # some files could not be read; the others were added
    summary = json.loads(result.stdout)
    assert summary["added"] == 2 and summary["records"] == 4, summary
    failed = {os.path.basename(f["path"]): f["reason"] for f in summary["failed_paths"]}
    assert set(failed) == {"truncated.jsonl.gz", "garbage.jsonl.gz", "garbage.jsonl.bz2"}
    assert failed["truncated.jsonl.gz"].startswith("corrupt gzip data (")
    assert failed["garbage.jsonl.gz"].startswith("corrupt gzip data (Not a gzipped file")
    assert failed["garbage.jsonl.bz2"].startswith("corrupt bzip2 data (")
    assert all("\n" not in reason for reason in failed.values())
    # the same through the text output: one line each
    text = cli("add", str(root), "--id-field", "id").output
    for name in failed:
        assert sum(name in line for line in text.splitlines()) == 1 and "corrupt" in text, text
    assert {k for k in _keys(db_path) if k.startswith("good")} == {
        "good.jsonl.gz#1", "good.csv.xz#a", "good.csv.xz#b", "good.csv.xz#c"
    }


def test_interrupted_compressed_file_resumes_past_what_it_read(tmp_path, db_path, monkeypatch):
    """An interrupted read of a compressed file goes on past the decompressed bytes it got through (they hash
    as before); no record is read twice or lost."""
    path = _compressed(tmp_path / "big.txt.gz", "".join(f"{ENGLISH_OTHER} line {i}\n" for i in range(25)))
    resume = interrupt_batch(monkeypatch, at=2)
    options = RecordOptions("lines")
    with dedupdb.open(db_path) as db:
        with pytest.raises(KeyboardInterrupt):
            db.add([path], records=options)
        assert db.store.counts()["documents"] == 10
        resume()
        summary = db.add([path], records=options)
        assert summary.records == 15 and summary.bytes_read < sum(
            len(f"{ENGLISH_OTHER} line {i}\n") for i in range(25)
        )
        keys = {r[0] for r in db.store.conn.execute("SELECT key FROM documents")}
        assert keys == {f"{path}#{i}" for i in range(1, 26)}
        assert db.add([path], records=options).unchanged == 1


def test_interrupted_compressed_file_changed_since_starts_over(tmp_path, db_path, monkeypatch):
    path = _compressed(tmp_path / "big.txt.xz", "".join(f"{ENGLISH_OTHER} line {i}\n" for i in range(25)))
    resume = interrupt_batch(monkeypatch, at=2)
    options = RecordOptions("lines")
    with dedupdb.open(db_path) as db:
        with pytest.raises(KeyboardInterrupt):
            db.add([path], records=options)
        resume()
        _compressed(path, "".join(f"{CHINESE} {i}\n" for i in range(3)))
        summary = db.add([path], records=options)
        assert summary.records == 3
        assert db.store.counts()["documents"] == 3


def test_decompressed_stream_seeks_back_and_forth(tmp_path):
    data = "".join(f"line {i}\n" for i in range(5000)).encode()
    for suffix, compress in COMPRESSORS.items():
        path = tmp_path / f"f.txt{suffix}"
        path.write_bytes(compress(data))
        with open_record_file(path) as stream:
            assert stream.read(10) == data[:10]
            stream.seek(20000)
            assert stream.readline() == data[20000 : data.index(b"\n", 20000) + 1]
            stream.seek(5)
            assert stream.read(7) == data[5:12]
            stream.seek(0)
            assert stream.read() == data
