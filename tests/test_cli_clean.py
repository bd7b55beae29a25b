from __future__ import annotations

import json
import os

import pytest

import dedupdb
import dedupdb.ops.actions as actions
import dedupdb.ops.cleanup as cleanup

from .conftest import CHINESE, CHINESE_EDITED, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, write


@pytest.fixture
def archive(tmp_path, cli):
    """Three copies of a report (one older), an edited variant, a Chinese pair and a loner; indexed."""
    root = tmp_path / "archive"
    files = {
        "2021/report.txt": ENGLISH,
        "backup/report.txt": ENGLISH,
        "backup/old/report (1).txt": ENGLISH,
        "drafts/report-v2.txt": ENGLISH_EDITED,
        "zh/a.txt": CHINESE,
        "zh/b.txt": CHINESE_EDITED,
        "weather.txt": ENGLISH_OTHER,
    }
    for i, (name, text) in enumerate(sorted(files.items())):
        path = write(root / name, text)
        os.utime(path, ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
    assert cli("add", str(root)).exit_code == 0
    return root


def _snapshot(root):
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*")) if p.is_file()
    }


def test_dry_run_changes_nothing(cli, archive, tmp_path):
    before = _snapshot(archive)
    result = cli("clean", "--action", "move", "--to", str(tmp_path / "out"))
    assert result.exit_code == 0, result.output
    assert "Dry run" in result.stdout and "files to move" in result.stdout
    assert _snapshot(archive) == before and not (tmp_path / "out").exists()


def test_move_then_undo_restores_byte_for_byte(cli, archive, tmp_path):
    before = _snapshot(archive)
    out = tmp_path / "out"
    planned = cli("clean", "--action", "list", "--keep", "oldest").stdout.splitlines()
    result = cli("clean", "--action", "move", "--to", str(out), "--keep", "oldest", "--yes")
    assert result.exit_code == 0, result.output
    moved = sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())
    assert moved == sorted(p.lstrip("/") for p in planned)
    assert len(moved) == 4  # two copies and the variant of the report, one of the Chinese pair
    kept = set(_snapshot(archive))
    assert {"2021/report.txt", "weather.txt"} <= kept
    assert len([k for k in kept if k.startswith("zh/")]) == 1
    report = json.loads(cli("report", "--format", "json").stdout)
    assert report == []  # what was moved left the index

    journal = json.loads(cli("journal", "--format", "json").stdout)
    assert journal[0]["action"] == "move" and journal[0]["entries"] == {"done": 4}
    result = cli("undo")
    assert result.exit_code == 0 and "4 restored" in result.stdout
    assert _snapshot(archive) == before
    assert len(json.loads(cli("report", "--format", "json").stdout)) == 2
    assert cli("undo").exit_code == 1  # nothing left to undo


def test_prefer_under_and_filters(cli, archive):
    paths = cli("clean", "--prefer", str(archive / "backup"), "--keep", "newest", "--exact-only").stdout.splitlines()
    # the newest file under backup/ stays
    assert sorted(os.path.relpath(p, archive) for p in paths) == ["2021/report.txt", "backup/old/report (1).txt"]
    paths = cli("clean", "--under", str(archive / "zh"), "-0").stdout
    assert paths.endswith("\0") and paths.count("\0") == 1 and "/zh/" in paths
    paths = cli("clean", "--min-similarity", "0.99").stdout.splitlines()
    assert not any("report-v2" in p or "/zh/" in p for p in paths)


