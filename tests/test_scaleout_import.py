"""dedupdb import: a job's output folder, written here with the engine's own functions as the job writes it, loads
into a store that answers as one built by `add` of the same records does; bad folders and stores fail in one line."""

from __future__ import annotations

import json
import random
import shutil
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from dedupdb import Database  # noqa: E402
from dedupdb.cli.commands import app  # noqa: E402
from dedupdb.errors import InputError, SettingsError  # noqa: E402
from dedupdb.sketch.fingerprint import Fingerprinter  # noqa: E402
from dedupdb.index.lsh import scheme_meta  # noqa: E402
from dedupdb.ingest.pipeline import sketch_records  # noqa: E402
from dedupdb.ingest.records import Record, RecordOptions, open_record_file, read_records, sniff_encoding  # noqa: E402
from dedupdb.scaleout import importer, layout  # noqa: E402
from dedupdb.text.weights import CorpusIdf  # noqa: E402

from .conftest import CHINESE, CHINESE_EDITED, CHINESE_OTHER, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER  # noqa: E402

THRESHOLD = 0.6  # not the default: the imported store must take the job's settings
OPTIONS = RecordOptions("jsonl", "text", "id")
VOCABULARY = [f"word{i}" for i in range(3000)]


def write_corpus(path: Path) -> Path:
    """About 300 records: texts with a SimHash, a one-word edit of every third, an exact copy of every seventh,
    long texts whose sketch does not hold every shingle (their MinHash is kept), short English and Chinese
    near-duplicates, and a record without text."""
    rng = random.Random(11)
    texts = []
    for i in range(190):
        words = [rng.choice(VOCABULARY) for _ in range(rng.randint(30, 120))]
        texts.append(" ".join(words))
        if i % 3 == 0:
            words[5] = "edited"
            texts.append(" ".join(words))
        if i % 7 == 0:
            texts.append(texts[-1])
    long_words = [rng.choice(VOCABULARY) for _ in range(1500)]
    texts += [" ".join(long_words), " ".join(long_words[:700] + ["changed"] + long_words[701:])]
    texts += [" ".join(rng.choice(VOCABULARY) for _ in range(1500))]
    texts += [ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, CHINESE, CHINESE_EDITED, CHINESE_OTHER, "  ", ENGLISH]
    order = list(range(len(texts)))
    rng.shuffle(order)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        for n, i in enumerate(order):
            out.write(json.dumps({"id": f"r{n}", "text": texts[i]}, ensure_ascii=False) + "\n")
    return path.resolve()


