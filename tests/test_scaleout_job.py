"""The scale-out job: its stages against the engine's own answers, and a whole job on a local Ray runtime against
`dedupdb add` + `dedupdb pairs` / `export --unique` on the same input."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from dedupdb import Database  # noqa: E402
from dedupdb.cli.commands import app  # noqa: E402
from dedupdb.config import Settings  # noqa: E402
from dedupdb.ingest.records import RecordOptions  # noqa: E402
from dedupdb.scaleout import stages  # noqa: E402
from dedupdb.scaleout.inputs import shards  # noqa: E402
from dedupdb.scaleout.layout import Manifest, content_number  # noqa: E402
from dedupdb.ingest.pipeline import sketch_records  # noqa: E402
from dedupdb.text.weights import DF_BUCKETS, CorpusIdf  # noqa: E402

WORDS = [f"w{i}" for i in range(3000)] + ["the", "a", "of", "and", "to", "in"]
CJK = "的一是不了人我在有他这中大来上国个到说们为子和你地出道也时年得就那要下以生会自着去之过家学对可她里后小么心多天而能好都然没日于起还发成事只作当想看文无开手十用主行方又如前所本见经头面公同三已老从动两长知民样现分将外但身些与高意进把法此实回二理美点月明"


def _text(rng: random.Random, words: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(words))


def _edited(rng: random.Random, text: str, edits: int) -> str:
    tokens = text.split()
    for _ in range(edits):
        at = rng.randrange(len(tokens))
        if rng.random() < 0.5:
            del tokens[at]
        else:
            tokens.insert(at, rng.choice(WORDS))
    return " ".join(tokens)


def _corpus(seed: int = 7) -> list[tuple[str, str]]:
    """(id, text): unrelated texts, exact copies, light and heavy edits, CJK texts and their edits, short texts."""
    rng = random.Random(seed)
    base = [_text(rng, rng.randint(40, 160)) for _ in range(1200)]
    cjk = ["".join(rng.choice(CJK) for _ in range(rng.randint(30, 120))) for _ in range(200)]
    items = [(f"t{i}", t) for i, t in enumerate(base)]
    items += [(f"c{i}", t) for i, t in enumerate(cjk)]
    items += [(f"copy{i}", rng.choice(base)) for i in range(200)]
    items += [(f"edit{i}", _edited(rng, rng.choice(base), rng.randint(1, 12))) for i in range(600)]
    items += [(f"cjkedit{i}", (lambda s: s[: len(s) // 2] + rng.choice(CJK) + s[len(s) // 2 :])(rng.choice(cjk)))
              for i in range(100)]
    items += [(f"short{i}", rng.choice(["a of", "the the", "w1 w2 w3"])) for i in range(10)]
    rng.shuffle(items)
    return items


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> list[Path]:
    """The corpus in three shards: JSONL (with a bad line and a repeated id), gzipped JSONL, and CSV."""
    import gzip

    folder = tmp_path_factory.mktemp("corpus")
    items = _corpus()
    third = len(items) // 3
    first = folder / "a.jsonl"
    with open(first, "w", encoding="utf-8") as out:
        for rid, text in items[:third]:
            out.write(json.dumps({"id": rid, "text": text}, ensure_ascii=False) + "\n")
        out.write("{not json\n")
        out.write(json.dumps({"id": items[0][0], "text": "a repeated id is a bad record"}) + "\n")
    second = folder / "b.jsonl.gz"
    with gzip.open(second, "wt", encoding="utf-8") as out:
        for rid, text in items[third : 2 * third]:
            out.write(json.dumps({"id": rid, "text": text}, ensure_ascii=False) + "\n")
    third_path = folder / "c.csv"
    with open(third_path, "w", encoding="utf-8", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["id", "text"])
        for rid, text in items[2 * third :]:
            writer.writerow([rid, text])
    return [first, second, third_path]


@pytest.fixture(scope="module")
def local_store(inputs, tmp_path_factory) -> Database:
    path = tmp_path_factory.mktemp("local") / "local.db"
    db = Database.open(path)
    db.add(inputs, records=RecordOptions(id_field="id"), workers=0)
    yield db
    db.close()


@pytest.fixture(scope="module")
def ray_runtime():
    pytest.importorskip("ray")
    from dedupdb.scaleout.job import start_ray

    start_ray(None, 2)


@pytest.fixture(scope="module")
def job_out(ray_runtime, inputs, tmp_path_factory) -> Path:
    from dedupdb.database import candidate_scheme
    from dedupdb.scaleout import job

    out = tmp_path_factory.mktemp("job") / "out"
    settings = Settings()
    seen = []
    job.run([str(p) for p in inputs], out, settings, candidate_scheme(settings), RecordOptions(id_field="id"), unique=True,
            progress=lambda stage, seconds, rows: seen.append(stage))
    assert seen[:3] == ["read", "sketch", "texts"] and "verify" in seen
    return out


def _table(folder: Path) -> list[dict]:
    import pyarrow.dataset as ds

    return ds.dataset(folder, format="parquet").to_table().to_pylist() if any(folder.iterdir()) else []


# --- the whole job against the local engine -----------------------------------------------------------------------

def test_the_jobs_pairs_are_the_pairs_of_add_and_pairs(job_out, local_store):
    local = {(p.a, p.b): p for p in local_store.pairs()}
    job = {(p["a"], p["b"]): p for p in _table(job_out / "pairs")}
    assert len(local) > 200 and any(p.exact for p in local.values()) and any(not p.exact for p in local.values())
    assert set(job) == set(local)
    for pair, found in job.items():
        assert found["jaccard"] == pytest.approx(local[pair].jaccard, abs=1e-9)
        assert found["exact"] == local[pair].exact


def test_the_jobs_documents_and_texts_are_the_stores(job_out, local_store, inputs):
    store = local_store.store
    documents = _table(job_out / "documents")
    by_content = store.document_keys(store.all_content_ids())
    stored = {key for keys in by_content.values() for key in keys}
    assert {d["key"] for d in documents} == stored and len(documents) == len(stored)
    # Each text of the job holds the documents, and the sketch, of one text of the store.
    job_keys: dict[int, set[str]] = {}
    for d in documents:
        job_keys.setdefault(d["content"], set()).add(d["key"])
    signatures = {s["content"]: s for s in _table(job_out / "signatures")}
    assert set(signatures) == set(job_keys) and len(signatures) == store.counts()["contents"]
    rows = store.contents(store.all_content_ids())
    sketch_of_key = {key: rows[cid].sketch for cid, keys in by_content.items() for key in keys}
    for content, keys in job_keys.items():
        assert {frozenset(by_content[store_id]) for store_id in by_content if set(by_content[store_id]) & keys} == {frozenset(keys)}
        assert np.array_equal(np.frombuffer(signatures[content]["sketch"], "<u4"), sketch_of_key[next(iter(keys))])
    manifest = Manifest.read(job_out)
    assert manifest.counts["bad_records"] == 2  # the line that is not JSON and the repeated id
    assert sorted(b["reason"].split(" (")[0] for b in manifest.bad_records) == ["duplicate id 't0'", "invalid JSON"] or \
        any("duplicate id" in b["reason"] for b in manifest.bad_records)
    assert [s["uri"] for s in manifest.inputs] == [str(p) for p in inputs]


def test_an_imported_job_answers_as_the_store_that_added_the_input(job_out, local_store, inputs, tmp_path):
    from dedupdb.scaleout.importer import import_job, open_for_import

    with open_for_import(tmp_path / "imported.db", job_out) as imported:
        summary = import_job(imported, job_out)
        assert summary.documents == local_store.store.counts()["documents"]
        assert {(p.a, p.b, p.jaccard, p.exact) for p in imported.pairs()} == \
            {(p.a, p.b, p.jaccard, p.exact) for p in local_store.pairs()}
        assert [[m.key for m in c.members] for c in imported.clusters(keep="first")] == \
            [[m.key for m in c.members] for c in local_store.clusters(keep="first")]
        assert imported.check().sound
        # Texts are numbered in the order of their first documents, as add numbers them: a key's first texts, the
        # only ones a text is compared with under a key held by many, are the same in both.
        in_order = "SELECT hash FROM contents ORDER BY id"
        assert [r[0] for r in imported.store.conn.execute(in_order)] == \
            [r[0] for r in local_store.store.conn.execute(in_order)]
        # The inputs are known as they were found: export reads them back, and add finds them unchanged.
        assert [(r.key, r.text) for r in imported.export(unique=True, keep="first")] == \
            [(r.key, r.text) for r in local_store.export(unique=True, keep="first")]
        summary = imported.add(inputs, records=RecordOptions(id_field="id"), workers=0)
        assert summary.unchanged == len(inputs) and not summary.added and not summary.updated


def test_unique_keeps_what_export_unique_keeps(job_out, local_store, inputs):
    kept_locally = {r.key for r in local_store.export(unique=True, keep="first")}
    kept = set()
    unique = job_out / "unique"
    for index, path in enumerate(inputs):
        name = path.name[: -len(".gz")] if path.name.endswith(".gz") else path.name
        written = unique / f"{index:05d}-{name}"
        if name.endswith(".csv"):
            with open(written, encoding="utf-8", newline="") as fh:
                kept |= {f"{path}#{row['id']}" for row in csv.DictReader(fh)}
        else:
            kept |= {f"{path}#{json.loads(line)['id']}" for line in written.read_text(encoding="utf-8").splitlines()}
    assert kept == kept_locally
    assert len(kept) < local_store.store.counts()["documents"]


def test_unique_keeps_the_longest_as_export_unique_does(ray_runtime, inputs, local_store, tmp_path):
    from dedupdb.database import candidate_scheme
    from dedupdb.scaleout import job

    settings = Settings()
    job.run([str(p) for p in inputs], tmp_path / "out", settings, candidate_scheme(settings), RecordOptions(id_field="id"),
            keep="longest")
    dropped = {r["key"] for r in _table(tmp_path / "out" / "clusters") if not r["keep"]}
    everything = {key for keys in local_store.store.document_keys(local_store.store.all_content_ids()).values()
                  for key in keys}
    kept_locally = {r.key for r in local_store.export(unique=True, keep="longest")}
    assert everything - dropped == kept_locally
    assert kept_locally != {r.key for r in local_store.export(unique=True, keep="first")}


def test_clusters_name_one_kept_document_per_star(job_out):
    rows = _table(job_out / "clusters")
    assert rows
    centres = {r["centre"] for r in rows}
    for row in rows:
        assert row["keep"] == (row["key"] == row["centre"])
        assert row["centre"] in centres
    for centre in centres:
        assert sum(1 for r in rows if r["centre"] == centre and r["keep"]) == 1


# --- stages against the engine ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("limit", [10_000, 3])
def test_candidate_pairs_are_every_two_contents_under_a_key_one_among_its_first(limit):
    """Every two contents under a key, or (limit) those with one among the key's first texts by their first
    document's ordinal, as a store that read the documents in that order numbers them."""
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 40, 400)
    numbers = rng.integers(0, 150, 400)
    ids = numbers * 1_000_003 + (1 << 61)
    firsts = rng.permutation(150)[numbers]  # one ordinal a content, in no relation to its number
    found = stages.candidate_pairs(pa.table({"key": keys, "content": ids, "first": firsts}), limit)
    holders: dict[int, list[int]] = {}
    for k, f, x in sorted({(int(k), int(f), int(x)) for k, f, x in zip(keys, firsts, ids)}):
        holders.setdefault(k, []).append(x)
    expected = {(min(x, y), max(x, y)) for texts in holders.values() for j, y in enumerate(texts) for x in texts[:min(j, limit)]}
    assert set(zip(found.column("a").to_pylist(), found.column("b").to_pylist())) == expected
    assert found.num_rows == len(expected)


