"""dedupdb review: the review's state (ops/review.py) through the library, and the screen (cli/review_app.py)
driven headless with Textual's Pilot through every path: keep another member, mark, not duplicates, act,
undo; the files' sha256 before and after. Snapshots of the main screens at 80x24 and 120x40."""

from __future__ import annotations

import asyncio
import hashlib
import os
import shutil
import stat
import time
from pathlib import Path

import pytest

import dedupdb
from dedupdb.cli.review_app import ReviewApp
from dedupdb.ingest.records import RecordOptions
from dedupdb.ops.review import GroupPages, Review

from .conftest import CHINESE, CHINESE_EDITED, CHINESE_OTHER, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, file_hashes, write

FILES = {
    "2021/report.txt": ENGLISH,
    "backup/report.txt": ENGLISH,
    "drafts/report-v2.txt": ENGLISH_EDITED,
    "zh/公园.txt": CHINESE,
    "zh/公园_修订.txt": CHINESE_EDITED,
    "zh/酒店.txt": CHINESE_OTHER,
    "weather.txt": ENGLISH_OTHER,
}


@pytest.fixture(autouse=True)
def utc(monkeypatch):
    """Times on screen in one zone whatever the machine's."""
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _build(root: Path, db_path: Path) -> dedupdb.Database:
    for i, (name, text) in enumerate(sorted(FILES.items())):
        path = write(root / name, text)
        os.utime(path, ns=(1_700_000_000 * 10**9 + i * 60 * 10**9,) * 2)
    db = dedupdb.Database.open(db_path)
    db.add([root], workers=0)
    return db


@pytest.fixture
def archive(tmp_path):
    root = tmp_path / "archive"
    db = _build(root, tmp_path / "review.db")
    yield root, db
    db.close()


def _drive(app: ReviewApp, steps, size=(80, 24)):
    """Run the app headless, call steps(pilot) inside it, and return what it returned."""

    async def run():
        async with app.run_test(size=size) as pilot:
            await pilot.pause()
            return await steps(pilot)

    return asyncio.run(run())


# --- the review's state, through the library -------------------------------------------------------------


def test_pages_list_report_groups_in_its_order(archive):
    root, db = archive
    pages = GroupPages(db)
    assert [[m.key for m in g.members] for g in pages.all()] == [[m.key for m in g.members] for g in db.clusters()]
    filtered = GroupPages(db, matching="公园").all()
    assert [g.representative.key for g in filtered] == [str(root / "zh/公园.txt")]
    assert GroupPages(db, matching="QUARTERLY").all()[0].representative.key == str(root / "2021/report.txt")


def test_keep_another_mark_plan_act_undo_through_the_library(archive, tmp_path):
    root, db = archive
    review = Review(db)
    english = review.pages.upto(1)[0]
    assert english.representative.key == str(root / "2021/report.txt")
    review.keep_member(english, str(root / "drafts/report-v2.txt"))
    rows = review.rows(english)
    assert [(r.member.key.rsplit("/", 2)[-2], r.keeper, r.similarity) for r in rows] == [
        ("drafts", True, 1.0), ("2021", False, 0.9), ("backup", False, 0.9)]
    assert review.mark_group(english) == 2
    plan = review.plan("move", tmp_path / "out")
    assert sorted(s.remove.path for s in plan.steps) == [str(root / "2021/report.txt"), str(root / "backup/report.txt")]
    assert {s.keep.path for s in plan.steps} == {str(root / "drafts/report-v2.txt")}
    before = file_hashes(root)
    outcome = review.act(plan)
    assert len(outcome.done) == 2 and not outcome.refused
    after = file_hashes(root)
    assert "2021/report.txt" not in after and after["drafts/report-v2.txt"] == before["drafts/report-v2.txt"]
    moved = sorted(hashlib.sha256(p.read_bytes()).hexdigest() for p in (tmp_path / "out").rglob("*") if p.is_file())
    assert moved == sorted([before["2021/report.txt"], before["backup/report.txt"]])
    assert review.marked_count() == 0
    review.undo()
    assert file_hashes(root) == before


def test_a_record_or_a_member_below_the_threshold_cannot_be_marked(archive):
    root, db = archive
    review = Review(db)
    english = review.pages.upto(1)[0]
    review.keep_member(english, str(root / "backup/report.txt"))
    assert review.toggle_mark(english, str(root / "2021/report.txt")) is None  # an exact copy
    assert review.toggle_mark(english, str(root / "2021/report.txt")) is None  # unmarked again
    assert review.marked_count() == 0


