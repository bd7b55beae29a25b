"""Actions on files: nothing the user owns is lost, every decision rests on a likeness to the file kept, and
'report', 'clean', 'export --unique' and 'stats' agree on what is kept."""

from __future__ import annotations

import codecs
import hashlib
import json
import os
from pathlib import Path

import pytest

import dedupdb
import dedupdb.ops.actions as actions
import dedupdb.ops.cleanup as cleanup
from dedupdb.ops.fileops import NotIdentical, replace_with_link

from .conftest import CHINESE, ENGLISH, ENGLISH_OTHER, write

LINES = ENGLISH.replace(", ", ",\n")  # the same report over several lines


def _hashes(*roots: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for root in roots if root.exists() for p in sorted(root.rglob("*")) if p.is_file()
    }


@pytest.fixture
def lookalikes(tmp_path) -> Path:
    """Byte-for-byte copies beside copies that are equal only once normalized: upper case, CRLF line ends,
    UTF-16, GB18030. Originals are the oldest files."""
    root = tmp_path / "lookalikes"
    files = [
        ("orig.txt", LINES.encode()),
        ("zh/orig.txt", CHINESE.encode()),
        ("copy.txt", LINES.encode()),
        ("upper.txt", LINES.upper().encode()),
        ("crlf.txt", LINES.replace("\n", "\r\n").encode()),
        ("utf16.txt", codecs.BOM_UTF16_LE + LINES.encode("utf-16-le")),
        ("zh/copy.txt", CHINESE.encode()),
        ("zh/gb18030.txt", CHINESE.encode("gb18030")),
        ("weather.txt", ENGLISH_OTHER.encode()),
    ]
    for i, (name, data) in enumerate(files):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        os.utime(path, ns=(10**18 + i * 10**9,) * 2)
    return root


@pytest.mark.parametrize("action", ["move", "trash", "hardlink"])
def test_every_byte_survives_clean_and_undo(cli, lookalikes, tmp_path, isolated_dirs, action):
    before = _hashes(lookalikes)
    assert cli("add", str(lookalikes)).exit_code == 0
    extra = ["--to", str(tmp_path / "out")] if action == "move" else []
    result = cli("clean", "--action", action, "--keep", "oldest", "--yes", *extra)
    assert result.exit_code == 0, result.output
    if action == "hardlink":
        # Only the byte-identical copies became links; the normalized-equal ones keep their own bytes.
        assert os.path.samefile(lookalikes / "orig.txt", lookalikes / "copy.txt")
        assert os.path.samefile(lookalikes / "zh/orig.txt", lookalikes / "zh/copy.txt")
        assert _hashes(lookalikes) == before
        for name in ("upper.txt", "crlf.txt", "utf16.txt", "zh/gb18030.txt"):
            assert not os.path.samefile(lookalikes / "orig.txt", lookalikes / name)
            assert (lookalikes / name).stat().st_nlink == 1
    else:
        assert "6 done" in result.stdout
    if action == "trash":  # the files wait in the trash, each with its .trashinfo naming where it was
        trash = isolated_dirs / "data" / "Trash"
        assert sorted(_hashes(lookalikes, trash / "files").values()) == sorted(before.values())
        assert len(list((trash / "info").iterdir())) == 6
    undone = cli("undo")
    assert undone.exit_code == 0, undone.output
    assert "6 restored" in undone.stdout or action == "hardlink"
    assert _hashes(lookalikes) == before
    assert all((lookalikes / n).stat().st_nlink == 1 for n in ("copy.txt", "zh/copy.txt"))
    if action == "trash":  # taken out of the trash, info files too
        assert not list((trash / "files").iterdir()) and not list((trash / "info").iterdir())


