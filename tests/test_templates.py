"""Template pairs: short texts that differ only in numbers or in one slot of a shared frame are listed as pairs of
the kind "template" and group nobody unless asked (--include-templates), so report, clean and export --unique
leave them apart by default; through the rule itself, the command line and the library."""

from __future__ import annotations

import hashlib
import json
import os

import pytest

import dedupdb
from dedupdb.text.templates import is_template, text_tokens

from .conftest import file_hashes, write


@pytest.mark.parametrize("a, b", [
    ("By Christina Cheddar 11/13/2001", "By Christina Cheddar 11/14/2001"),     # a date
    ("November 13, 2001", "11/13/2001"),                                       # a month's name beside figures
    ("Dividend 15 cts, pay May 18", "Dividend 2,400 cts, pay May 18"),         # a number of another length
    ("（新华社记者李永宏摄）", "（新华社记者李刚摄）"),                              # a photographer's name
    ("明天气象预报（１月４日）", "明天气象预报（１月２７日）"),                        # a dated header, full width
    ("10 signs you grew up in Midtown Vancouver", "10 signs you grew up in Orangeville"),  # a filled-in slot
    ("How many psychologists does it take to change a light bulb?",
     "How many economists does it take to change a light bulb?"),
    ("PS GROUP INC QTLY DIVIDEND Shr 15 cts Pay May 18", "AMERON INC QTLY DIVIDEND Shr 24 cts Pay May 15"),  # name, figures
])
def test_templates(a, b):
    assert is_template(text_tokens(a), text_tokens(b))
    assert is_template(text_tokens(b), text_tokens(a))


@pytest.mark.parametrize("a, b", [
    ("But quick to tell me goodbye", "But quick to tell me goodybe"),    # a typo is one word misspelled
    ("You have been lovely", "You have been lovely #news"),              # a hashtag is no slot
    ("It was a good film", "It was a really good film"),                 # a word added fills no slot
    ("It was a good film", "IT WAS A GOOD FILM!"),                       # the same tokens
    ("The board met on Monday and agreed on the plan", "The board met and agreed on the budget on Friday"),
])
def test_not_templates(a, b):
    assert not is_template(text_tokens(a), text_tokens(b))


@pytest.fixture
def notes(tmp_path, cli):
    """Two credits that differ only in a date, a sentence and its misspelled copy, and exact copies; indexed."""
    root = tmp_path / "notes"
    files = {
        "credit-13.txt": "Photo by Christina Cheddar for the evening desk 11/13/2001",
        "credit-14.txt": "Photo by Christina Cheddar for the evening desk 11/14/2001",
        "line.txt": "But quick to tell me goodbye before the train left",
        "line-typo.txt": "But quick to tell me goodybe before the train left",
        "copy/line.txt": "But quick to tell me goodbye before the train left",
    }
    for i, (name, text) in enumerate(sorted(files.items())):
        path = write(root / name, text)
        os.utime(path, ns=(10**18 + i * 10**9, 10**18 + i * 10**9))
    assert cli("add", str(root)).exit_code == 0
    return root


def _names(keys, root):
    return sorted(os.path.relpath(k, root) for k in keys)


def test_pairs_report_and_export_leave_templates_apart(cli, notes):
    pairs = [json.loads(line) for line in cli("pairs").stdout.splitlines()]
    kinds = {tuple(_names((p["a"], p["b"]), notes)): p["kind"] for p in pairs}
    assert kinds[("credit-13.txt", "credit-14.txt")] == "template"
    assert kinds[("line-typo.txt", "line.txt")] == "near"
    assert kinds[("copy/line.txt", "line.txt")] == "exact"

    report = json.loads(cli("report", "--format", "json").stdout)
    assert [_names((m["key"] for m in g["members"]), notes) for g in report] == [
        ["copy/line.txt", "line-typo.txt", "line.txt"]]
    table = cli("report").stdout
    assert "1 template pair (only numbers or one slot of a frame differ) left apart" in table

    grouped = json.loads(cli("report", "--format", "json", "--include-templates").stdout)
    kinds = {tuple(_names((m["key"] for m in g["members"]), notes)): g["kind"] for g in grouped}
    assert kinds[("credit-13.txt", "credit-14.txt")] == "template"
    assert "left apart" not in cli("report", "--include-templates").stdout

    def exported(*extra):
        out = cli("export", "--unique", *extra).stdout.splitlines()
        return _names((json.loads(line)["key"] for line in out), notes)

    assert exported() == ["copy/line.txt", "credit-13.txt", "credit-14.txt"]
    assert exported("--include-templates") == ["copy/line.txt", "credit-13.txt"]