def test_read_only_reviews_but_cannot_act(archive):
    root, db = archive
    path = db.path
    db.close()
    before = file_hashes(root)
    with dedupdb.Database.open(path, readonly=True) as ro:
        review = Review(ro)
        group = review.pages.upto(1)[0]
        review.mark_group(group)
        with pytest.raises(dedupdb.errors.InputError, match="read-only"):
            review.act(review.plan("trash"))
        with pytest.raises(dedupdb.errors.InputError, match="read-only"):
            review.not_duplicates([m.key for m in group.members])
    assert file_hashes(root) == before


def test_the_first_screen_reads_few_clusters_of_a_large_store(tmp_path, monkeypatch):
    """200,000 documents in 80,000 clusters (records of exact copies, so that building takes seconds): the first
    screen lists the first groups of report, in report's order, having grouped a small share of the clusters."""
    lines = []
    for i in range(80_000):
        text = " ".join(f"w{(i * 7 + j * 13) % 9973}x{i}" for j in range(4 + i % 23))
        lines += [text] * (2 + i % 2)
    (tmp_path / "big.txt").write_text("\n".join(lines) + "\n")
    db = dedupdb.Database.open(tmp_path / "big.db")
    db.add([tmp_path / "big.txt"], records=RecordOptions("lines"))
    grouped: list[int] = []
    original = db.groups_of
    monkeypatch.setattr(db, "groups_of", lambda clusters, *a, **kw: grouped.extend(clusters) or original(clusters, *a, **kw))
    review = Review(db)
    app = ReviewApp(review)

    async def first_screen(pilot):
        return [g.representative.key for g in app.screen.shown]

    shown = _drive(app, first_screen)
    total = len(db.group_bounds())
    assert len(lines) == 200_000 and total > 60_000 and len(shown) >= 20  # some texts are alike, so fewer clusters
    assert len(grouped) < total // 10, f"{len(grouped)} of {total} clusters read for the first screen"
    expected = [g.representative.key for g in db.clusters()[: len(shown)]]
    assert shown == expected
    db.close()


# --- the screen, driven headless --------------------------------------------------------------------------


def test_keep_another_mark_act_and_undo_on_the_screen(archive, tmp_path):
    root, db = archive
    before = file_hashes(root)
    out = tmp_path / "out"
    app = ReviewApp(Review(db), "move", str(out))

    async def steps(pilot):
        await pilot.press("enter")                 # the English group
        await pilot.press("down", "down", "k")     # keep the edited report instead
        screen = app.screen
        assert screen.rows[0].member.key == str(root / "drafts/report-v2.txt")
        await pilot.press("a")                     # mark every member that may go
        assert {r.member.key for r in screen.rows if r.marked} == {str(root / "2021/report.txt"),
                                                                   str(root / "backup/report.txt")}
        await pilot.press("x")
        await pilot.pause()
        assert file_hashes(root) == before             # nothing happens before the confirmation
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        outcome = app.last_outcome
        after = file_hashes(root)
        assert sorted(outcome.done) == [str(root / "2021/report.txt"), str(root / "backup/report.txt")]
        assert "2021/report.txt" not in after and after["drafts/report-v2.txt"] == before["drafts/report-v2.txt"]
        moved = sorted(hashlib.sha256(p.read_bytes()).hexdigest() for p in out.rglob("*") if p.is_file())
        assert moved == sorted([before["2021/report.txt"], before["backup/report.txt"]])
        assert db.journal()[0][2] == "move"
        await pilot.press("u")                     # undo, from the list of groups
        await pilot.pause()
        assert file_hashes(root) == before
        assert db.journal()[0][4] is not None      # the batch is undone
        return True

    assert _drive(app, steps)


def test_not_duplicates_on_the_screen_is_remembered(archive):
    root, db = archive
    before = file_hashes(root)
    app = ReviewApp(Review(db))

    async def steps(pilot):
        await pilot.press("down", "enter")         # the Chinese group
        assert app.screen.rows[0].member.key == str(root / "zh/公园.txt")
        await pilot.press("down", "n")             # the edit is not a duplicate of it
        await pilot.pause()
        return [g.representative.key for g in app.screen.shown]

    assert _drive(app, steps) == [str(root / "2021/report.txt")]
    assert [(p.a, p.b) for p in db.ignored()] == [(str(root / "zh/公园.txt"), str(root / "zh/公园_修订.txt"))]
    assert all("zh/" not in m.key for g in db.clusters() for m in g.members)
    assert file_hashes(root) == before