def test_bucket_counts_summed_are_the_corpus_idf():
    settings = Settings()
    texts = [_text(random.Random(i), 80) for i in range(40)]
    table = stages.sketch_table(pa.table({
        "key": [f"k{i}" for i in range(40)], "input": pa.array([0] * 40, pa.int32()), "record": [str(i) for i in range(40)],
        "text": texts, "ordinal": list(range(40)), "bytes": [len(t) for t in texts], "bad": pa.nulls(40, pa.string()),
        "failed": [False] * 40,
    }, schema=stages.RECORD_SCHEMA), settings)
    carried = table.filter(pa.compute.is_valid(table.column("minhash")))
    halves = [stages.bucket_counts(carried.slice(0, 20)), stages.bucket_counts(carried.slice(20))]
    summed = stages.sum_bucket_counts(pa.concat_tables(halves))
    df = np.zeros(DF_BUCKETS, np.uint32)
    df[summed.column("bucket").to_numpy()] = summed.column("texts").to_numpy()
    idf = CorpusIdf()
    # What add's workers hand the store for these texts, which it counts.
    idf.observe([sketch.words[2] for _, sketch, _ in sketch_records(settings, texts) if sketch is not None])
    assert np.array_equal(df, idf.df)
    assert summed.column("worded").to_numpy().sum() == idf.documents == 40


