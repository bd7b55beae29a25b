"""Pairs declared not duplicates: remembered by key, dropped from the pair graph before grouping, so report,
clean, export --unique and pairs leave them apart; through the command line and the library."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

import dedupdb

from .conftest import CHINESE, CHINESE_EDITED, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, file_hashes, write


@pytest.fixture
def archive(tmp_path, cli):
    """Two copies of a report, an edited variant, a Chinese pair and a loner; indexed."""
    root = tmp_path / "archive"
    files = {
        "a/report.txt": ENGLISH,
        "b/report.txt": ENGLISH,
        "c/report-v2.txt": ENGLISH_EDITED,
        "zh/a.txt": CHINESE,
        "zh/b.txt": CHINESE_EDITED,
        "weather.txt": ENGLISH_OTHER,
    }
    for i, (name, text) in enumerate(sorted(files.items())):
        path = write(root / name, text)
        os.utime(path, ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
    assert cli("add", str(root)).exit_code == 0
    return root



def _report(cli):
    result = cli("report", "--format", "json")
    assert result.exit_code == 0, result.output
    return [sorted(m["key"].rsplit("/", 2)[-2] + "/" + m["key"].rsplit("/", 1)[-1] for m in g["members"])
            for g in json.loads(result.stdout)]


def test_ignore_a_pair_splits_the_group_everywhere(cli, archive, tmp_path):
    assert sorted(_report(cli)) == [["a/report.txt", "b/report.txt", "c/report-v2.txt"], ["zh/a.txt", "zh/b.txt"]]
    result = cli("ignore", str(archive / "zh/a.txt"), str(archive / "zh/b.txt"))
    assert result.exit_code == 0, result.output
    assert "1 pairs declared not duplicates (0 already were)" in result.stdout
    assert _report(cli) == [["a/report.txt", "b/report.txt", "c/report-v2.txt"]]
    # pairs leave them out too, and export --unique keeps both
    pairs = [json.loads(line) for line in cli("pairs").stdout.splitlines()]
    assert not any("zh" in p["a"] and "zh" in p["b"] for p in pairs)
    exported = [json.loads(line)["key"] for line in cli("export", "--unique", "--format", "jsonl").stdout.splitlines()]
    assert str(archive / "zh/a.txt") in exported and str(archive / "zh/b.txt") in exported
    # clean acts on neither of them; the files' bytes are as they were
    before = file_hashes(archive)
    out = tmp_path / "out"
    result = cli("clean", "--action", "move", "--to", str(out), "--yes")
    assert result.exit_code == 0, result.output
    after = file_hashes(archive)
    assert after["zh/a.txt"] == before["zh/a.txt"] and after["zh/b.txt"] == before["zh/b.txt"]
    assert sorted(after) == ["a/report.txt", "weather.txt", "zh/a.txt", "zh/b.txt"]
    moved = {str(p.relative_to(out)).rsplit("archive/", 1)[-1]: hashlib.sha256(p.read_bytes()).hexdigest()
             for p in out.rglob("*") if p.is_file()}
    assert moved == {"b/report.txt": before["b/report.txt"], "c/report-v2.txt": before["c/report-v2.txt"]}


def test_listing_json_and_unignore(cli, archive):
    a, b = str(archive / "c/report-v2.txt"), str(archive / "a/report.txt")
    assert cli("ignore", a, b).exit_code == 0
    assert cli("ignore", b, a).stdout.startswith("0 pairs declared not duplicates (1 already were)")
    listed = json.loads(cli("ignored", "--format", "json").stdout)
    assert [(p["a"], p["b"], p["in_store"]) for p in listed] == [(b, a, True)]
    assert listed[0]["created_at"].endswith("Z")
    assert a in cli("ignored").stdout
    # the edited report is a near copy of a/report.txt only through that pair: it leaves the group, and the
    # exact copy b/report.txt (same text as a/) goes with a/, so the edit is apart from both
    assert ["a/report.txt", "b/report.txt"] in _report(cli)
    assert not any("c/report-v2.txt" in g for g in _report(cli))
    result = cli("unignore", a, b)
    assert result.exit_code == 0 and "1 pairs are no longer ignored" in result.stdout
    assert json.loads(cli("ignored", "--format", "json").stdout) == []
    assert ["a/report.txt", "b/report.txt", "c/report-v2.txt"] in _report(cli)


def test_bad_input_is_one_line(cli, archive):
    for args, message in [
        (("ignore", str(archive / "a/report.txt")), "at least two different documents"),
        (("ignore", str(archive / "a/report.txt"), str(archive / "nope.txt")), "is not a document in the database"),
        (("ignore", str(archive / "a/report.txt"), str(archive / "b/report.txt")), "the same text"),
    ]:
        result = cli(*args)
        assert result.exit_code == 1, result.output
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert json.loads(cli("ignored", "--format", "json").stdout) == []


def test_library_ignore_and_related_view(archive, db_path):
    a, b, c = (str(archive / n) for n in ("a/report.txt", "b/report.txt", "c/report-v2.txt"))
    with dedupdb.Database.open(db_path) as db:
        outcome = db.ignore([a, b, c])  # a group: its exact copies cannot be told apart, the rest can
        assert (outcome.added, outcome.already, outcome.same_text) == (2, 0, [(a, b)])
        assert [(p.a, p.b) for p in db.ignored()] == [(a, c), (b, c)]
        for related in (False, True):
            groups = [sorted(m.key for m in g.members) for g in db.clusters(related=related)]
            assert [a, b] in groups and not any(c in g for g in groups)
        assert not any({p.a, p.b} == {a, c} for p in db.pairs())
        # the declaration is about the texts: b holds a's text, so (b, c) still keeps c apart from both
        assert db.unignore([a, c]) == 1
        assert not any(c in [m.key for m in g.members] for g in db.clusters())
        db.forget([c])  # a forgotten document's declaration stays, and says it is not stored
        assert [(p.a, p.b, p.in_store) for p in db.ignored()] == [(b, c, False)]
        assert db.unignore([b, c]) == 1 and db.ignored() == []


def test_a_plan_naming_an_ignored_pair_is_refused(cli, archive, tmp_path):
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(cli("clean", "--action", "trash", "--format", "json").stdout)
    assert cli("ignore", str(archive / "zh/a.txt"), str(archive / "zh/b.txt")).exit_code == 0
    before = file_hashes(archive)
    result = cli("clean", "--plan", str(plan_file), "--yes", "--format", "json")
    assert result.exit_code == 1
    refused = json.loads(result.stdout)["outcome"]["refused"]
    assert [r["reason"] for r in refused if "zh/" in r["path"]] == [
        "declared not a duplicate of the copy to keep ('dedupdb unignore' takes that back)"
    ]
    after = file_hashes(archive)
    assert after["zh/a.txt"] == before["zh/a.txt"] and after["zh/b.txt"] == before["zh/b.txt"]