def test_filter_trash_with_a_whole_group_marked_and_journal_undo(archive):
    root, db = archive
    before = file_hashes(root)
    app = ReviewApp(Review(db))

    async def steps(pilot):
        await pilot.press("slash", *"公园", "enter")
        assert [g.representative.key for g in app.screen.shown] == [str(root / "zh/公园.txt")]
        await pilot.press("space", "x")            # mark the group; act: the trash by default
        await pilot.pause()
        assert app.screen.plan.action == "trash" and len(app.screen.plan.steps) == 1
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        assert not (root / "zh/公园_修订.txt").exists()
        await pilot.press("j")
        await pilot.pause()
        await pilot.press("u", "escape")           # undo from the journal
        await pilot.pause()
        return True

    assert _drive(app, steps)
    assert file_hashes(root) == before


def test_read_only_screen_says_so_and_changes_nothing(archive):
    root, db = archive
    path = db.path
    db.close()
    before = file_hashes(root)
    with dedupdb.Database.open(path, readonly=True) as ro:
        app = ReviewApp(Review(ro))

        async def steps(pilot):
            assert "read-only" in str(app.screen.query_one("#title").render())
            await pilot.press("space", "x", "n", "u")
            await pilot.pause()
            return app.screen.__class__.__name__, [n.message for n in app._notifications]

        screen, messages = _drive(app, steps)
        assert screen == "GroupsScreen" and any("read-only" in m for m in messages)
        assert ro.ignored() == [] and ro.journal() == []
    assert file_hashes(root) == before


def test_editor_help_and_ctrl_c(archive, tmp_path, monkeypatch):
    root, db = archive
    seen = tmp_path / "seen.txt"
    editor = tmp_path / "editor.sh"
    editor.write_text(f'#!/bin/sh\necho "$1" >> "{seen}"\n')
    editor.chmod(editor.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("EDITOR", str(editor))
    monkeypatch.delenv("VISUAL", raising=False)
    app = ReviewApp(Review(db))

    async def steps(pilot):
        await pilot.press("enter", "e")
        await pilot.pause()
        await pilot.press("question_mark")
        await pilot.pause()
        help_shown = app.screen.__class__.__name__
        await pilot.press("escape", "ctrl+c")
        await pilot.pause()
        return help_shown

    assert _drive(app, steps) == "HelpScreen"
    assert seen.read_text().split() == [str(root / "2021/report.txt")]
    assert app.return_code in (0, None) and not app.is_running


@pytest.mark.usefixtures("archive")  # a store with groups: the refusal comes before it is read
def test_review_refuses_without_a_terminal(cli):
    result = cli("review")
    assert result.exit_code == 1 and "review needs a terminal" in result.stderr


# --- snapshots --------------------------------------------------------------------------------------------

SNAPSHOT_ROOT = Path("/tmp/dedupdb-review-snapshots")  # the paths on screen must be the same in every run


@pytest.fixture
def fixed_archive():
    shutil.rmtree(SNAPSHOT_ROOT, ignore_errors=True)
    db = _build(SNAPSHOT_ROOT / "archive", SNAPSHOT_ROOT / "review.db")
    yield db
    db.close()
    shutil.rmtree(SNAPSHOT_ROOT, ignore_errors=True)


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
@pytest.mark.parametrize("press", [(), ("enter", "down", "down"), ("down", "enter", "down", "space")],
                         ids=["groups", "english-diff", "chinese-marked"])
def test_snapshots(fixed_archive, snap_compare, size, press):
    assert snap_compare(ReviewApp(Review(fixed_archive)), press=press, terminal_size=size)


def test_move_to_a_folder_typed_in_the_confirmation_and_undo(archive, tmp_path):
    root, db = archive
    before = file_hashes(root)
    app = ReviewApp(Review(db))  # started without --to
    out = tmp_path / "moved here"

    async def steps(pilot):
        await pilot.press("space", "x", "m")       # mark the first group; act: move, which asks for a folder
        await pilot.pause()
        assert app.screen.plan is None and app.screen.query_one("#folder").display
        await pilot.press("y")                      # typed into the folder's field: nothing happens
        await pilot.pause()
        assert app.screen.plan is None
        field = app.screen.query_one("#folder")
        field.value = ""
        await pilot.press(*str(out), "enter")
        await pilot.pause()
        plan = app.screen.plan
        assert plan.action == "move" and plan.to == str(out) and plan.steps
        await pilot.press("y")
        await app.workers.wait_for_complete()
        await pilot.pause()
        moved = sorted(p.name for p in out.rglob("*") if p.is_file())
        assert moved and file_hashes(root) != before
        await pilot.press("u")                      # undo, from the list of groups
        await pilot.pause()
        return moved

    assert _drive(app, steps)
    assert file_hashes(root) == before