def test_a_texts_sketch_rides_on_its_first_document_in_a_table_of_records():
    text = _text(random.Random(3), 60)
    table = stages.sketch_table(pa.table({
        "key": ["late", "early"], "input": pa.array([0, 0], pa.int32()), "record": ["b", "a"], "text": [text, text],
        "ordinal": [5, 2], "bytes": [len(text)] * 2, "bad": pa.nulls(2, pa.string()), "failed": [False, False],
    }, schema=stages.RECORD_SCHEMA), Settings())
    carried = table.filter(pa.compute.is_valid(table.column("minhash")))
    assert carried.column("ordinal").to_pylist() == [2]
    assert sorted(table.column("ordinal").to_pylist()) == [2, 5]


def test_one_sketch_per_text_and_a_shared_number_stops_the_job():
    table = pa.table({"content": [5, 3, 5, 3], "hash": [b"x", b"y", b"x", b"y"], "n": [0, 1, 2, 3]})
    kept = stages.first_per_content(table)
    assert kept.column("n").to_pylist() == [1, 0]
    kept = stages.first_per_content(table.append_column("ordinal", pa.array([9, 4, 2, 7])))  # the first document's
    assert kept.column("n").to_pylist() == [1, 2]
    with pytest.raises(RuntimeError, match="share the content number"):
        stages.first_per_content(pa.table({"content": [5, 5], "hash": [b"x", b"z"]}))


