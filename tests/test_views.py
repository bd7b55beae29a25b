"""The views a store offers to sqlite3 and datasette, read through datasette as its users would."""

from __future__ import annotations

import asyncio
import json
import os
import sqlite3
from datetime import datetime, timezone

import pytest

import dedupdb
from dedupdb.storage import schema as migrate
from dedupdb.ingest.records import RecordOptions

from .conftest import CHINESE, CHINESE_EDITED, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, write

datasette_app = pytest.importorskip("datasette.app")

MTIME_NS = 1_700_000_000 * 10**9 + 123_456_789  # 2023-11-14T22:13:20Z and a fraction


def _iso(seconds: float) -> str:
    return datetime.fromtimestamp(int(seconds), timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


@pytest.fixture
def store(tmp_path, db_path):
    """Two exact copies and a near-duplicate, a Chinese pair, a loner, and a record file with a copy inside."""
    root = tmp_path / "docs"
    files = {
        "report.txt": ENGLISH,
        "copy/report.txt": ENGLISH,
        "report-edited.txt": ENGLISH_EDITED,
        "zh/a.txt": CHINESE,
        "zh/b.txt": CHINESE_EDITED,
        "weather.txt": ENGLISH_OTHER,
    }
    for i, (name, text) in enumerate(files.items()):  # report.txt the oldest, so that it is the file kept
        os.utime(write(root / name, text), ns=(MTIME_NS + i * 10**9, MTIME_NS + i * 10**9))
    records = write(root / "posts.jsonl", json.dumps({"id": "p1", "text": ENGLISH}) + "\n"
                    + json.dumps({"id": "p2", "text": ENGLISH_OTHER + " Updated."}) + "\n")
    os.utime(records, ns=(MTIME_NS, MTIME_NS))
    with dedupdb.open(db_path) as db:
        db.add([root], records=RecordOptions("auto", None, "id"))
    return root


def _rows(db_path, table: str, query: str = "") -> list[dict]:
    """Every row of a table or view, as datasette's JSON API serves it."""

    async def fetch():
        ds = datasette_app.Datasette([str(db_path)])
        response = await ds.client.get(f"/{db_path.stem}/{table}.json?_shape=array&_size=max{query}")
        assert response.status_code == 200, response.text
        return response.json()

    return asyncio.run(fetch())


def test_datasette_lists_the_views(store, db_path):
    async def fetch():
        ds = datasette_app.Datasette([str(db_path)])
        response = await ds.client.get(f"/{db_path.stem}.json")
        return response.json()

    views = {v["name"] for v in asyncio.run(fetch())["views"]}
    assert {"documents_readable", "duplicate_pairs", "clusters", "journal_readable"} <= views


def test_duplicate_pairs_are_the_pairs_command_without_containment(store, db_path, cli):
    listed = [json.loads(line) for line in cli("pairs").stdout.splitlines()]
    expected = {(p["a"], p["b"], p["jaccard"], p["hamming"], p["exact"]) for p in listed}
    rows = _rows(db_path, "duplicate_pairs")
    assert len(rows) == len(listed) >= 5
    assert {(r["a"], r["b"], r["jaccard"], r["hamming"], bool(r["exact"])) for r in rows} == expected
    for r in rows:
        assert r["a"] < r["b"]
        assert r["a"].startswith(r["a_path"]) and r["b"].startswith(r["b_path"])
    exact = {(os.path.relpath(r["a"], store), os.path.relpath(r["b"], store)) for r in rows if r["exact"]}
    assert exact == {("copy/report.txt", "posts.jsonl#p1"), ("copy/report.txt", "report.txt"),
                     ("posts.jsonl#p1", "report.txt")}


def test_clusters_are_the_related_report(store, db_path, cli):
    report = json.loads(cli("report", "--related", "--format", "json").stdout)
    rows = _rows(db_path, "clusters")
    assert {r["cluster"]: (r["kind"], r["documents"], r["total_bytes"], frozenset(json.loads(r["keys"])))
            for r in rows} == {
        c["cluster"]: (c["kind"], c["documents"], c["total_bytes"], frozenset(m["key"] for m in c["members"]))
        for c in report
    }
    english = next(r for r in rows if r["documents"] == 4)
    assert english["kind"] == "near" and english["texts"] == 2


def test_documents_readable_has_iso_times(store, db_path):
    rows = _rows(db_path, "documents_readable", "&_sort=key")
    assert len(rows) == 8
    by_key = {os.path.relpath(r["key"], store): r for r in rows}
    assert by_key["report.txt"]["modified"] == "2023-11-14T22:13:20Z" == _iso(MTIME_NS / 1e9)
    one = by_key["zh/a.txt"]
    assert one["modified"] == "2023-11-14T22:13:23Z" == _iso(MTIME_NS / 1e9 + 3)
    assert one["path"] == str(store / "zh/a.txt") and one["record"] is None and one["bytes"] == len(CHINESE.encode())
    indexed = datetime.strptime(one["indexed"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert abs(indexed.timestamp() - datetime.now(timezone.utc).timestamp()) < 600
    assert by_key["posts.jsonl#p1"]["record"] == "p1" and by_key["posts.jsonl#p1"]["path"] == str(store / "posts.jsonl")
    assert by_key["report.txt"]["documents_with_this_text"] == 3
    assert by_key["report.txt"]["cluster"] == by_key["report-edited.txt"]["cluster"]


def test_journal_readable_after_a_cleanup(store, db_path, cli, tmp_path):
    result = cli("clean", "--action", "move", "--to", str(tmp_path / "away"), "--exact-only", "--yes")
    assert result.exit_code == 0, result.output
    rows = _rows(db_path, "journal_readable")
    assert len(rows) == 1
    row = rows[0]
    assert row["batch"] == 1 and row["action"] == "move" and row["status"] == "done" and row["undone"] is None
    assert row["source"] == str(store / "copy/report.txt") and row["destination"].startswith(str(tmp_path / "away"))
    assert row["modified"] == "2023-11-14T22:13:21Z" and row["created"].endswith("Z")
    assert cli("undo").exit_code == 0
    assert _rows(db_path, "journal_readable")[0]["undone"].endswith("Z")


def test_views_migration_and_those_after_it_run_again_on_a_reset_version(store, db_path, cli):
    versions = migrate.available()
    views = next(m for m in versions if m.path.name == "0006_views.sql")
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute(f"PRAGMA user_version = {views.version - 1}")
    conn.close()
    assert cli("stats").exit_code == 0  # opening applies it again, over the views already there
    conn = sqlite3.connect(db_path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == versions[-1].version
        assert conn.execute("SELECT count(*) FROM duplicate_pairs").fetchone()[0] >= 5
        assert conn.execute("SELECT value FROM meta WHERE key = 'index.rebuild'").fetchone()[0] == "0"
    finally:
        conn.close()
