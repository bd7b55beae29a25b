"""What people and programs read: piped output never wrapped, narrow terminals keeping what tells rows apart,
diffs that show every change as text, and a report written group by group."""

from __future__ import annotations

import json
import re

import pytest

from dedupdb.cli import render
from dedupdb.database import Cluster, Member

from .conftest import ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, write

_ANSI = re.compile(r"\x1b\[[0-9;]*m")


def _plain(output: str) -> str:
    return _ANSI.sub("", output)


@pytest.fixture
def deep(tmp_path):
    """A folder more than 200 characters deep holding a copy, a near-duplicate, a picture and a loner."""
    root = tmp_path / "/".join(f"a-folder-with-a-long-name-number-{i}" for i in range(7))
    write(root / "report.txt", ENGLISH)
    write(root / "report copy.txt", ENGLISH)
    write(root / "report edited.txt", ENGLISH_EDITED)
    write(root / "weather.txt", ENGLISH_OTHER)
    (root / "photo.jpg").write_bytes(b"\xff\xd8\xff\xe0" + bytes(200))
    assert len(str(root / "report.txt")) > 200
    return root


@pytest.fixture
def terminal(monkeypatch):
    """Standard output taken for a terminal of the given width."""

    def make(columns: int) -> None:
        monkeypatch.setenv("TTY_COMPATIBLE", "1")
        monkeypatch.setenv("COLUMNS", str(columns))

    return make


def _whole_on_a_line(output: str, path) -> list[str]:
    lines = [line for line in output.splitlines() if str(path) in line]
    assert lines, f"{path} is not whole on any line of:\n{output}"
    return lines


# --- 1. piped output is never wrapped ------------------------------------------------------------------------


def test_piped_add_verbose_keeps_long_paths_whole(cli, deep):
    result = cli("add", "-v", str(deep))
    assert result.exit_code == 0, result.output
    line = _whole_on_a_line(result.stdout, deep / "photo.jpg")[0]
    assert line.startswith("skipped ") and line.endswith(": not a text file type")
    summary = result.stdout.splitlines()[-1]
    assert summary.startswith("added 4,") and summary.endswith("s")  # the summary too stays one line


def test_piped_missing_lines_keep_long_paths_whole(cli, deep):
    cli("add", str(deep))
    (deep / "weather.txt").unlink()
    result = cli("add", str(deep))
    assert result.exit_code == 0, result.output
    assert _whole_on_a_line(result.stdout, deep / "weather.txt") == [f"missing {deep / 'weather.txt'}"]


def test_piped_report_and_clean_keep_long_paths_whole(cli, deep):
    cli("add", str(deep))
    report = cli("report").stdout
    for name in ("report.txt", "report copy.txt", "report edited.txt"):
        _whole_on_a_line(report, deep / name)
    assert not any(line != line.rstrip() for line in report.splitlines())  # no padding to a width either
    table = cli("clean", "--action", "move", "--to", str(deep.parent.parent / "away")).stdout
    rows = [line for line in table.splitlines() if "report copy.txt" in line]
    assert len(rows) == 1 and str(deep / "report.txt") in rows[0] and str(deep / "report copy.txt") in rows[0]


def test_piped_query_table_keeps_long_keys_whole(cli, deep):
    cli("add", str(deep))
    result = cli("query", ENGLISH)
    assert result.exit_code == 0
    _whole_on_a_line(result.stdout, deep / "report copy.txt")


# --- 2. narrow terminals ----------------------------------------------------------------------------------


def test_shorten_keeps_the_file_name_and_record_id():
    key = "/home/me/" + "/".join(["archive"] * 12) + "/corpus.jsonl#record-42"
    short = render.shorten(key, 40)
    assert render.cell_len(short) == 40 and short.startswith("/home") and short.endswith("/corpus.jsonl#record-42")
    assert "…" in short
    assert render.shorten("short.txt", 40) == "short.txt"
    tiny = render.shorten(key, 12)
    assert render.cell_len(tiny) == 12 and tiny.endswith("record-42")
    chinese = "/资料/" + "很长的文件夹/" * 10 + "报告.txt"
    cut = render.shorten(chinese, 30)
    assert render.cell_len(cut) <= 30 and cut.endswith("/报告.txt")


def test_distinct_labels_show_where_two_paths_part():
    a = "/home/me/notes/2023/budget-final-version-for-the-board-meeting.md"
    b = "/home/me/notes/2024/budget-final-version-for-the-board-meeting.md"
    left, right = render.distinct_labels(a, b, 30)
    assert left != right and "2023" in left and "2024" in right
    assert render.cell_len(left) <= 30 and render.cell_len(right) <= 30
    assert render.distinct_labels("a.txt", "b.txt", 30) == ("a.txt", "b.txt")


