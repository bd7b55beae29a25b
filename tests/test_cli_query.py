from __future__ import annotations

import csv
import io
import json

import pytest

import dedupdb

from .conftest import CHINESE, CHINESE_EDITED, CHINESE_OTHER, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, write


@pytest.fixture
def indexed(cli, mixed_folder):
    assert cli("add", str(mixed_folder)).exit_code == 0
    return mixed_folder


def _names(hits):
    return [h["key"].rsplit("/", 1)[-1] for h in hits]


def test_query_english(cli, indexed):
    result = cli("query", ENGLISH_EDITED.replace("plan", "scheme"), "--format", "json")
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)
    assert set(_names(hits)) == {"report.txt", "report copy.txt", "report-edited.md"}
    assert all(0.5 <= h["jaccard"] < 1.0 and not h["exact"] for h in hits)
    assert hits == sorted(hits, key=lambda h: -h["jaccard"])


def test_query_exact_text_scores_one(cli, indexed):
    hits = json.loads(cli("query", ENGLISH.upper(), "--format", "json").stdout)
    exact = [h for h in hits if h["exact"]]
    assert {h["key"].rsplit("/", 1)[-1] for h in exact} == {"report.txt", "report copy.txt"}
    assert all(h["jaccard"] == 1.0 for h in exact)


def test_query_chinese_and_table_output(cli, indexed):
    result = cli("query", CHINESE_EDITED.replace("开心", "高兴"))
    assert result.exit_code == 0
    for name in ("park-gb18030.txt", "park-utf16.txt", "park-edited.txt"):
        assert name in result.stdout
    assert "hotel.txt" not in result.stdout


def test_query_from_file_and_stdin(cli, indexed, tmp_path):
    path = write(tmp_path / "q.txt", CHINESE_OTHER, "gb18030")
    hits = json.loads(cli("query", "--file", str(path), "--format", "json").stdout)
    assert _names(hits) == ["hotel.txt"]
    hits = json.loads(cli("query", "-", "--format", "json", input=ENGLISH_OTHER).stdout)
    assert set(_names(hits)) == {"weather.txt", "page.html"}


def test_query_top_and_threshold(cli, indexed):
    hits = json.loads(cli("query", ENGLISH, "--top", "1", "--format", "json").stdout)
    assert len(hits) == 1
    hits = json.loads(cli("query", ENGLISH_EDITED, "--threshold", "0.99", "--containment", "0", "--format", "json").stdout)
    assert _names(hits) == ["report-edited.md"]
    # The threshold is the Jaccard's: documents holding most of the text are still listed, by containment.
    hits = json.loads(cli("query", ENGLISH_EDITED, "--threshold", "0.99", "--format", "json").stdout)
    assert _names(hits)[0] == "report-edited.md" and {"report.txt", "report copy.txt"} <= set(_names(hits))
    assert all(h["containment"] >= 0.5 for h in hits)


def test_query_unrelated_text_finds_nothing(cli, indexed):
    result = cli("query", "completely different words about astronomy and distant galaxies far away")
    assert result.exit_code == 0
    assert "No near-duplicates found." in result.stdout


@pytest.mark.parametrize("args, message", [((), "give a TEXT"), (("!!! ???",), "no words"), (("   ",), "empty")])
def test_query_bad_input(cli, indexed, args, message):
    result = cli("query", *args)
    assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("text", ["anything at all", "!!! ???"])
def test_query_empty_store(cli, tmp_path, text):
    assert cli("init").exit_code == 0
    result = cli("query", text)
    assert result.exit_code == 1 and "the database is empty" in result.output


_LOADED = """
import json, sys
listing = sys.argv.pop(1)
from dedupdb.cli.commands import main
try:
    main()
except SystemExit as exc:
    if exc.code:
        raise
with open(listing, "w") as out:
    json.dump(sorted(sys.modules), out)
"""


def _modules_loaded(tmp_path, *args: str) -> set[str]:
    """The modules a dedupdb command run in a new process has imported by its end."""
    import subprocess
    import sys

    listing = tmp_path / "modules.json"
    result = subprocess.run([sys.executable, "-c", _LOADED, str(listing), *args], capture_output=True, text=True,
                            timeout=120, stdin=subprocess.DEVNULL)
    assert result.returncode == 0, result.stderr
    return set(json.loads(listing.read_text()))