def test_edited_file_is_skipped_and_last_copy_kept(cli, archive, tmp_path):
    write(archive / "backup/report.txt", ENGLISH + " edited after indexing")
    os.utime(archive / "backup/report.txt", ns=(10**18 + 3 * 10**9, 10**18 + 3 * 10**9))
    result = cli("clean", "--action", "move", "--to", str(tmp_path / "out"), "--keep", "oldest", "--exact-only",
                 "--yes")
    assert "backup/report.txt: changed since it was indexed" in result.output
    assert (archive / "backup/report.txt").exists() and (archive / "2021/report.txt").exists()
    # the kept copy is never in the plan, whatever the rule
    for rule in ("newest", "oldest", "largest", "smallest", "longest", "shortest"):
        with _db(cli) as db:
            plan = cleanup.make_plan(db, keep=rule, action="move")
            clusters = {s.cluster for s in plan.steps}
            for c in db.clusters():
                if c.id in clusters:
                    acted = {s.remove.path for s in plan.steps if s.cluster == c.id}
                    assert len(acted) < len(c.members)


def _db(cli):
    import inspect

    return dedupdb.open(inspect.getclosurevars(cli).nonlocals["db_path"], create=False)


def test_interrupted_batch_is_consistent_and_undoable(cli, archive, tmp_path, monkeypatch):
    before = _snapshot(archive)
    real_move = actions.safe_move
    calls = {"n": 0}

    def failing_move(source, destination):
        calls["n"] += 1
        if calls["n"] == 3:
            raise KeyboardInterrupt  # e.g. Ctrl-C between two files
        return real_move(source, destination)

    monkeypatch.setattr(actions, "safe_move", failing_move)
    result = cli("clean", "--action", "move", "--to", str(tmp_path / "out"), "--yes")
    assert result.exit_code == 130
    journal = json.loads(cli("journal", "--format", "json").stdout)
    assert journal[0]["entries"] == {"done": 2, "planned": 2}
    # every file is in exactly one of its two places
    out_files = {str(p.relative_to(tmp_path / "out")) for p in (tmp_path / "out").rglob("*") if p.is_file()}
    for name in before:
        inside = (archive / name).exists()
        outside = str((archive / name).relative_to("/")) in out_files
        assert inside != outside or (inside and not outside)
    assert len(out_files) == 2
    monkeypatch.setattr(actions, "safe_move", real_move)
    result = cli("undo")
    assert result.exit_code == 0 and "2 restored" in result.stdout
    assert _snapshot(archive) == before


def test_failed_action_is_journaled(cli, archive, tmp_path):
    out = tmp_path / "out"
    target = out / str(archive / "backup/report.txt").lstrip("/")
    target.parent.mkdir(parents=True)
    target.write_text("already here")
    result = cli("clean", "--action", "move", "--to", str(out), "--keep", "oldest", "--exact-only", "--yes")
    assert result.exit_code == 1 and "destination exists" in result.output
    journal = json.loads(cli("journal", "--format", "json").stdout)
    assert journal[0]["entries"] == {"done": 1, "failed": 1}
    assert target.read_text() == "already here"


def test_hardlink_and_undo(cli, archive):
    result = cli("clean", "--action", "hardlink", "--keep", "oldest", "--yes")
    assert result.exit_code == 0, result.output
    kept = archive / "2021/report.txt"
    assert os.path.samefile(kept, archive / "backup/report.txt")
    assert not os.path.samefile(kept, archive / "drafts/report-v2.txt")  # not exact: left alone
    mtime = 10**18 + 1 * 10**9  # its modification time before it became a link
    assert cli("undo").exit_code == 0
    assert not os.path.samefile(kept, archive / "backup/report.txt")
    assert (archive / "backup/report.txt").read_text() == ENGLISH
    assert (archive / "backup/old/report (1).txt").stat().st_mtime_ns == mtime


def test_trash_and_honest_undo(cli, archive, isolated_dirs):
    result = cli("clean", "--action", "trash", "--under", str(archive / "zh"), "--yes")
    assert result.exit_code == 0, result.output
    assert len(list((archive / "zh").iterdir())) == 1
    trash = isolated_dirs / "data" / "Trash" / "files"
    assert len(list(trash.iterdir())) == 1
    before = (archive / "zh/b.txt").exists(), (archive / "zh/a.txt").exists()
    result = cli("undo")
    assert result.exit_code == 0 and "1 restored, 0 cannot" in result.stdout
    assert (archive / "zh/a.txt").read_text() == CHINESE and (archive / "zh/b.txt").read_text() == CHINESE_EDITED
    assert not list(trash.iterdir())
    assert before.count(False) == 1