def test_narrow_terminal_query_keeps_names_and_record_ids(cli, tmp_path, terminal):
    folder = tmp_path / "/".join(f"long-folder-{i}" for i in range(8))
    write(folder / "first.jsonl", json.dumps({"id": "alpha", "text": ENGLISH}) + "\n")
    write(folder / "second.jsonl", json.dumps({"id": "beta", "text": ENGLISH}) + "\n")
    assert cli("add", str(folder), "--records", "jsonl", "--id-field", "id").exit_code == 0
    terminal(60)
    result = cli("query", ENGLISH)
    assert result.exit_code == 0, result.output
    output = _plain(result.stdout)
    assert "first.jsonl#alpha" in output and "second.jsonl#beta" in output
    assert "…" in output  # the middle of the path gave way


def test_narrow_terminal_report_keeps_names_and_fits(cli, deep, terminal):
    cli("add", str(deep))
    terminal(60)
    output = _plain(cli("report").stdout)
    rows = [line for line in output.splitlines() if line.startswith(("├", "└"))]
    assert len(rows) == 3
    for name in ("/report.txt", "/report copy.txt", "/report edited.txt"):
        assert sum(1 for row in rows if name in row) == 1
    assert all(render.cell_len(row) <= 60 for row in rows)


def test_narrow_terminal_diff_headers_differ(cli, tmp_path, terminal):
    common = tmp_path / "/".join(f"shared-folder-{i}" for i in range(6))
    a = write(common / "2023" / "minutes-of-the-annual-meeting.txt", ENGLISH)
    b = write(common / "2024" / "minutes-of-the-annual-meeting.txt", ENGLISH_EDITED)
    assert cli("add", str(common)).exit_code == 0
    terminal(70)
    output = _plain(cli("diff", str(a), str(b)).stdout)
    header = next(line for line in output.splitlines() if "a: " in line)
    assert "b: " in header and "2023" in header and "2024" in header
    assert render.cell_len(header) <= 70


# --- 6. diff: changes as text ---------------------------------------------------------------------------------

PARAGRAPH = "今天天气很好，我们一起去公园散步，看到很多人在湖边钓鱼，孩子们在草地上放风筝，大家都很开心。" * 6


@pytest.fixture
def chinese_pair(tmp_path):
    a = PARAGRAPH[:150] + "第17条" + PARAGRAPH[150:] + "\n"
    b = PARAGRAPH[:150] + "第27条" + PARAGRAPH[150:].replace("钓鱼", "游泳", 1) + "\n"
    return write(tmp_path / "a.txt", a), write(tmp_path / "b.txt", b)


@pytest.fixture(autouse=True)
def database(cli, tmp_path):
    """diff needs a database, even for files outside it."""
    assert cli("init").exit_code == 0


def test_piped_unified_diff_marks_changed_lines(cli, tmp_path, chinese_pair):
    a, b = chinese_pair
    result = cli("diff", "--unified", str(a), str(b))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[:3] == [f"--- {a}", f"+++ {b}", "@@ -1 +1 @@"]  # what diff -u writes; the summary beside it
    assert result.stderr.startswith("jaccard ")
    removed = [line for line in lines if line.startswith("-") and not line.startswith("---")]
    added = [line for line in lines if line.startswith("+") and not line.startswith("+++")]
    assert len(removed) == len(added) == 1
    assert "第17条" in removed[0] and "第27条" in added[0]


def test_a_newline_in_a_name_makes_up_no_header_of_a_piped_unified_diff(cli, tmp_path):
    a = write(tmp_path / "a\n+++ forged\n@@ -9 +9 @@.txt", "one line\nsecond line\n")
    b = write(tmp_path / "b.txt", "one line\nother line\n")
    lines = cli("diff", "-u", str(a), str(b)).stdout.splitlines()
    assert lines[:3] == [f"--- {tmp_path}/a\\n+++ forged\\n@@ -9 +9 @@.txt", f"+++ {b}", "@@ -1,2 +1,2 @@"]


def test_piped_unified_diff_shows_a_full_width_digit_change(cli, tmp_path):
    a = write(tmp_path / "x.txt", "会议记录\n第１７条规定如下。\n其余不变。\n")
    b = write(tmp_path / "y.txt", "会议记录\n第２７条规定如下。\n其余不变。\n")
    lines = cli("diff", "-u", str(a), str(b)).stdout.splitlines()
    assert "-第１７条规定如下。" in lines and "+第２７条规定如下。" in lines
    assert " 会议记录" in lines and " 其余不变。" in lines


def test_unified_diff_on_a_colour_terminal_merges_in_colour(cli, chinese_pair, monkeypatch):
    a, b = chinese_pair
    monkeypatch.setattr(render, "console", render._Console(force_terminal=True, color_system="standard", width=100))
    output = cli("diff", "-u", str(a), str(b)).stdout
    assert "@@" not in output and _ANSI.search(output)
    merged = _plain(output).replace("\n", "")
    assert "第127条" in merged  # deleted 1, inserted 2: told apart by their colours