def test_content_numbers_are_positive_62_bit():
    assert content_number(b"\xff" * 16) == (1 << 62) - 1
    assert content_number(bytes(16)) == 0


def test_judge_pairs_gives_the_stores_verdicts():
    from dedupdb.sketch.verify import PairJudge, Signature

    rng = np.random.default_rng(3)
    base = np.sort(rng.choice(1 << 32, 200, replace=False)).astype(np.uint32)
    near = np.sort(np.concatenate((base[:180], rng.choice(1 << 32, 20).astype(np.uint32))))
    far = np.sort(rng.choice(1 << 32, 200, replace=False)).astype(np.uint32)
    sketches = {1 << 60: base, (1 << 60) + 1: near, (1 << 60) + 2: far}
    signature_rows = pa.table({"content": list(sketches), "sketch": [s.astype("<u4").tobytes() for s in sketches.values()],
                               "simhash": pa.nulls(3, pa.int64())})
    pairs = pa.table({"a": [1 << 60, 1 << 60], "b": [(1 << 60) + 1, (1 << 60) + 2]})
    first = stages.carry_left(pa.concat_tables([stages.pair_rows(pairs), stages.sketch_rows(signature_rows)]))
    judged = stages.judge_pairs(pa.concat_tables([first, stages.sketch_rows(signature_rows)]), Settings())
    expected = PairJudge(0.5, 1024).pairs({k: Signature(v, None) for k, v in sketches.items()},
                                          np.array([[1 << 60, (1 << 60) + 1], [1 << 60, (1 << 60) + 2]]))
    assert [(r["a"], r["b"], r["jaccard"]) for r in judged.to_pylist()] == [(a, b, j) for a, b, j, _ in expected]
    assert judged.num_rows == 1


