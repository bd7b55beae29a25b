"""The scale-out job (`dedupdb ray`) on awkward inputs: it keeps its promises (the pairs of `add` + `pairs`, one
line for bad input, one bad record or one unreadable shard never stopping a job)."""

from __future__ import annotations

import json
import os
import random
from pathlib import Path

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from dedupdb import Database  # noqa: E402
from dedupdb.cli.commands import app  # noqa: E402
from dedupdb.config import Settings  # noqa: E402
from dedupdb.ingest.records import RecordOptions  # noqa: E402

WORDS = [f"w{i}" for i in range(500)]


def _texts(count: int, seed: int = 1) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(60)) for _ in range(count)]


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)


def _table(folder: Path) -> list[dict]:
    import pyarrow.dataset as ds

    return ds.dataset(folder, format="parquet").to_table().to_pylist() if any(folder.iterdir()) else []


@pytest.fixture(scope="module")
def ray_runtime():
    pytest.importorskip("ray")
    from dedupdb.scaleout.job import start_ray

    start_ray(None, 2)


def _run(inputs: list[Path], out: Path, options: RecordOptions = RecordOptions(), **kwargs):
    from dedupdb.database import candidate_scheme
    from dedupdb.scaleout import job

    settings = Settings()
    return job.run([str(p) for p in inputs], out, settings, candidate_scheme(settings), options, **kwargs)


def _no_traceback(result) -> None:
    """No uncaught exception, and nothing of a traceback (ours or Ray's) in what the user sees."""
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.output
    assert 'File "' not in result.output
    assert "ray::" not in result.output and "Full stack trace" not in result.output


# --- a file the engine refuses, inside a Ray task ------------------------------------------------------------------

@pytest.mark.parametrize("name, content, says", [
    ("posts.csv", "id,body\n1,one two three four\n", "no column 'text'"),
    ("posts.parquet", b"PAR1 this is not parquet", "not a readable Parquet file"),
    ("posts.jsonl", '{"text": "one two three four"}\n'.encode("utf-16"), "UTF-16"),
], ids=["csv-without-text-column", "malformed-parquet", "utf16-jsonl"])
def test_a_file_the_reader_refuses_is_one_line_not_a_ray_traceback(ray_runtime, runner, tmp_path, name, content, says):
    source = tmp_path / name
    source.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    good = tmp_path / "good.jsonl"
    good.write_text(_jsonl([{"text": t} for t in _texts(3)]), encoding="utf-8")
    out = tmp_path / "out"
    result = runner.invoke(app, ["ray", str(good), str(source), "--out", str(out)])
    assert result.exit_code == 23  # as add: the shard that could not be read is listed, the others are done
    _no_traceback(result)
    assert any(says in line and line.startswith(f"failed {source}") for line in result.output.splitlines())
    import pyarrow.dataset as ds

    keys = ds.dataset(out / "documents", format="parquet").to_table().column("key").to_pylist()
    assert sorted(keys) == [f"{good}#{i}" for i in (1, 2, 3)]


# --- the output folder ---------------------------------------------------------------------------------------------

def test_an_output_folder_under_a_file_is_one_line(runner, tmp_path):
    source = tmp_path / "posts.jsonl"
    source.write_text(_jsonl([{"text": t} for t in _texts(2)]), encoding="utf-8")
    (tmp_path / "taken").write_text("a file", encoding="utf-8")
    result = runner.invoke(app, ["ray", str(source), "--out", str(tmp_path / "taken" / "out")])
    assert result.exit_code == 1
    _no_traceback(result)
    assert result.output.startswith("Error:") and len(result.output.strip().splitlines()) == 1


# --- one bad record never stops a job ------------------------------------------------------------------------------

def test_a_record_holding_a_lone_surrogate_is_a_bad_record_not_the_end_of_the_job(ray_runtime, tmp_path):
    texts = _texts(3)
    source = tmp_path / "posts.jsonl"
    # Valid JSON: "\ud800" decodes to a lone surrogate, which cannot be encoded as UTF-8.
    source.write_text(
        _jsonl([{"text": texts[0]}, {"text": texts[0]}]) + '{"text": "abc \\ud800 ' + texts[1] + '"}\n'
        + _jsonl([{"text": texts[2]}]),
        encoding="utf-8",
    )
    manifest = _run([source], tmp_path / "out")
    assert manifest.counts["records"] == 3 and manifest.counts["bad_records"] == 1
    assert manifest.counts["document_pairs"] == 1


# --- a folder is read as add reads it ------------------------------------------------------------------------------

def _folder_with_link_and_hidden_folder(root: Path) -> Path:
    texts = _texts(3)
    corpus = root / "corpus"
    (corpus / ".cache").mkdir(parents=True)
    (corpus / "a.jsonl").write_text(_jsonl([{"text": t} for t in texts[:2]]), encoding="utf-8")
    (corpus / ".cache" / "old.jsonl").write_text(_jsonl([{"text": texts[0]}]), encoding="utf-8")  # add skips
    os.symlink(corpus / "a.jsonl", corpus / "link.jsonl")  # add skips a link met in a folder
    return corpus


def test_a_folder_gives_the_pairs_add_gives(ray_runtime, tmp_path):
    corpus = _folder_with_link_and_hidden_folder(tmp_path)
    with Database.open(tmp_path / "local.db") as db:
        db.add([corpus], records=RecordOptions(), workers=0)
        local = {(p.a, p.b) for p in db.pairs()}
    _run([corpus], tmp_path / "out")
    assert {(p["a"], p["b"]) for p in _table(tmp_path / "out" / "pairs")} == local


def test_keep_first_in_a_folder_keeps_what_export_unique_keeps(ray_runtime, tmp_path):
    texts = _texts(2)
    corpus = tmp_path / "corpus"
    (corpus / "sub").mkdir(parents=True)
    # add walks a folder's own files before its subfolders: x.jsonl#1 is the first copy to it.
    (corpus / "x.jsonl").write_text(_jsonl([{"text": texts[0]}, {"text": texts[1]}]), encoding="utf-8")
    (corpus / "sub" / "y.jsonl").write_text(_jsonl([{"text": texts[0]}]), encoding="utf-8")
    with Database.open(tmp_path / "local.db") as db:
        db.add([corpus], records=RecordOptions(), workers=0)
        everything = {r.key for r in db.export()}
        kept_locally = {r.key for r in db.export(unique=True, keep="first")}
    _run([corpus], tmp_path / "out", keep="first")
    dropped = {r["key"] for r in _table(tmp_path / "out" / "clusters") if not r["keep"]}
    assert everything - dropped == kept_locally


def test_a_dangling_link_in_a_folder_is_no_traceback(ray_runtime, runner, tmp_path):
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "a.jsonl").write_text(_jsonl([{"text": t} for t in _texts(2)]), encoding="utf-8")
    os.symlink(tmp_path / "gone.jsonl", corpus / "z.jsonl")
    result = runner.invoke(app, ["ray", str(corpus), "--out", str(tmp_path / "out")])
    _no_traceback(result)


# --- limits --------------------------------------------------------------------------------------------------------

def test_max_record_size_applies_to_parquet_records(ray_runtime, tmp_path):
    texts = _texts(2)
    path = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"text": [texts[0], texts[0], " ".join([texts[1]] * 20)]}), path)
    manifest = _run([path], tmp_path / "out", RecordOptions(max_record_bytes=1024))
    assert manifest.counts["bad_records"] == 1 and manifest.counts["records"] == 2
    assert "record limit" in manifest.bad_records[0]["reason"]