def test_unified_diff_on_a_terminal_without_colour_marks_lines(cli, chinese_pair, terminal):
    a, b = chinese_pair
    terminal(100)
    lines = _plain(cli("diff", "-u", str(a), str(b)).stdout).splitlines()
    assert any(line.startswith("-") and "第17条" in line for line in lines)
    assert any(line.startswith("+") and "第27条" in line for line in lines)


@pytest.mark.parametrize("columns", [80, 160])
@pytest.mark.parametrize("on_terminal", [False, True])
def test_side_by_side_wraps_long_chinese_paragraphs(cli, chinese_pair, monkeypatch, terminal, columns, on_terminal):
    a, b = chinese_pair
    if on_terminal:
        terminal(columns)
    else:
        monkeypatch.setenv("COLUMNS", str(columns))
    output = _plain(cli("diff", str(a), str(b)).stdout)
    lines = output.splitlines()
    assert all(render.cell_len(line) <= columns for line in lines)
    rows = [line for line in lines if line.startswith("│")]
    left = "".join(row.split("│")[1].strip() for row in rows)
    right = "".join(row.split("│")[2].strip() for row in rows)
    text_a, text_b = a.read_text().strip(), b.read_text().strip()
    assert left == text_a and right == text_b  # every character, the changed ones too, in order
    assert len(rows) > 1


# --- 7. the report is written group by group -------------------------------------------------------------------


def _cluster(number: int) -> Cluster:
    members = [
        Member(f"/n/{number}/{name}.txt", f"/n/{number}/{name}.txt", None, 100, 10**18, 1.0 if i < 2 else 0.8,
               i < 2, "", number * 10 + i, number)
        for i, name in enumerate(("keep", "copy", "edit"))
    ]
    return Cluster(number, members, "near")


def test_report_table_writes_each_group_as_it_comes(capsys):
    seen = []

    def clusters():
        for number in (1, 2, 3):
            seen.append(capsys.readouterr().out)  # what was written before this group was asked for
            yield _cluster(number)

    render.report_table(clusters())
    tail = capsys.readouterr().out
    assert seen[0] == ""
    assert "/n/1/edit.txt" in seen[1] and "/n/2/" not in seen[1]
    assert "/n/2/edit.txt" in seen[2] and "/n/3/" not in seen[2]
    assert tail.splitlines()[-1] == "3 groups, 600 B reclaimable"


def test_report_table_lines(capsys):
    render.report_table([_cluster(7)])
    lines = capsys.readouterr().out.splitlines()
    when = render._when(10**18)
    assert lines == [
        "near cluster 7.1 · 3 documents · 200 B reclaimable",
        f"├── keep /n/7/keep.txt  100 B · {when}",
        f"├── exact /n/7/copy.txt  100 B · {when}",
        f"└──  0.80 /n/7/edit.txt  100 B · {when}",
        "1 group, 200 B reclaimable",
    ]
    render.report_table([])
    assert capsys.readouterr().out == "No duplicates found.\n"


def test_diff_header_counts_changes_in_good_english(cli, tmp_path):
    a = write(tmp_path / "a.txt", "The quick brown fox jumps over the lazy dog and runs through the forest 17 times")
    b = write(tmp_path / "b.txt", "The quick brown fox jumps over the lazy dog and runs through the forest 27 times")
    result = cli("diff", str(a), str(b))
    assert result.exit_code == 0, result.output
    assert "· 1 change" in result.output and "1 changes" not in result.output


# --- times for programs: UTC with its zone ---------------------------------------------------------------------

MTIME_NS = 1_700_000_000 * 10**9 + 123_456_789  # 2023-11-14T22:13:20Z and a fraction


@pytest.fixture
def far_east(monkeypatch):
    """The local time of Shanghai (UTC+8): a time written without its zone would be eight hours off."""
    import time

    monkeypatch.setenv("TZ", "Asia/Shanghai")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()


def _view(db_path, sql: str) -> list[tuple]:
    import sqlite3

    conn = sqlite3.connect(db_path)
    try:
        return conn.execute(sql).fetchall()
    finally:
        conn.close()