def test_undo_finds_trashed_files_the_journal_did_not_place(cli, archive, isolated_dirs, monkeypatch):
    """A batch trashed before the journal recorded where each file went (an older dedupdb, or an interruption
    between trashing and writing the journal) is undone by finding each file by its original path and bytes."""
    from send2trash import send2trash

    with monkeypatch.context() as m:
        m.setattr(actions, "trash", lambda path: send2trash(str(path)))  # trashes without saying where
        assert cli("clean", "--action", "trash", "--under", str(archive / "zh"), "--yes").exit_code == 0
    gone = [p for p in ("zh/a.txt", "zh/b.txt") if not (archive / p).exists()]
    assert len(gone) == 1
    result = cli("undo")
    assert result.exit_code == 0 and "1 restored" in result.stdout, result.output
    assert (archive / gone[0]).exists()


@pytest.mark.parametrize("action", ["trash", "hardlink", "move"])
def test_a_file_of_the_longest_name_can_be_cleaned_and_undone(cli, tmp_path, isolated_dirs, monkeypatch, action):
    """A name of 255 bytes (the most a file name may hold): its temporary name beside it, and its name and info
    file's in the trash, would be longer still; they are made to fit, and undo gives the file back, byte for byte.
    The move crosses file systems here (a copy under the temporary name, then a rename)."""
    import errno

    root = tmp_path / "long"
    kept = write(root / "kept.txt", ENGLISH)
    os.utime(kept, ns=(10**18, 10**18))
    name = "中" * 80 + "x" * 11 + ".txt"  # 255 bytes in UTF-8
    assert len(name.encode()) == 255
    copy = write(root / name, ENGLISH)
    before = {p.name: p.read_bytes() for p in root.iterdir()}
    assert cli("add", str(root)).exit_code == 0
    rename = os.rename

    def across(source, target):  # as between two file systems
        if str(target).startswith(str(tmp_path / "out")):
            raise OSError(errno.EXDEV, "cross-device link")
        return rename(source, target)

    monkeypatch.setattr(os, "rename", across)
    options = ["--to", str(tmp_path / "out")] if action == "move" else []
    result = cli("clean", "--action", action, *options, "--yes")
    assert result.exit_code == 0 and "1 done" in result.stdout, result.output
    assert not copy.exists() or action == "hardlink"
    assert cli("undo").exit_code == 0
    assert {p.name: p.read_bytes() for p in root.iterdir()} == before
    assert not any(".dedupdb-partial" in p.name for p in tmp_path.rglob("*"))


def test_undo_that_cannot_restore_exits_non_zero(cli, archive, isolated_dirs):
    assert cli("clean", "--action", "trash", "--under", str(archive / "zh"), "--yes").exit_code == 0
    for item in (isolated_dirs / "data" / "Trash" / "files").iterdir():
        item.unlink()  # the trash was emptied
    result = cli("undo")
    assert result.exit_code == 1 and "no longer in the trash" in result.output
    assert "0 restored, 1 cannot be restored" in result.stdout


