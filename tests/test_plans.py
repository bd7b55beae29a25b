"""A plan file is a request, not an authority: however it was edited, carrying it out re-checks every step
against the database, refuses what the database does not allow, and never acts on the last copy of a text.
Every test hashes every file before and after."""

from __future__ import annotations

import copy
import hashlib
import json
import os
from pathlib import Path

import pytest

import dedupdb
import dedupdb.ops.cleanup as cleanup

from .conftest import CHINESE, CHINESE_EDITED, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, write


def _hashes(root: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.fixture
def archive(tmp_path, cli) -> Path:
    root = tmp_path / "archive"
    files = {
        "a/report.txt": ENGLISH,
        "b/report.txt": ENGLISH,
        "c/report-v2.txt": ENGLISH_EDITED,
        "zh/a.txt": CHINESE,
        "zh/b.txt": CHINESE_EDITED,
        "weather.txt": ENGLISH_OTHER,
    }
    for i, (name, text) in enumerate(files.items()):
        path = write(root / name, text)
        os.utime(path, ns=(10**18 + i * 10**9,) * 2)
    assert cli("add", str(root)).exit_code == 0
    posts = write(root / "posts" / "posts.txt", f"{ENGLISH}\n{ENGLISH}\n")  # a record file: one post a line
    assert cli("add", str(posts), "--lines").exit_code == 0
    (root / "picture.png").write_bytes(b"\x89PNG\r\n\x1a\n" + b"\0" * 64)  # never indexed
    return root


def _plan(cli, tmp_path: Path) -> dict:
    result = cli("clean", "--action", "move", "--to", str(tmp_path / "out"), "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _state(path: Path, digest_of: Path | None = None) -> dict:
    from dedupdb.text.hashing import bytes_hash

    st = path.stat()
    return {"path": str(path), "size": st.st_size, "mtime_ns": st.st_mtime_ns,
            "digest": bytes_hash((digest_of or path).read_bytes())}


def _step(keep: Path, act_on: Path, similarity: float = 1.0, exact: bool = True) -> dict:
    return {"cluster": 1, "group": 1, "keep": _state(keep), "act_on": _state(act_on), "similarity": similarity,
            "exact": exact, "bytes": act_on.stat().st_size, "reason": "edited by hand"}


def _carry_out(cli, tmp_path: Path, plan: dict):
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    return cli("clean", "--plan", str(tmp_path / "plan.json"), "--yes", "--format", "json")


def _outcome(result) -> dict:
    return json.loads(result.stdout)["outcome"]


def test_a_step_acting_on_the_kept_file_is_refused(cli, archive, tmp_path):
    plan = _plan(cli, tmp_path)
    before = _hashes(archive)
    for step in plan["steps"]:
        step["act_on"] = copy.deepcopy(step["keep"])  # the table would read keep = move
    result = _carry_out(cli, tmp_path, plan)
    assert result.exit_code == 1
    refused = _outcome(result)["refused"]
    assert len(refused) == len(plan["steps"]) and all("is the copy to keep" in r["reason"] for r in refused)
    assert _hashes(archive) == before and not (tmp_path / "out").exists()


def test_two_steps_keeping_each_other_leave_one_copy(cli, archive, tmp_path):
    a, b = archive / "a/report.txt", archive / "b/report.txt"
    plan = _plan(cli, tmp_path)
    plan["steps"] = [_step(a, b), _step(b, a)]
    result = _carry_out(cli, tmp_path, plan)
    assert result.exit_code == 1
    outcome = _outcome(result)
    assert outcome["done"] == [str(b)]
    assert outcome["refused"] == [{"path": str(a), "reason": "it is the copy another step of the plan keeps"}]
    assert a.read_text() == ENGLISH  # the last copy of the text stays in the archive


def test_a_chain_never_acts_on_a_kept_file(cli, archive, tmp_path):
    a, b, c = archive / "a/report.txt", archive / "b/report.txt", archive / "c/report-v2.txt"
    plan = _plan(cli, tmp_path)
    # b keeps c's place, then a would keep b: b may go only if nothing relies on it
    similarity = next(s["similarity"] for s in plan["steps"] if s["act_on"]["path"] == str(c))
    plan["steps"] = [_step(b, c, similarity, False), _step(a, b)]
    result = _carry_out(cli, tmp_path, plan)
    outcome = _outcome(result)
    assert outcome["done"] == [str(c)]
    assert outcome["refused"][0]["path"] == str(b) and "another step of the plan keeps" in outcome["refused"][0]["reason"]
    assert a.exists() and b.exists() and not c.exists()


def test_a_file_not_in_the_database_is_refused(cli, archive, tmp_path):
    png = archive / "picture.png"
    plan = _plan(cli, tmp_path)
    plan["steps"] = [_step(archive / "a/report.txt", png)]  # labelled exact by hand
    before = _hashes(archive)
    result = _carry_out(cli, tmp_path, plan)
    assert result.exit_code == 1
    assert _outcome(result)["refused"] == [{"path": str(png), "reason": "not a file in the database"}]
    assert _hashes(archive) == before
    plan["steps"] = [_step(png, archive / "b/report.txt")]  # nor can it be what is kept
    result = _carry_out(cli, tmp_path, plan)
    assert "is not a file in the database" in _outcome(result)["refused"][0]["reason"]
    assert _hashes(archive) == before


def test_claims_the_database_does_not_back_are_refused(cli, archive, tmp_path):
    report, edited, weather = archive / "a/report.txt", archive / "c/report-v2.txt", archive / "weather.txt"
    plan = _plan(cli, tmp_path)
    real = next(s["similarity"] for s in plan["steps"] if s["act_on"]["path"] == str(edited))
    assert 0.5 < real < 0.98  # a stored pair: the refusals below are about what the plan claims of it
    before = _hashes(archive)
    cases = [
        (_step(report, edited, 1.0, True), "not the same text"),               # called exact, but edited
        (_step(report, weather, 0.9, False), "not a duplicate of the copy to keep"),  # unrelated texts
        (_step(report, edited, 0.99, False), "as the plan says"),               # likeness overstated
        (_step(report, archive / "posts" / "posts.txt"), "a record file"),
    ]
    for step, reason in cases:
        plan["steps"] = [step]
        result = _carry_out(cli, tmp_path, plan)
        assert result.exit_code == 1, result.output
        refused = _outcome(result)["refused"]
        assert len(refused) == 1 and reason in refused[0]["reason"], refused
    assert _hashes(archive) == before


def test_edited_plan_through_the_library(db_path, archive, tmp_path):
    a, b = archive / "a/report.txt", archive / "b/report.txt"
    with dedupdb.open(db_path) as db:
        plan = cleanup.make_plan(db, action="trash")
        steps = [s for s in plan.steps if s.remove.path in (str(a), str(b))]
        assert len(steps) == 1
        step = steps[0]
        swapped = cleanup.Step(step.cluster, step.group, step.remove, step.keep, 1.0, True, "by hand")
        plan.steps = [step, swapped, cleanup.Step(1, 1, step.keep, step.keep, 1.0, True, "by hand")]
        outcome = cleanup.carry_out(db, plan)
    assert outcome.done == [step.remove.path]
    assert [why for _, why in outcome.refused] == [
        "it is the copy another step of the plan keeps", "the file to act on is the copy to keep"]
    assert Path(step.keep.path).read_text() == ENGLISH


def test_a_fresh_plan_is_carried_out_whole(cli, archive, tmp_path):
    """The checks refuse nothing that 'clean' itself plans."""
    plan = _plan(cli, tmp_path)
    assert plan["steps"]
    result = _carry_out(cli, tmp_path, plan)
    assert result.exit_code == 0, result.output
    outcome = _outcome(result)
    assert not outcome["refused"] and len(outcome["done"]) == len(plan["steps"])


def test_without_yes_clean_never_acts_nor_asks(cli, archive, tmp_path):
    before = _hashes(archive)
    result = cli("clean", "--action", "move", "--to", str(tmp_path / "out"), input="y\n")
    assert result.exit_code == 0 and "Dry run" in result.stdout and "[y/N]" not in result.output
    assert _hashes(archive) == before


def test_undo_of_a_move_removes_the_folders_it_made(cli, archive, tmp_path):
    out = tmp_path / "out"
    before = _hashes(archive)
    assert cli("clean", "--action", "move", "--to", str(out), "--yes").exit_code == 0
    assert any(out.rglob("*.txt"))
    keep = out / "mine.txt"  # something of the user's in the target folder stays, and so does the folder
    keep.write_text("mine")
    result = cli("undo")
    assert result.exit_code == 0, result.output
    assert _hashes(archive) == before
    assert sorted(p.name for p in out.rglob("*")) == ["mine.txt"]
    keep.unlink()
    assert cli("clean", "--action", "move", "--to", str(out), "--yes").exit_code == 0
    assert cli("undo").exit_code == 0
    assert not out.exists()  # made by the move, empty after the undo