def test_hardlink_plan_leaves_normalized_copies_with_reasons(cli, lookalikes):
    cli("add", str(lookalikes))
    plan = json.loads(cli("clean", "--action", "hardlink", "--format", "json").stdout)
    acted = sorted(os.path.relpath(s["act_on"]["path"], lookalikes) for s in plan["steps"])
    assert acted == ["copy.txt", "zh/copy.txt"]
    reasons = {os.path.relpath(p["path"], lookalikes): p["reason"] for p in plan["passed_over"]}
    for name in ("upper.txt", "crlf.txt", "utf16.txt", "zh/gb18030.txt"):
        assert "not the same bytes" in reasons[name]


def test_link_is_made_only_between_identical_bytes(tmp_path):
    kept, other = write(tmp_path / "kept.txt", "same text"), write(tmp_path / "other.txt", "SAME TEXT")
    with pytest.raises(NotIdentical):
        replace_with_link(other, kept)
    assert other.read_text() == "SAME TEXT" and other.stat().st_nlink == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.txt", "other.txt"]  # no temporary link left


def test_file_changed_at_the_moment_of_linking_is_left_alone(cli, db_path, lookalikes, monkeypatch):
    cli("add", str(lookalikes))
    real_link = os.link

    def edit_then_link(src, dst, *args, **kwargs):
        # Someone writes to the copy between the plan's check and the link (same size, other bytes).
        copy = lookalikes / "copy.txt"
        copy.write_bytes(copy.read_bytes().swapcase())
        return real_link(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "link", edit_then_link)
    with dedupdb.open(db_path) as db:
        plan = cleanup.make_plan(db, keep="oldest", action="hardlink")
        plan.steps = [s for s in plan.steps if s.remove.path.endswith("/copy.txt") and "/zh/" not in s.remove.path]
        outcome = cleanup.carry_out(db, plan)
    assert outcome.done == [] and "not byte-identical" in outcome.skipped[0][1]
    assert (lookalikes / "copy.txt").read_bytes() == LINES.encode().swapcase()
    assert (lookalikes / "copy.txt").stat().st_nlink == 1


def test_undo_of_a_link_whose_kept_file_was_edited_says_so(cli, lookalikes):
    cli("add", str(lookalikes))
    assert cli("clean", "--action", "hardlink", "--yes").exit_code == 0
    with open(lookalikes / "orig.txt", "a") as f:  # edits both names of the linked file
        f.write("\nan added line")
    output = " ".join(cli("undo").output.split())  # rich folds long lines on stderr
    assert "cannot restore" in output and "was edited since: the original bytes are gone" in output
    assert os.path.samefile(lookalikes / "orig.txt", lookalikes / "copy.txt")  # left as it was


def test_undo_of_a_move_reports_a_file_edited_while_away(cli, lookalikes, tmp_path):
    cli("add", str(lookalikes))
    out = tmp_path / "out"
    assert cli("clean", "--action", "move", "--to", str(out), "--exact-only", "--yes").exit_code == 0
    moved = out / str(lookalikes / "copy.txt").lstrip("/")
    moved.write_text("edited in the dupes folder")
    result = cli("undo")
    assert result.exit_code == 0 and "edited since the cleanup" in " ".join(result.output.split())
    assert (lookalikes / "copy.txt").read_text() == "edited in the dupes folder"


def test_interrupted_undo_finishes_on_rerun(cli, lookalikes, tmp_path, monkeypatch):
    before = _hashes(lookalikes)
    cli("add", str(lookalikes))
    assert cli("clean", "--action", "move", "--to", str(tmp_path / "out"), "--yes").exit_code == 0
    real_move = actions.safe_move
    calls = {"n": 0}

    def stop_on_third(source, destination):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt
        return real_move(source, destination)

    monkeypatch.setattr(actions, "safe_move", stop_on_third)
    assert cli("undo").exit_code == 130
    monkeypatch.setattr(actions, "safe_move", real_move)
    result = cli("undo")
    assert result.exit_code == 0 and "cannot be restored" in result.stdout
    assert "0 cannot" in result.stdout
    assert _hashes(lookalikes) == before