def test_a_name_holding_a_newline_cannot_list_the_kept_file_for_removal(cli, tmp_path):
    """A copy named 'a<newline>' + the kept file's path: listed one a line, its name would read as two paths, the
    second the kept file's, for a script to remove. A piped list leaves it out (and says so); --null gives it whole;
    the tables and the prune list hold it on one line, escaped."""
    root = tmp_path / "d"
    keep = write(root / "keep.txt", ENGLISH)
    os.utime(keep, ns=(10**18, 10**18))  # older: the one kept
    copy = write(root / f"a\n{keep}", ENGLISH)
    assert cli("add", str(root)).exit_code == 0
    result = cli("clean")
    # Escaped (a backslash and an n), it could read as another file's real name: piped, it is left out, and said.
    assert result.stdout == "" and "1 paths left out of the list" in result.stderr
    assert cli("clean", "-0").stdout == f"{copy}\0"
    assert "a\\n" in cli("clean", "--action", "move", "--to", str(tmp_path / "out")).stdout  # the plan's table
    copy.unlink()
    assert cli("prune").stdout.splitlines()[0] == f"forgot {root}/a\\n{keep}"


def test_a_piped_list_leaves_out_only_names_holding_control_characters(cli, tmp_path):
    """A name with a no-break space or a zero-width joiner (not printable, but no control character) is one path a
    line can carry as it is: it is listed, and nothing is said."""
    root = tmp_path / "d"
    keep = write(root / "keep.txt", ENGLISH)
    os.utime(keep, ns=(10**18, 10**18))
    copies = [write(root / name, ENGLISH) for name in ("a\u00a0copy.txt", "b\u200dcopy.txt")]
    assert cli("add", str(root)).exit_code == 0
    result = cli("clean")
    assert sorted(result.stdout.splitlines()) == sorted(map(str, copies)) and "left out" not in result.stderr


def test_a_least_similarity_out_of_its_range_is_a_usage_error(cli, archive):
    for value in ("nan", "1.5", "-0.1"):
        assert cli("clean", "--min-similarity", value).exit_code == 2


def test_records_are_never_cleaned(cli, tmp_path):
    write(tmp_path / "posts.txt", f"{ENGLISH}\n{ENGLISH}\n")
    cli("add", str(tmp_path / "posts.txt"), "--lines")
    result = cli("clean", "--action", "move", "--to", str(tmp_path / "out"), "--yes")
    assert "Nothing to clean" in result.stdout and (tmp_path / "posts.txt").exists()


def test_rm_and_prune(cli, archive):
    result = cli("rm", str(archive / "zh"), str(archive / "nope.txt"))
    assert "forgot 2 documents" in result.stdout and "not in the database" in result.output
    assert len(json.loads(cli("report", "--format", "json").stdout)) == 1
    (archive / "backup/report.txt").unlink()
    (archive / "drafts/report-v2.txt").unlink()
    result = cli("prune")
    assert "pruned 2 files" in result.stdout
    cluster = json.loads(cli("report", "--format", "json").stdout)[0]
    assert len(cluster["members"]) == 2
    assert cli("rm", "nothing-here").exit_code == 1


def test_diff_english_words_and_chinese_characters(cli, archive):
    result = cli("diff", str(archive / "2021/report.txt"), str(archive / "drafts/report-v2.txt"), "--format", "json")
    data = json.loads(result.stdout)
    assert data["unit"] == "word"
    changes = [(o["a_text"], o["b_text"]) for o in data["opcodes"] if o["op"] != "equal"]
    assert changes == [("policy", "plan"), (".", "!")]
    assert 0.5 < data["jaccard"] < 1 and data["bytes"]["a"] == len(ENGLISH)
    data = json.loads(cli("diff", str(archive / "zh/a.txt"), str(archive / "zh/b.txt"), "--format", "json").stdout)
    assert data["unit"] == "character"
    assert [(o["a_text"], o["b_text"]) for o in data["opcodes"] if o["op"] != "equal"] == [("很", "许"), ("。", "！")]
    table = cli("diff", str(archive / "zh/a.txt"), str(archive / "zh/b.txt"))
    assert table.exit_code == 0 and "jaccard" in table.stdout
    unified = cli("diff", str(archive / "zh/a.txt"), str(archive / "zh/b.txt"), "--unified")
    assert "+++" in unified.stdout
    assert cli("diff", "nope", "nada").exit_code == 1