def test_clean_acts_on_templates_only_when_asked_and_undoes(cli, notes, tmp_path):
    before = file_hashes(notes)
    out = tmp_path / "out"
    result = cli("clean", "--action", "move", "--to", str(out), "--yes")
    assert result.exit_code == 0, result.output
    after = file_hashes(notes)
    assert sorted(after) == ["copy/line.txt", "credit-13.txt", "credit-14.txt"]
    assert all(after[name] == before[name] for name in after)

    assert cli("undo").exit_code == 0
    assert file_hashes(notes) == before
    result = cli("clean", "--action", "move", "--to", str(out), "--include-templates", "--yes")
    assert result.exit_code == 0, result.output
    assert sorted(file_hashes(notes)) == ["copy/line.txt", "credit-13.txt"]
    moved = {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in out.rglob("*.txt")}
    assert moved["credit-14.txt"] == before["credit-14.txt"]
    assert cli("undo").exit_code == 0
    assert file_hashes(notes) == before


def test_a_plan_acting_on_a_template_must_say_so(cli, notes, tmp_path):
    plan = json.loads(cli("clean", "--action", "trash", "--format", "json", "--include-templates").stdout)
    assert plan["include_templates"] is True
    assert any(s["act_on"]["path"].endswith("credit-14.txt") for s in plan["steps"])
    plan["include_templates"] = False  # edited by hand: the template step is no longer asked for
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(json.dumps(plan))
    before = file_hashes(notes)
    result = cli("clean", "--plan", str(plan_file), "--yes", "--format", "json")
    assert result.exit_code == 1
    refused = json.loads(result.stdout)["outcome"]["refused"]
    assert [r["path"].rsplit("/", 1)[-1] for r in refused] == ["credit-14.txt"]
    assert "a template of the copy to keep" in refused[0]["reason"]
    assert file_hashes(notes)["credit-14.txt"] == before["credit-14.txt"]
    assert cli("undo").exit_code == 0
    assert file_hashes(notes) == before


def test_library(notes, db_path):
    with dedupdb.open(db_path) as db:
        kinds = {tuple(_names((p.a, p.b), notes)): p.kind for p in db.pairs()}
        assert kinds[("credit-13.txt", "credit-14.txt")] == "template"
        assert db.template_pair_count() == 1
        assert not any("credit" in c.representative.key for c in db.clusters())
        framed = [c for c in db.clusters(templates=True) if c.kind == "template"]
        assert [_names((m.key for m in c.members), notes) for c in framed] == [["credit-13.txt", "credit-14.txt"]]
        keys = [r.key for r in db.export(unique=True)]
        assert sum("credit" in k for k in keys) == 2


def test_long_texts_are_never_templates(tmp_path, db_path):
    """A pair is a template only when both texts are held whole by their snippets: longer texts that differ in
    one number are near-duplicates as ever."""
    body = " ".join(f"word{i}" for i in range(60))
    root = tmp_path / "long"
    write(root / "a.txt", f"{body} total 15")
    write(root / "b.txt", f"{body} total 16")
    with dedupdb.open(db_path) as db:
        db.add([root])
        assert [p.kind for p in db.pairs()] == ["near"]
        assert db.template_pair_count() == 0
