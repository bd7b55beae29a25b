"""--format json on every command that lists or acts, with the field names docs/commands.md's "For scripts" lists."""

from __future__ import annotations

import json
import os

import pytest

from .conftest import ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, write


def _json(result, status: int = 0):
    assert result.exit_code == status, result.output
    return json.loads(result.stdout)


@pytest.fixture
def archive(tmp_path, cli):
    root = tmp_path / "archive"
    for i, (name, text) in enumerate(
        [("2021/report.txt", ENGLISH), ("backup/report.txt", ENGLISH), ("drafts/report-v2.txt", ENGLISH_EDITED),
         ("weather.txt", ENGLISH_OTHER)]
    ):
        path = write(root / name, text)
        os.utime(path, ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
    assert cli("add", str(root)).exit_code == 0
    return root


def test_init_json(cli, db_path):
    data = _json(cli("init", "--threshold", "0.7", "--format", "json"))
    assert set(data) == {"database", "settings", "candidate_curves"}
    assert data["database"] == str(db_path) and data["settings"]["threshold"] == 0.7
    mine = [c for c in data["candidate_curves"] if c["this_store"]]
    assert len(mine) == 1 and set(mine[0]) == {"preset", "scheme", "probability", "at_threshold", "this_store"}


def test_reindex_json(cli, archive):
    data = _json(cli("reindex", "--threshold", "0.6", "--format", "json"))
    assert data == {"threshold": 0.6, "scheme": data["scheme"]} and "bands" in data["scheme"]
    data = _json(cli("reindex", "--from-sources", "--format", "json"))
    assert data["updated"] == 4 and data["forgotten_paths"] == []


def test_rm_json(cli, archive):
    data = _json(cli("rm", str(archive / "weather.txt"), "--format", "json"))
    assert data == {"forgotten": 1, "unmatched": []}
    data = _json(cli("rm", str(archive / "weather.txt"), "nothing-here", "--format", "json"), status=1)
    assert data == {"forgotten": 0, "unmatched": [str(archive / "weather.txt"), "nothing-here"]}


def test_prune_json(cli, archive):
    (archive / "weather.txt").unlink()
    data = _json(cli("prune", "--format", "json"))
    assert data == {"pruned": 1, "paths": [str(archive / "weather.txt")]}
    assert _json(cli("prune", "--format", "json")) == {"pruned": 0, "paths": []}


def test_plan_file_carried_out_and_undone_in_json(cli, archive, tmp_path):
    """The recipe of docs/commands.md (For scripts): write the plan, review it, carry it out, undo it; every step read as JSON."""
    away = tmp_path / "away"
    plan = _json(cli("clean", "--action", "move", "--to", str(away), "--format", "json"))
    assert set(plan) == {"format", "database", "action", "to", "keep_rule", "include_templates",
                         "reclaimable_bytes", "steps", "passed_over"}
    assert [os.path.relpath(s["act_on"]["path"], archive) for s in plan["steps"]] == ["backup/report.txt",
                                                                                       "drafts/report-v2.txt"]
    plan["steps"] = plan["steps"][:1]  # reviewed: only the exact copy goes
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    done = _json(cli("clean", "--plan", str(plan_file), "--yes", "--format", "json"))
    assert set(done) == {"plan", "outcome"}
    assert set(done["outcome"]) == {"batch", "done", "skipped", "failed", "refused"}
    assert done["outcome"]["done"] == [str(archive / "backup/report.txt")]
    assert not (archive / "backup/report.txt").exists()

    journal = _json(cli("journal", "--format", "json"))
    assert journal[0]["batch"] == done["outcome"]["batch"] and journal[0]["entries"] == {"done": 1}
    undone = _json(cli("undo", "--format", "json"))
    assert undone == {"batch": done["outcome"]["batch"], "restored": [str(archive / "backup/report.txt")],
                      "edited_since": [], "cannot_restore": []}
    assert (archive / "backup/report.txt").read_text() == ENGLISH


def test_undo_json_names_what_cannot_be_restored(cli, archive, isolated_dirs):
    done = _json(cli("clean", "--action", "trash", "--exact-only", "--yes", "--format", "json"))
    assert len(done["outcome"]["done"]) == 1
    for item in (isolated_dirs / "data" / "Trash" / "files").iterdir():
        item.unlink()  # the trash was emptied since
    result = cli("undo", "--format", "json")
    undone = json.loads(result.stdout)
    assert result.exit_code == 1
    assert undone["restored"] == [] and len(undone["cannot_restore"]) == 1
    assert undone["cannot_restore"][0]["reason"].startswith("no longer in the trash")


def test_pairs_lines_are_json_for_jq(cli, archive):
    lines = cli("pairs").stdout.splitlines()
    pairs = [json.loads(line) for line in lines]
    assert pairs and all(set(p) == {"a", "b", "jaccard", "hamming", "exact", "containment", "kind"} for p in pairs)


@pytest.mark.parametrize("command", ["init", "undo", "rm", "prune", "reindex", "add", "report", "query", "clean",
                                     "stats", "check", "journal", "diff"])
def test_every_command_that_lists_or_acts_offers_json(runner, command):
    from dedupdb.cli.commands import app

    result = runner.invoke(app, [command, "--help"])
    assert result.exit_code == 0 and "--format" in result.stdout


def _documented_fields() -> dict[str, set[str]]:
    """The first field list of each row of the table of JSON outputs in docs/commands.md, by command."""
    import re
    from pathlib import Path

    readme = (Path(__file__).parent.parent / "docs" / "commands.md").read_text("utf-8")
    section = readme.split("## For scripts", 1)[1].split("```", 1)[0]
    out = {}
    for row in section.splitlines():
        cells = row.split(" | ")
        if len(cells) == 2 and cells[0].startswith("| `"):
            fields = set(re.search(r"`([^`]*)`", cells[1]).group(1).split())
            for command in re.findall(r"`([^`]*)`", cells[0]):
                out[command] = fields
    return out


def test_readme_names_the_fields_each_command_writes(cli, archive, tmp_path):
    documented = _documented_fields()
    (archive / "weather.txt").unlink()
    outputs = {
        "add": _json(cli("add", str(archive), "--format", "json")),
        "report": _json(cli("report", "--format", "json"))[0],
        "query": _json(cli("query", ENGLISH, "--format", "json"))[0],
        "pairs": json.loads(cli("pairs").stdout.splitlines()[0]),
        "clean": _json(cli("clean", "--format", "json")),
        "stats": _json(cli("stats", "--format", "json")),
        "check": _json(cli("check", "--format", "json")),
        "diff": _json(cli("diff", str(archive / "2021/report.txt"), str(archive / "drafts/report-v2.txt"),
                          "--format", "json")),
        "rm": _json(cli("rm", str(archive / "drafts"), "--format", "json")),
        "prune": _json(cli("prune", "--format", "json")),
        "reindex": _json(cli("reindex", "--format", "json")),
        "init": _json(cli("init", "--format", "json")),
    }
    _json(cli("clean", "--action", "move", "--to", str(tmp_path / "away"), "--yes", "--format", "json"))
    outputs["journal"] = _json(cli("journal", "--format", "json"))[0]
    outputs["undo"] = _json(cli("undo", "--format", "json"))
    for command, data in outputs.items():
        assert documented[command] == set(data), command


def test_plan_recipe_with_a_relative_database_path(runner, archive, tmp_path, db_path, monkeypatch):
    from dedupdb.cli.commands import app

    monkeypatch.chdir(db_path.parent)
    relative = ["--db", db_path.name]
    result = runner.invoke(app, [*relative, "clean", "--action", "move", "--to", str(tmp_path / "away"),
                                 "--exact-only", "--format", "json"])
    plan = _json(result)
    assert plan["database"] == str(db_path)  # absolute: the plan may be carried out from another folder
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    done = _json(runner.invoke(app, [*relative, "clean", "--plan", str(tmp_path / "plan.json"), "--yes",
                                     "--format", "json"]))
    assert done["outcome"]["done"] == [str(archive / "backup/report.txt")]


def test_carrying_out_an_empty_plan_still_writes_json(cli, archive, tmp_path):
    plan = _json(cli("clean", "--action", "trash", "--format", "json"))
    plan["steps"] = []
    (tmp_path / "empty.json").write_text(json.dumps(plan))
    done = _json(cli("clean", "--plan", str(tmp_path / "empty.json"), "--yes", "--format", "json"))
    assert done["plan"]["steps"] == [] and done["outcome"] == {"batch": None, "done": [], "skipped": [], "failed": [],
                                                          "refused": []}