def test_a_cold_query_loads_only_what_it_needs(db_path, mixed_folder, tmp_path):
    """A query in a new process is mostly imports: an English one loads no Chinese segmenter (jieba's dictionary
    costs about a second), no pydantic (typer from 0.29 validates every option with it), no progress bars and none
    of the ingest machinery; help loads neither numpy nor the database module."""
    with dedupdb.open(db_path) as db:
        db.add([mixed_folder])
    loaded = _modules_loaded(tmp_path, "query", ENGLISH_EDITED, "--db", str(db_path))
    assert "dedupdb.database" in loaded and "rich.table" in loaded  # it did answer, in a table
    unwanted = {"jieba", "rjieba", "pydantic", "rich.progress", "platformdirs", "numba", "dedupdb.ingest.pipeline",
                "dedupdb.ingest.workers", "dedupdb.sketch.fastsketch", "sqlite_utils", "charset_normalizer"}
    assert sorted(unwanted & loaded) == []
    loaded = _modules_loaded(tmp_path, "--help")
    assert sorted({"numpy", "dedupdb.database", "pydantic"} & loaded) == []


def test_pairs_jsonl_and_csv(cli, indexed):
    lines = cli("pairs").stdout.strip().splitlines()
    pairs = [json.loads(line) for line in lines]
    names = {frozenset(k.rsplit("/", 1)[-1] for k in (p["a"], p["b"])) for p in pairs}
    # Document pairs: both copies of the report pair with its edit, and with each other as exact copies.
    assert {frozenset({"report.txt", "report-edited.md"}), frozenset({"report copy.txt", "report-edited.md"}),
            frozenset({"report.txt", "report copy.txt"})} <= names
    assert all(p["jaccard"] >= 0.5 and p["a"] < p["b"] for p in pairs)
    rows = list(csv.DictReader(io.StringIO(cli("pairs", "--format", "csv").stdout)))
    assert len(rows) == len(pairs) and list(rows[0]) == ["a", "b", "jaccard", "hamming", "exact", "containment", "kind"]


def test_report_table_and_csv(cli, indexed):
    table = cli("report").stdout
    assert "reclaimable" in table and "report copy.txt" in table and "park-utf16.txt" in table
    rows = list(csv.DictReader(io.StringIO(cli("report", "--format", "csv").stdout)))
    assert {r["cluster"] for r in rows} and sum(int(r["representative"]) for r in rows) == 3
    big = json.loads(cli("report", "--format", "json", "--min-size", "100000").stdout)
    assert big == []


def test_stats(cli, indexed):
    stats = json.loads(cli("stats", "--format", "json").stdout)
    assert stats["documents"] == 9 and stats["clusters"] == 3
    assert stats["settings"]["threshold"] == 0.5 and stats["lsh"]["bands"] * stats["lsh"]["rows"] <= 256
    assert stats["reclaimable_bytes"] > 0 and stats["database_bytes"] > 0
    assert "reclaimable bytes" in cli("stats").stdout


def test_settings_are_fixed_at_creation(cli, runner, db_path, tmp_path):
    assert cli("init", "--threshold", "0.7", "--cjk-ngram", "3").exit_code == 0
    write(tmp_path / "a.txt", ENGLISH)
    result = cli("add", str(tmp_path / "a.txt"), "--threshold", "0.5")
    assert result.exit_code == 1 and "created with threshold=0.7" in result.output and "reindex" in result.output
    assert cli("add", str(tmp_path / "a.txt")).exit_code == 0
    with dedupdb.open(db_path) as db:
        assert db.settings.threshold == 0.7 and db.settings.cjk_ngram == 3


def test_reindex_changes_threshold_and_pairs(cli, indexed, db_path):
    before = len(cli("pairs").stdout.splitlines())
    result = cli("reindex", "--threshold", "0.95")
    assert result.exit_code == 0 and "0.95" in result.stdout
    after = len(cli("pairs").stdout.splitlines())
    assert after < before
    with dedupdb.open(db_path) as db:
        assert db.settings.threshold == 0.95
        # exact copies still cluster, near ones no longer do
        assert {c.kind for c in db.clusters()} == {"exact"}
    cli("reindex", "--threshold", "0.5")
    assert len(cli("pairs").stdout.splitlines()) == before


def test_library_query_and_clusters(db_path, mixed_folder):
    with dedupdb.open(db_path) as db:
        db.add([mixed_folder])
        hits = db.query(CHINESE)
        assert [h.exact for h in hits].count(True) == 2
        assert any(h.key.endswith("park-edited.txt") and 0.5 <= h.jaccard < 1 for h in hits)
        kinds = sorted(c.kind for c in db.clusters())
        assert kinds == ["exact", "near", "near"]  # weather.txt and page.html hold the same text