def test_existing_hard_links_are_not_reclaimable(cli, tmp_path):
    root = tmp_path / "links"
    write(root / "a.txt", ENGLISH)
    os.link(root / "a.txt", root / "b.txt")
    write(root / "c.txt", ENGLISH)
    for i, name in enumerate(("a.txt", "c.txt")):
        os.utime(root / name, ns=(10**18 + i * 10**9,) * 2)
    cli("add", str(root))
    [group] = json.loads(cli("report", "--format", "json").stdout)
    size = len(ENGLISH)
    assert group["reclaimable_bytes"] == size  # c.txt only: b.txt is a second name of a.txt
    linked = [m for m in group["members"] if m["hard_link_of"]]
    assert len(linked) == 1 and linked[0]["hard_link_of"].endswith("a.txt")
    assert json.loads(cli("stats", "--format", "json").stdout)["reclaimable_bytes"] == size
    plan = json.loads(cli("clean", "--action", "move", "--to", str(tmp_path / "out"), "--format", "json").stdout)
    assert [s["act_on"]["path"] for s in plan["steps"]] == [str(root / "c.txt")]
    assert any("already a hard link" in p["reason"] for p in plan["passed_over"])


def _chain(root: Path, length: int = 8) -> list[Path]:
    """Texts each two words further from the first: neighbours are alike, the ends are not."""
    words = ENGLISH.split()
    paths = []
    for k in range(length):
        text = " ".join(f"changed{i}" if i < 2 * k else w for i, w in enumerate(words))
        path = write(root / f"t{k}.txt", text)
        os.utime(path, ns=(10**18 + k * 10**9,) * 2)
        paths.append(path)
    return paths


def test_chained_cluster_is_cut_into_groups_justified_by_the_kept_file(cli, db_path, tmp_path):
    root = tmp_path / "chain"
    _chain(root)
    cli("add", str(root))
    with dedupdb.open(db_path) as db:
        threshold = db.settings.threshold
        [component] = db.clusters(related=True)
        assert len(component.members) == 8
        assert min(m.similarity for m in component.members) < threshold  # the chain's ends are unlike
        groups = db.clusters()
        assert len(groups) >= 2
        for group in groups:
            for m in group.members[1:]:
                assert m.exact or m.similarity >= threshold
                # the score shown is the real similarity to the kept file
                assert abs(db.similarity(_text(group.members[0].path), _text(m.path)) - m.similarity) < 1e-3
        reclaimable = sum(g.reclaimable_bytes for g in groups)
        assert db.stats()["reclaimable_bytes"] == reclaimable < component.reclaimable_bytes
        # export --unique drops nothing that is unlike every document it keeps
        kept = {r.key for r in db.export(unique=True, keep="first")}
        for key in {m.key for m in component.members} - kept:
            assert any(db.similarity(_text(key), _text(k)) >= threshold for k in kept)
    related = json.loads(cli("report", "--related", "--format", "json").stdout)
    assert len(related) == 1 and len(related[0]["members"]) == 8


def _text(path: str) -> str:
    return Path(path).read_text()


@pytest.mark.parametrize("rule", ["oldest", "newest", "first", "last", "longest", "shortest", "largest", "smallest"])
def test_report_and_clean_keep_the_same_file(cli, tmp_path, rule):
    root = tmp_path / "mixed"
    _chain(root / "chain", 5)
    for i, name in enumerate(("x/report.txt", "y/report.txt", "z/report (1).txt")):
        os.utime(write(root / name, ENGLISH), ns=(10**18 - i * 10**9,) * 2)
    write(root / "weather.txt", ENGLISH_OTHER)
    cli("add", str(root))
    args = ["--keep", rule] if rule != "oldest" else []  # oldest is both commands' default
    groups = json.loads(cli("report", "--format", "json", *args).stdout)
    plan = json.loads(cli("clean", "--action", "move", "--to", str(tmp_path / "out"), "--format", "json", *args).stdout)
    reported = {(g["cluster"], g["group"]): g["members"][0]["path"] for g in groups}
    planned = {(s["cluster"], s["group"]): s["keep"]["path"] for s in plan["steps"]}
    assert planned and planned == reported
    acted = {s["act_on"]["path"] for s in plan["steps"]}
    members = {m["path"] for g in groups for m in g["members"][1:]}
    assert acted == members