def test_report_times_are_utc_with_their_zone_as_in_the_views(cli, db_path, tmp_path, far_east):
    import os

    # The last within half a millisecond of the next second, which SQLite's strftime rounds up to.
    times = {"a.txt": MTIME_NS, "b.txt": MTIME_NS + 10**9, "c.txt": MTIME_NS - 123_456_789 + 999_600_000}
    for name, ns in times.items():
        os.utime(write(tmp_path / "docs" / name, ENGLISH), ns=(ns, ns))
    assert cli("add", str(tmp_path / "docs")).exit_code == 0
    members = json.loads(cli("report", "--format", "json").stdout)[0]["members"]
    by_name = {os.path.basename(m["path"]): m["mtime"] for m in members}
    assert by_name == {"a.txt": "2023-11-14T22:13:20Z", "b.txt": "2023-11-14T22:13:21Z", "c.txt": "2023-11-14T22:13:21Z"}
    view = dict(_view(db_path, "SELECT path, modified FROM documents_readable"))
    assert {m["path"]: m["mtime"] for m in members} == view
    rows = cli("report", "--format", "csv").stdout.splitlines()
    assert rows[0].split(",")[7] == "mtime"
    assert {r.split(",")[5]: r.split(",")[7] for r in rows[1:]} == view


def test_journal_times_are_utc_with_their_zone_and_the_table_local(cli, db_path, tmp_path, far_east):
    from datetime import datetime, timezone

    write(tmp_path / "docs" / "a.txt", ENGLISH)
    write(tmp_path / "docs" / "copy" / "a.txt", ENGLISH)
    assert cli("add", str(tmp_path / "docs")).exit_code == 0
    assert cli("clean", "--action", "move", "--to", str(tmp_path / "away"), "--yes").exit_code == 0
    assert cli("undo").exit_code == 0
    batch = json.loads(cli("journal", "--format", "json").stdout)[0]
    view = _view(db_path, "SELECT created, undone FROM journal_readable")[0]
    assert (batch["created"], batch["undone"]) == view
    assert batch["created"].endswith("Z") and batch["undone"].endswith("Z")
    created = datetime.strptime(batch["created"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc)
    assert render._local_time(created.timestamp()) in cli("journal").stdout  # people read their own time


def test_two_long_documents_are_matched_line_by_line_and_shown_around_their_changes(cli, tmp_path, monkeypatch):
    """Matching every word against every other, as difflib does, took over a minute for two documents of 2 MB:
    past diff.WHOLE_UNITS units the common start and end are set aside and the rest is matched line by line, each
    run of changed lines word by word. No unit-level match is given more than WHOLE_UNITS units, the opcodes still
    spell both texts, and a view shows long unchanged runs by their start and end."""
    import difflib

    from dedupdb.text import diff

    rng = __import__("random").Random(4)
    vocabulary = [f"w{i}" for i in range(3000)]
    lines = [" ".join(rng.choices(vocabulary, k=12)) for _ in range(3000)]  # 36,000 words, 72,000 units
    a = "\n".join(lines)
    changed = list(lines)
    changed[700] = changed[700].replace(" ", " inserted ", 1)
    changed[2200] = "a line rewritten whole"
    b = "\n".join(changed)
    given = []
    real = difflib.SequenceMatcher

    def watched(junk, x, y, autojunk=True):
        given.append((len(x), len(y), isinstance(x[0], str) and "\n" in x[0] if x else False))
        return real(junk, x, y, autojunk=autojunk)

    monkeypatch.setattr(difflib, "SequenceMatcher", watched)
    result = diff.diff_texts(a, b)
    assert "".join(o.a_text for o in result.opcodes) == a and "".join(o.b_text for o in result.opcodes) == b
    assert result.changes[0].op == "insert" and result.changes[0].b_text == "inserted "
    assert "".join(o.b_text for o in result.changes[1:]) == "alinerewrittenwhole" and len(result.changes) < 10
    assert len(given) >= 2 and max(x + y for x, y, _ in given[1:]) <= diff.WHOLE_UNITS  # after the one of lines
    # Chinese of one line, matched sentence by sentence: two edits far apart are two changes, not one replaced span.
    one_line = "".join(f"第{i}句说的是{'天气很好我们去公园' if i % 2 else '酒店服务态度非常好'}。" for i in range(3000))
    edited = one_line[:5000] + "插入" + one_line[5000:40000] + one_line[40003:]
    chinese = diff.diff_texts(one_line, edited)
    assert chinese.unit == "character" and [(o.op, o.a_text, o.b_text) for o in chinese.changes] == [
        ("insert", "", "插入"), ("delete", one_line[40000:40003], "")]
    monkeypatch.undo()
    for name, text in (("a.txt", a), ("b.txt", b)):
        write(tmp_path / name, text)
    shown = cli("diff", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"))
    assert shown.exit_code == 0, shown.output
    assert "characters the same" in shown.stdout and "inserted" in shown.stdout and "rewritten" in shown.stdout
    opcodes = json.loads(cli("diff", str(tmp_path / "a.txt"), str(tmp_path / "b.txt"), "--format", "json").stdout)
    assert "".join(o["b_text"] for o in opcodes["opcodes"]) == b