def test_shards_of_folders_and_formats(tmp_path):
    (tmp_path / "d" / "e").mkdir(parents=True)
    for name in ("d/x.jsonl", "d/e/y.csv", "d/notes.md", "d/z.parquet"):
        (tmp_path / name).write_text("")
    found = shards([str(tmp_path / "d")], RecordOptions())
    # As add walks a folder: its own files first, then its folders'.
    assert [(Path(s.uri).name, s.format) for s in found] == [("x.jsonl", "jsonl"), ("z.parquet", "parquet"), ("y.csv", "csv")]
    from dedupdb.errors import InputError

    with pytest.raises(InputError, match="no such file"):
        shards([str(tmp_path / "missing.jsonl")], RecordOptions())
    with pytest.raises(InputError, match="not a record file"):
        shards([str(tmp_path / "d" / "notes.md")], RecordOptions())


def test_parquet_shards_read_by_id_or_row(tmp_path, ray_runtime):
    from dedupdb.scaleout.inputs import shard_records

    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"doc": ["x", "y"], "body": ["one two three", None]}), path)
    [shard] = shards([str(path)], RecordOptions(text_field="body", id_field="doc"))
    items = list(shard_records(shard))
    assert items[0].record_id == "x" and items[0].text == "one two three"
    assert "no value" in items[1].reason
    [shard] = shards([str(path)], RecordOptions(text_field="body"))
    assert list(shard_records(shard))[0].record_id == "1"


# --- the command --------------------------------------------------------------------------------------------------