def test_reviewed_plan_is_carried_out_and_skips_what_changed(cli, db_path, lookalikes, tmp_path):
    cli("add", str(lookalikes))
    out = tmp_path / "out"
    written = cli("clean", "--action", "move", "--to", str(out), "--format", "json")
    plan = json.loads(written.stdout)
    assert plan["action"] == "move" and plan["to"] == str(out)
    step = plan["steps"][0]
    assert {"keep", "act_on", "similarity", "bytes", "reason", "exact", "cluster"} <= set(step)
    assert {"path", "size", "mtime_ns", "digest"} <= set(step["act_on"])
    assert all(s["reason"] for s in plan["steps"])
    # The reviewer keeps three steps; one of those files is then edited (same size): it must be skipped.
    plan["steps"] = [s for s in plan["steps"] if s["act_on"]["path"].endswith(("copy.txt", "upper.txt"))]
    (tmp_path / "plan.json").write_text(json.dumps(plan))
    upper = lookalikes / "upper.txt"
    upper.write_bytes(upper.read_bytes().lower())
    dry = cli("clean", "--plan", str(tmp_path / "plan.json"))
    assert "Dry run" in dry.stdout and not out.exists()
    result = cli("clean", "--plan", str(tmp_path / "plan.json"), "--yes")
    assert result.exit_code == 0, result.output
    assert "upper.txt: changed since" in result.output and "2 done, 1 skipped" in result.stdout
    assert upper.exists() and not (lookalikes / "copy.txt").exists() and not (lookalikes / "zh/copy.txt").exists()
    assert cli("undo").exit_code == 0 and (lookalikes / "copy.txt").read_bytes() == LINES.encode()


def test_plan_errors_are_one_line(cli, tmp_path, lookalikes, runner):
    from dedupdb.cli.commands import app

    cli("add", str(lookalikes))
    bad = tmp_path / "bad.json"
    for content, message in (("{not json", "is not JSON"), ('{"format": 99}', "cannot be read"),
                             ("[" * 100_000 + "]" * 100_000, "is not JSON")):
        bad.write_text(content)
        result = cli("clean", "--plan", str(bad), "--yes")
        assert result.exit_code == 1 and message in result.output and "Traceback" not in result.output
    plan = cli("clean", "--action", "move", "--to", str(tmp_path / "out"), "--format", "json").stdout
    before = {p: p.read_bytes() for p in lookalikes.rglob("*") if p.is_file()}
    # Hand edits the plan's reader refuses with its reason, before any file is touched: an action that is none,
    # a path that is not absolute (or not a path), a folder to move into that is not one.
    for edit in (lambda p: p.update(action="delete"), lambda p: p.update(action=None),
                 lambda p: p["steps"][0]["act_on"].update(path="copy.txt"), lambda p: p["steps"][0]["keep"].update(path=""),
                 lambda p: p["steps"][0]["act_on"].update(path=5), lambda p: p.update(to=5), lambda p: p.update(to="out")):
        edited = json.loads(plan)
        edit(edited)
        bad.write_text(json.dumps(edited))
        result = cli("clean", "--plan", str(bad), "--yes")
        assert result.exit_code == 1 and "the plan cannot be read" in result.output, result.output
        assert "Traceback" not in result.output
    assert {p: p.read_bytes() for p in lookalikes.rglob("*") if p.is_file()} == before
    bad.write_text(plan)
    other = tmp_path / "other.db"
    runner.invoke(app, ["add", str(lookalikes / "weather.txt"), "--db", str(other)])
    result = runner.invoke(app, ["clean", "--plan", str(bad), "--yes", "--db", str(other)])
    assert result.exit_code == 1 and "the plan was made for" in result.output
    assert (lookalikes / "copy.txt").exists()