def _parts(rows: list[dict], schema: pa.Schema, folder: Path, names: list[str], row_group_size: int = 50) -> None:
    """rows written as len(names) part files, consecutive slices of them in the order of names."""
    folder.mkdir(parents=True)
    size = -(-len(rows) // len(names)) if rows else 0
    for i, name in enumerate(names):
        part = rows[i * size : (i + 1) * size]
        table = pa.Table.from_pylist(part, schema=schema)
        pq.write_table(table, folder / f"{name}.parquet", row_group_size=row_group_size)


def write_job(out: Path, corpus: Path, truth: Database) -> Path:
    """The output folder a job over the corpus writes (layout.py), made with the engine's functions; the pairs and
    clusters are those of the store `add` built, the truth."""
    settings = truth.settings
    with open_record_file(corpus) as stream:
        encoding = sniff_encoding(stream.read(64 * 1024))
        records = [r for r in read_records(stream, OPTIONS, 0, 0, encoding) if isinstance(r, Record)]
    results = sketch_records(settings, [r.text for r in records])
    sketches = [sketch for _, sketch, _ in results if sketch is not None]
    idf = CorpusIdf()  # the job still counts it (idf.bin), though nothing weighs by it
    idf.observe([s.words[2] for s in sketches if s.words is not None])
    fingerprints = Fingerprinter(settings).batch(sketches)
    number = {}
    documents = []
    for record, (content_hash, _, snippet) in zip(records, results):
        if content_hash is None:
            continue  # no text: add stores no document either
        key = f"{corpus}#{record.record_id}"
        number[key] = layout.content_number(content_hash)
        documents.append({"key": key, "input": 0, "record": record.record_id, "content": number[key],
                          "bytes": len(record.text.encode("utf-8")), "ordinal": layout.ordinal(0, record.line),
                          "snippet": snippet})
    signatures = []
    for i, fp in enumerate(fingerprints):
        whole = 0 < fp.shingles == len(fp.sketch)
        signatures.append({
            "content": layout.content_number(fp.content_hash), "hash": fp.content_hash, "chars": fp.chars,
            "shingles": fp.shingles,
            # the job writes every signature; a store leaves out those the sketch gives: both must import
            "minhash": b"" if whole and i % 2 else fp.minhash.astype("<u2").tobytes(),
            "sketch": fp.sketch.astype("<u4").tobytes(), "simhash": fp.simhash_signed,
            "fingerprints": None if fp.fingerprints is None else fp.fingerprints.astype("<u4").tobytes(),
        })
    pairs = [{"a": p.a, "b": p.b, "jaccard": p.jaccard, "hamming": p.hamming, "exact": p.exact,
              "a_content": number[p.a], "b_content": number[p.b]} for p in truth.pairs()]
    clusters = []
    for c in truth.clusters(keep="first"):
        for m in c.members:
            clusters.append({"key": m.key, "cluster": min(number[x.key] for x in c.members), "keep": m is c.members[0],
                             "centre": c.members[0].key, "similarity": m.similarity})

    out.mkdir(parents=True)
    # Part names out of ordinal order: the import orders documents by ordinal, not by name.
    _parts(documents, _schema("key:string input:int32 record:string content:int64 bytes:int64 ordinal:int64 "
                              "snippet:string"), out / layout.DOCUMENTS, ["part-c", "part-a", "part-b"])
    _parts(signatures, _schema("content:int64 hash:binary chars:int64 shingles:int64 minhash:binary sketch:binary "
                               "simhash:int64 fingerprints:binary"), out / layout.SIGNATURES, ["s1", "s0"])
    _parts(pairs, _schema("a:string b:string jaccard:float64 hamming:int32 exact:bool a_content:int64 "
                          "b_content:int64"), out / layout.PAIRS, ["p0", "p1"])
    _parts(clusters, _schema("key:string cluster:int64 keep:bool centre:string similarity:float64"),
           out / layout.CLUSTERS, ["c0"])
    (out / layout.IDF).write_bytes(idf.to_bytes())
    layout.Manifest(
        settings=settings.to_meta(), scheme=scheme_meta(truth.banding),
        inputs=[{"uri": str(corpus), "format": "jsonl", "options": OPTIONS.to_json()}],
        idf_documents=idf.documents, keep="first",
        counts={"records": len(documents), "texts": len(signatures), "document_pairs": len(pairs)},
    ).write(out)
    return out


def _schema(spec: str) -> pa.Schema:
    types = {"string": pa.string(), "int32": pa.int32(), "int64": pa.int64(), "binary": pa.binary(),
             "float64": pa.float64(), "bool": pa.bool_()}
    return pa.schema([(name, types[kind]) for name, kind in (f.split(":") for f in spec.split())])


@pytest.fixture(scope="module")
def job(tmp_path_factory):
    """The corpus, the store `add` built of it (the truth), and the job's output folder."""
    root = tmp_path_factory.mktemp("job")
    corpus = write_corpus(root / "data" / "corpus.jsonl")
    truth_path = root / "truth.db"
    with Database.open(truth_path, threshold=THRESHOLD) as truth:
        summary = truth.add([corpus], records=OPTIONS, workers=0)
        assert summary.records > 250 and not summary.failed
        out = write_job(root / "out", corpus, truth)
    return SimpleNamespace(corpus=corpus, truth=truth_path, out=out)


@pytest.fixture
def small_batches(monkeypatch):
    monkeypatch.setattr(importer, "BATCH_ROWS", 37)  # every folder in several batches, across part files


def _import(db_path: Path, out: Path):
    with importer.open_for_import(db_path, out) as db:
        return importer.import_job(db, out)


def _all_keys(db: Database) -> list[str]:
    return sorted(k for keys in db.store.document_keys(db.store.all_content_ids()).values() for k in keys)


def _pairs(db: Database, by: str = "document") -> list[tuple]:
    return sorted((p.a, p.b, p.jaccard, p.hamming, p.exact) for p in db.pairs(by=by))


def _groups(db: Database, **options) -> list[list[str]]:
    return [[m.key for m in c.members] for c in db.clusters(**options)]


def _contents(db: Database) -> dict[bytes, tuple]:
    """Each text's stored columns by its hash (all but its id and cluster, which are numbers of the store's own)."""
    rows = db.store.conn.execute(
        "SELECT hash, chars, shingles, minhash, sketch, simhash, fingerprints, documents FROM contents").fetchall()
    return {row[0]: row[1:] for row in rows}


# --- the import answers as add does --------------------------------------------------------------------------------


def test_import_answers_as_add_does(job, tmp_path, small_batches):
    db_path = tmp_path / "imported.db"
    summary = _import(db_path, job.out)
    with Database.open(job.truth, create=False) as truth, Database.open(db_path, create=False) as db:
        counts = truth.store.counts()
        assert (summary.documents, summary.contents, summary.pairs) == (
            counts["documents"], counts["contents"], counts["pairs"])
        assert summary.clusters == len(truth.clusters(related=True)) > 10
        assert db.settings == truth.settings and db.settings.threshold == THRESHOLD
        assert scheme_meta(db.banding) == scheme_meta(truth.banding)
        assert _all_keys(db) == _all_keys(truth)
        assert _pairs(db) == _pairs(truth) and any(p[4] for p in _pairs(db)) and any(not p[4] for p in _pairs(db))
        assert _pairs(db, "content") == _pairs(truth, "content")
        assert _contents(db) == _contents(truth)  # every text's signatures as add stored them
        report = db.check()
        assert report.sound, report.problems
        # Documents stored in the order of their ordinals, as add stores them: every keep rule decides alike.
        for keep in ("oldest", "first", "last", "longest"):
            assert _groups(db, keep=keep) == _groups(truth, keep=keep)
        assert _groups(db, related=True) == _groups(truth, related=True)
        assert db.store.read_blob("corpus_idf") is None is truth.store.read_blob("corpus_idf")
        meta = db.store.read_meta()
        assert meta[importer.PENDING] == "0"


def test_imported_contents_carry_the_checksums_add_gives_them(job, tmp_path):
    db_path = tmp_path / "imported.db"
    _import(db_path, job.out)
    sums = "SELECT hash, checksum FROM contents"
    with Database.open(job.truth, create=False) as truth, Database.open(db_path, create=False) as db:
        imported = dict(db.store.conn.execute(sums).fetchall())
        assert None not in imported.values() and imported == dict(truth.store.conn.execute(sums).fetchall())
        victim, sketch = db.store.conn.execute(
            "SELECT id, sketch FROM contents ORDER BY length(sketch) DESC LIMIT 1").fetchone()
        db.store.conn.execute("UPDATE contents SET sketch = ? WHERE id = ?",
                              (sketch[:8] + bytes(b ^ 0xFF for b in sketch[8:20]) + sketch[20:], victim))
        report = db.check()
        assert report.failed() == ["signatures"] and f"content {victim}:" in report.problem("signatures").examples[0]


def test_query_finds_a_stored_text(job, tmp_path):
    db_path = tmp_path / "imported.db"
    _import(db_path, job.out)
    with Database.open(job.truth, create=False) as truth, Database.open(db_path, create=False) as db:
        for text in (ENGLISH_EDITED, CHINESE, " ".join(VOCABULARY[:80])):
            hits = db.query(text, top=0)
            assert [(h.key, h.jaccard, h.hamming, h.exact, h.containment) for h in hits] == [
                (h.key, h.jaccard, h.hamming, h.exact, h.containment) for h in truth.query(text, top=0)]
        keys = {h.key for h in db.query(ENGLISH_EDITED)}
        assert any(k.startswith(f"{job.corpus}#") for k in keys) and len(keys) >= 2  # itself and ENGLISH


def test_add_of_the_same_file_after_import_reads_it_again(job, tmp_path):
    db_path = tmp_path / "imported.db"
    _import(db_path, job.out)
    with Database.open(db_path, create=False) as db, Database.open(job.truth, create=False) as truth:
        summary = db.add([job.corpus], records=OPTIONS, workers=0)
        assert summary.updated == [str(job.corpus)] and not summary.failed
        assert _all_keys(db) == _all_keys(truth)
        assert [p[:3] for p in _pairs(db)] == [p[:3] for p in _pairs(truth)]
        assert db.check().sound


# --- what an import refuses, and what one cut short leaves ------------------------------------------------------------


def test_import_into_a_store_holding_documents_is_refused(job, tmp_path):
    with pytest.raises(InputError, match="is not empty"):
        _import(job.truth, job.out)


def test_import_into_a_store_of_other_settings_is_refused(job, tmp_path):
    db_path = tmp_path / "other.db"
    Database.open(db_path, threshold=0.8).close()
    with pytest.raises(SettingsError, match="other settings than the job.*threshold=0.8"):
        _import(db_path, job.out)
    with Database.open(db_path, create=False) as db, pytest.raises(SettingsError, match="other settings"):
        importer.import_job(db, job.out)  # a database opened by the caller is checked too


def test_an_import_cut_short_leaves_a_store_that_is_refused(job, tmp_path, monkeypatch, small_batches):
    db_path = tmp_path / "partial.db"
    real = importer._import_pairs

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(importer, "_import_pairs", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _import(db_path, job.out)
    monkeypatch.setattr(importer, "_import_pairs", real)
    with Database.open(db_path, create=False) as db:
        assert db.store.read_meta()[importer.PENDING] == "1"
    with pytest.raises(InputError, match="cut short; delete it"):
        _import(db_path, job.out)


def test_a_document_of_an_unknown_text_is_an_error_that_says_the_store_is_partial(job, tmp_path):
    out = shutil.copytree(job.out, tmp_path / "out")
    table = pq.read_table(out / layout.DOCUMENTS / "part-a.parquet")
    contents = table.column("content").to_pylist()
    contents[3] = 12345
    table = table.set_column(table.schema.get_field_index("content"), "content", pa.array(contents, pa.int64()))
    pq.write_table(table, out / layout.DOCUMENTS / "part-a.parquet")
    with pytest.raises(InputError, match="names content 12345, which signatures/ lacks.*partial import: delete it"):
        _import(tmp_path / "x.db", out)


def test_a_sketch_out_of_order_is_a_malformed_signature(job, tmp_path):
    """A store keeps sketches sorted (and codes them so): one that is not is refused in one line, not stored."""
    out = shutil.copytree(job.out, tmp_path / "out")
    name = sorted((out / layout.SIGNATURES).glob("*.parquet"))[0]
    table = pq.read_table(name)
    sketches = table.column("sketch").to_pylist()
    at = max(range(len(sketches)), key=lambda i: len(sketches[i]))
    sketches[at] = np.frombuffer(sketches[at], "<u4")[::-1].astype("<u4").tobytes()
    table = table.set_column(table.schema.get_field_index("sketch"), "sketch", pa.array(sketches, pa.binary()))
    pq.write_table(table, name)
    with pytest.raises(InputError, match="malformed"):
        _import(tmp_path / "x.db", out)


# --- the command ----------------------------------------------------------------------------------------------------------


def _one_line_error(result, text: str) -> None:
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert text in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_command_imports_and_summarises(job, tmp_path, runner):
    db_path = tmp_path / "cli.db"
    result = runner.invoke(app, ["--db", str(db_path), "import", str(job.out), "--format", "json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert set(summary) == {"documents", "contents", "pairs", "clusters", "seconds"}
    with Database.open(job.truth, create=False) as truth:
        counts = truth.store.counts()
    assert (summary["documents"], summary["contents"], summary["pairs"]) == (
        counts["documents"], counts["contents"], counts["pairs"])
    result = runner.invoke(app, ["pairs", "--db", str(db_path)])
    assert result.exit_code == 0 and result.stdout.count("\n") == len(_pairs_of(job.truth))

    other = tmp_path / "table.db"
    result = runner.invoke(app, ["import", str(job.out), "--db", str(other)])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith(f"imported {counts['documents']:,} documents") and result.stdout.count("\n") == 1


def _pairs_of(path: Path) -> list:
    with Database.open(path, create=False) as db:
        return list(db.pairs())


def test_command_errors_are_one_line(job, tmp_path, runner):
    db_path = tmp_path / "e.db"
    invoke = lambda *args: runner.invoke(app, ["--db", str(db_path), "import", *args])  # noqa: E731
    _one_line_error(invoke(str(tmp_path / "nowhere")), "no such folder")
    (tmp_path / "empty").mkdir()
    _one_line_error(invoke(str(tmp_path / "empty")), "no manifest.json")
    future = tmp_path / "future"
    future.mkdir()
    body = json.loads((job.out / layout.MANIFEST).read_text())
    (future / layout.MANIFEST).write_text(json.dumps({**body, "version": layout.VERSION + 1}))
    _one_line_error(invoke(str(future)), "not a dedupdb job manifest of version")
    assert not db_path.exists()  # nothing is made for a folder that cannot be imported
    _one_line_error(runner.invoke(app, ["--db", str(job.truth), "import", str(job.out)]), "is not empty")
    assert runner.invoke(app, ["--db", str(db_path), "init"]).exit_code == 0  # the default threshold, not the job's
    _one_line_error(invoke(str(job.out)), "other settings than the job")
    result = runner.invoke(app, ["import", "--help"])
    assert result.exit_code == 0 and "--db" in result.output