def test_cli_runs_a_job_and_reports_it(ray_runtime, runner, tmp_path):
    source = tmp_path / "posts.jsonl"
    texts = [_text(random.Random(i), 60) for i in range(30)]
    source.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts + texts[:5]), encoding="utf-8")
    out = tmp_path / "out"
    result = runner.invoke(app, ["ray", str(source), "--out", str(out), "--format", "json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["records"] == 35 and summary["texts"] == 30 and summary["document_pairs"] == 5
    from .test_cli_scripts import _documented_fields

    documented = _documented_fields()
    assert set(summary) == documented["ray"] and summary["failed"] == 0 and summary["unique_records"] is None
    imported = runner.invoke(app, ["--db", str(tmp_path / "imported.db"), "import", str(out), "--format", "json"])
    assert imported.exit_code == 0, imported.output
    assert set(json.loads(imported.stdout)) == documented["import"]
    assert [s["stage"] for s in summary["stages"]][:2] == ["read", "sketch"]
    again = runner.invoke(app, ["ray", str(source), "--out", str(out)])
    assert again.exit_code == 1 and "must be new or empty" in again.output
    assert "Traceback" not in again.output
    missing = runner.invoke(app, ["ray", str(tmp_path / "nope.jsonl"), "--out", str(tmp_path / "o2")])
    assert missing.exit_code == 1 and "no such file" in missing.output and len(missing.output.strip().splitlines()) == 1


def test_a_uri_input_is_read_through_pyarrow(ray_runtime, tmp_path):
    from dedupdb.database import candidate_scheme
    from dedupdb.scaleout import job

    source = tmp_path / "posts.jsonl"
    texts = [_text(random.Random(i), 50) for i in range(12)]
    source.write_text("".join(json.dumps({"id": f"p{i}", "text": t}) + "\n" for i, t in enumerate(texts + texts[:2])),
                      encoding="utf-8")
    uri = source.as_uri()
    settings = Settings()
    manifest = job.run([uri], tmp_path / "out", settings, candidate_scheme(settings), RecordOptions(), unique=True)
    assert manifest.inputs[0]["uri"] == uri
    keys = {row["key"] for row in _table(tmp_path / "out" / "documents")}
    assert keys == {f"{uri}#{i}" for i in range(1, 15)}
    assert manifest.counts["document_pairs"] == 2 and manifest.counts["unique_records"] == 12
    kept = (tmp_path / "out" / "unique" / "00000-posts.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in kept] == [f"p{i}" for i in range(12)]


def test_a_parquet_shard_is_deduplicated_into_parquet(ray_runtime, tmp_path):
    from dedupdb.database import candidate_scheme
    from dedupdb.scaleout import job

    rng = random.Random(5)
    texts = [_text(rng, 70) for _ in range(20)]
    rows = texts + [_edited(rng, texts[0], 2), texts[1]]
    path = tmp_path / "corpus.parquet"
    pq.write_table(pa.table({"doc": [f"d{i}" for i in range(len(rows))], "body": rows, "lang": ["en"] * len(rows)}), path)
    settings = Settings()
    manifest = job.run([str(path)], tmp_path / "out", settings, candidate_scheme(settings),
                       RecordOptions(text_field="body", id_field="doc"), unique=True)
    pairs = {(p["a"], p["b"]): p for p in _table(tmp_path / "out" / "pairs")}
    assert set(pairs) == {(f"{path}#d0", f"{path}#d20"), (f"{path}#d1", f"{path}#d21")}
    assert pairs[(f"{path}#d1", f"{path}#d21")]["exact"] and not pairs[(f"{path}#d0", f"{path}#d20")]["exact"]
    kept = pq.read_table(tmp_path / "out" / "unique" / "00000-corpus.parquet")
    assert kept.column_names == ["doc", "body", "lang"]
    assert kept.column("doc").to_pylist() == [f"d{i}" for i in range(20)]
    assert manifest.counts["unique_records"] == 20


def test_without_the_ray_extra_the_command_says_how_to_install_it(runner, tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    source = tmp_path / "posts.jsonl"
    source.write_text('{"text": "one two three"}\n', encoding="utf-8")
    result = runner.invoke(app, ["ray", str(source), "--out", str(tmp_path / "out")])
    assert result.exit_code == 1
    assert result.output.strip() == 'Error: the ray extra is not installed: pip install "dedupdb[ray]"'


def test_unique_drops_by_record_even_when_ids_hold_a_hash_sign(ray_runtime, tmp_path):
    from dedupdb.database import candidate_scheme
    from dedupdb.scaleout import job

    texts = [_text(random.Random(i), 50) for i in range(6)]
    rows = [("a#1", texts[0]), ("a", texts[1]), ("b#2#x", texts[0]), ("1", texts[2]), ("b", texts[1])]
    source = tmp_path / "x#y.jsonl"  # the file name holds one too
    source.write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in rows), encoding="utf-8")
    settings = Settings()
    job.run([str(source)], tmp_path / "out", settings, candidate_scheme(settings), RecordOptions(id_field="id"), unique=True)
    kept = (tmp_path / "out" / "unique" / "00000-x#y.jsonl").read_text(encoding="utf-8").splitlines()
    assert [json.loads(line)["id"] for line in kept] == ["a#1", "a", "1"]
    dropped = {r["key"] for r in _table(tmp_path / "out" / "clusters") if not r["keep"]}
    assert dropped == {f"{source}#b#2#x", f"{source}#b"}
