"""Mail: mbox, .eml and Maildir, one document per message and per readable attachment."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import dedupdb
from dedupdb.ingest.mail import clean_body, mail_format, parse_message, split_mbox

from .conftest import CHINESE, CHINESE_EDITED, CHINESE_OTHER, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, write
from .writers import forwarded, make_message, make_pdf, write_mbox

LONG = "\n\n".join([ENGLISH, ENGLISH_OTHER])


def _sha(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


def _keys(db) -> list[str]:
    return sorted(r.key for r in _export(db))


def _export(db):
    from dedupdb.ingest.export import export_records

    return list(export_records(db, unique=False, keep="first"))


def test_each_message_of_an_mbox_is_a_document_keyed_by_its_id_or_position(tmp_path):
    (tmp_path / "mail").mkdir()
    box = write_mbox(tmp_path / "mail" / "inbox.mbox", [
        make_message(ENGLISH, "Quarterly report", "q1@example.org"),
        make_message(CHINESE, "天气", None),
        make_message(ENGLISH_OTHER, "Flood", "q1@example.org"),  # repeats an id: keyed by its position
    ])
    with dedupdb.open(tmp_path / "db.sqlite") as db:
        summary = db.add([tmp_path / "mail"], workers=0)
        assert summary.records == 3 and not summary.failed
        assert _keys(db) == [f"{box}#2", f"{box}#3", f"{box}#q1@example.org"]
        texts = {r.key: r.text for r in _export(db)}
    assert texts[f"{box}#q1@example.org"] == f"Quarterly report\n\n{ENGLISH}"
    assert texts[f"{box}#2"] == f"天气\n\n{CHINESE}"


def test_encodings_are_undone_and_charsets_honoured(tmp_path):
    folder = tmp_path / "mail"
    cases = [
        ("utf-8", "base64", CHINESE), ("gb2312", "base64", CHINESE), ("gbk", "quoted-printable", CHINESE),
        ("gb18030", "8bit", CHINESE), ("big5", "base64", "今天天氣很好，我們一起去公園散步，看到很多人在湖邊釣魚，孩子們在草地上放風箏，大家都很開心。"),
        ("iso-8859-1", "quoted-printable", "Café crème à la française: déjà vu, naïve façade. " * 3),
        ("windows-1252", "base64", "Smart “quotes” and – dashes – cost €5 in the café. " * 3),
    ]
    for number, (charset, cte, text) in enumerate(cases):
        message = make_message(text, "subject", f"m{number}@x", charset=charset, cte=cte)
        write(folder / f"m{number}.eml", "")
        (folder / f"m{number}.eml").write_bytes(bytes(message))
        parsed = parse_message(bytes(message), 1 << 20)
        assert parsed.message_id == f"m{number}@x"
        assert parsed.parts[0].text == f"subject\n\n{text.strip()}", charset


def test_the_same_message_in_other_encodings_and_forwarded_is_found(tmp_path):
    folder = tmp_path / "mail"
    folder.mkdir()
    original = make_message(LONG, "Board meeting", "orig@x", cte="base64")
    (folder / "saved.eml").write_bytes(bytes(original))
    (folder / "saved-qp.eml").write_bytes(bytes(make_message(LONG, "Board meeting", "other@x", cte="quoted-printable")))
    (folder / "html.eml").write_bytes(bytes(make_message(LONG, "Board meeting", "html@x", html=True)))
    (folder / "both.eml").write_bytes(bytes(make_message(LONG, "Board meeting", "both@x", html="both")))
    (folder / "fwd.eml").write_bytes(bytes(forwarded(original, "See below.", "fwd@x")))
    write(folder / "note.txt", LONG)
    write(folder / "unrelated.txt", CHINESE_OTHER)
    with dedupdb.open(tmp_path / "db.sqlite") as db:
        db.add([folder], workers=0)
        groups = db.clusters()
    assert len(groups) == 1
    assert sorted(Path(m.key).name.split("#")[0] for m in groups[0].members) == [
        "both.eml", "fwd.eml", "html.eml", "note.txt", "saved-qp.eml", "saved.eml"
    ]


def test_an_attachment_is_a_document_of_its_own(tmp_path):
    folder = tmp_path / "mail"
    folder.mkdir()
    pdf = make_pdf(folder / "paper.pdf", LONG).read_bytes()
    messages = [
        make_message(f"Attached, number {n}. {text}", f"paper {n}", f"a{n}@x", attachments=(("paper.pdf", pdf),))
        for n, text in enumerate([CHINESE, CHINESE_OTHER, ENGLISH_EDITED[:40]])
    ]
    box = write_mbox(folder / "box.mbox", messages)
    with dedupdb.open(tmp_path / "db.sqlite") as db:
        db.add([folder], workers=0)
        groups = db.clusters()
    assert len(groups) == 1
    assert sorted(m.key for m in groups[0].members) == sorted(
        [str(folder / "paper.pdf")] + [f"{box}#a{n}@x/paper.pdf" for n in range(3)]
    )


def test_messages_of_one_mailing_list_are_not_alike_for_their_headers_and_footer(tmp_path):
    list_headers = {
        "List-Id": "Project discussion <dev.lists.example.org>",
        "List-Unsubscribe": "<mailto:dev-leave@lists.example.org>",
        "Reply-To": "dev@lists.example.org",
        "X-Mailman-Version": "2.1.39",
    }
    footer = ("\n\n_______________________________________________\ndev mailing list\ndev@lists.example.org\n"
              "https://lists.example.org/mailman/listinfo/dev\n")
    bodies = ["Can we merge the parser fix today?", "The build is red again on the release branch.",
              "Thanks, that worked for me.", "Meeting moved to Thursday."]
    messages = [make_message(b + footer, f"[dev] topic {n}", f"l{n}@x", headers=list_headers)
                for n, b in enumerate(bodies)]
    folder = tmp_path / "mail"
    folder.mkdir()
    write_mbox(folder / "dev.mbox", messages)
    with dedupdb.open(tmp_path / "db.sqlite") as db:
        db.add([folder], workers=0)
        assert db.clusters() == []
        assert all("mailing list" not in r.text for r in _export(db))


def test_a_grown_mailbox_is_read_from_its_first_new_message(tmp_path):
    folder = tmp_path / "mail"
    folder.mkdir()
    box = write_mbox(folder / "inbox", [make_message(ENGLISH, "one", "1@x"), make_message(CHINESE, "two", None)])
    assert mail_format(box) == "mbox"  # no suffix: known by its first line
    with dedupdb.open(tmp_path / "db.sqlite") as db:
        first = db.add([folder], workers=0)
        write_mbox(box, [make_message(ENGLISH_EDITED, "three", None), make_message(CHINESE_EDITED, "four", "4@x")])
        grown = db.add([folder], workers=0)
        again = db.add([folder], workers=0)
        keys = _keys(db)
        groups = sorted(sorted(m.key for m in g.members) for g in db.clusters())
    assert first.records == 2 and grown.records == 2 and again.unchanged == 1
    assert keys == [f"{box}#1@x", f"{box}#2", f"{box}#3", f"{box}#4@x"]
    assert groups == [[f"{box}#1@x", f"{box}#3"], [f"{box}#2", f"{box}#4@x"]]


def test_maildir_messages(tmp_path):
    maildir = tmp_path / "Maildir"
    for sub in ("cur", "new", "tmp", ".Archive/cur", ".Archive/new", ".Archive/tmp"):
        (maildir / sub).mkdir(parents=True)
    (maildir / "new" / "1700000000.M1P1.host").write_bytes(bytes(make_message(LONG, "hello", "md1@x")))
    (maildir / "cur" / "1700000001.M2P2.host:2,S").write_bytes(bytes(make_message(CHINESE, "你好", "md2@x")))
    (maildir / ".Archive" / "cur" / "1700000002.M3P3.host:2,S").write_bytes(
        bytes(make_message(LONG, "hello", "md3@x", cte="quoted-printable"))
    )
    with dedupdb.open(tmp_path / "db.sqlite") as db:
        summary = db.add([maildir], workers=0)
        keys = _keys(db)
        groups = db.clusters()
    assert summary.records == 3, summary.skipped
    assert [k.split("#")[1] for k in keys] == ["md3@x", "md2@x", "md1@x"]
    assert len(groups) == 1 and sorted(m.key.split("#")[1] for m in groups[0].members) == ["md1@x", "md3@x"]


def test_clean_passes_over_messages_and_attachments_and_touches_no_file(cli, tmp_path):
    folder = tmp_path / "mail"
    folder.mkdir()
    pdf = make_pdf(folder / "paper.pdf", LONG).read_bytes()
    write_mbox(folder / "box.mbox", [make_message(LONG, "a", "c1@x", attachments=(("paper.pdf", pdf),)),
                                     make_message(LONG, "a", "c2@x")])
    (folder / "saved.eml").write_bytes(bytes(make_message(LONG, "a", "c3@x")))
    assert cli("add", str(folder)).exit_code == 0
    report = json.loads(cli("report", "--format", "json").stdout)
    assert sum(len(c["members"]) for c in report) >= 5  # the messages and attachment are listed
    before = _sha(folder)
    plan = json.loads(cli("clean", "--action", "trash", "--format", "json").stdout)
    assert plan["steps"] == []
    reasons = {p["path"]: p["reason"] for p in plan["passed_over"]}
    assert reasons[f"{folder}/box.mbox#c1@x/paper.pdf"].startswith("a message in a mail file")
    assert reasons[f"{folder}/saved.eml#c3@x"].startswith("a message in a mail file")
    assert cli("clean", "--action", "trash", "--yes").exit_code == 0
    assert _sha(folder) == before


def test_diff_export_and_query_read_messages_back(cli, tmp_path):
    folder = tmp_path / "mail"
    folder.mkdir()
    write_mbox(folder / "box.mbox", [make_message(CHINESE, "天气", "w1@x", charset="gb2312")])
    write(folder / "note.txt", CHINESE_EDITED)
    assert cli("add", str(folder)).exit_code == 0
    diff = cli("diff", f"{folder}/box.mbox#w1@x", str(folder / "note.txt"))
    assert diff.exit_code == 0, diff.output
    assert "天气" in diff.stdout
    exported = [json.loads(line) for line in cli("export").stdout.splitlines()]
    assert {"key": f"{folder}/box.mbox#w1@x", "text": f"天气\n\n{CHINESE}"} in exported
    saved = tmp_path / "q.eml"
    saved.write_bytes(bytes(make_message(CHINESE, "天气", "other@x", cte="quoted-printable")))
    hits = json.loads(cli("query", "--file", str(saved), "--format", "json").stdout)
    assert hits[0]["key"] == f"{folder}/box.mbox#w1@x" and hits[0]["exact"]
    result = cli("query", "--file", str(folder / "box.mbox"))
    assert result.exit_code != 0 and "a mailbox holds many messages" in result.output


def test_a_long_or_damaged_message_is_reported_and_the_others_added(tmp_path):
    folder = tmp_path / "mail"
    folder.mkdir()
    big = make_message(ENGLISH * 400, "big", "big@x")
    write_mbox(folder / "box.mbox", [make_message(ENGLISH, "small", "s@x"), big, make_message(CHINESE, "x", "t@x")])
    with dedupdb.open(tmp_path / "db.sqlite") as db:
        summary = db.add([folder], workers=0, max_file_size="20K")
        keys = _keys(db)
    assert [(Path(k).name, r.split(" (")[0]) for k, r in summary.failed] == [
        ("box.mbox#2", "larger than the file limit of 20 KiB")
    ]
    assert [Path(k).name for k in keys] == ["box.mbox#s@x", "box.mbox#t@x"]


def test_the_mbox_split_unescapes_from_lines_and_holds_no_long_message(tmp_path):
    path = tmp_path / "box"
    path.write_bytes(
        b"From a@x Mon Jan  5 10:00:00 2026\nSubject: one\n\nFirst body\n>From here on, escaped\n\n"
        b"From b@x Mon Jan  5 10:01:00 2026\nSubject: two\n\n" + b"x" * 5000 + b"\n\n"
        b"From c@x Mon Jan  5 10:02:00 2026\nSubject: three\n\nThird\n"
    )
    with open(path, "rb") as stream:
        messages = list(split_mbox(stream, 0, 0, None, max_bytes=1000))
    assert [m.position for m in messages] == [1, 2, 3]
    assert b"\nFrom here on, escaped\n" in messages[0].data
    assert messages[1].data is None
    assert messages[2].end_offset == path.stat().st_size


def test_body_cleaning_keeps_the_text_and_drops_what_is_not_it():
    body = ("Thanks!\n\n> quoted line one\n> quoted line two\n\n---------- Forwarded message ---------\n"
            "From: A <a@x>\nDate: today\nSubject: s\nTo: b@x\n\nThe real text.\n-- \nMy signature\n")
    assert clean_body(body) == "Thanks!\n\nquoted line one\nquoted line two\n\nThe real text."


def test_messages_parsed_by_worker_processes_give_what_one_process_gives(tmp_path, monkeypatch):
    import dedupdb.ingest.pipeline as pipeline

    folder = tmp_path / "mail"
    folder.mkdir()
    pdf = make_pdf(tmp_path / "p.pdf", LONG).read_bytes()
    texts = [ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, CHINESE, CHINESE_EDITED, CHINESE_OTHER]
    messages = [
        make_message(f"{texts[n % 6]} ({n % 40})", f"s{n}", None if n % 7 == 0 else f"w{n % 90}@x",
                     attachments=(("p.pdf", pdf),) if n % 25 == 0 else ())
        for n in range(150)
    ]
    write_mbox(folder / "box.mbox", messages)
    results = []
    for workers, batch_bytes in ((0, 32 << 20), (2, 32 << 20), (0, 20_000)):
        monkeypatch.setattr(pipeline, "POOL_AT_ONCE_BYTES", 0 if workers else 1 << 40)
        monkeypatch.setattr(pipeline, "_MAIL_BATCH_BYTES", batch_bytes)  # many small batches
        with dedupdb.open(tmp_path / f"db{workers}-{batch_bytes}.sqlite") as db:
            summary = db.add([folder], workers=workers)
            groups = sorted(sorted(m.key for m in g.members) for g in db.clusters())
            results.append((summary.records, summary.failed, _keys(db), groups))
    assert results[0] == results[1] == results[2]
    assert results[0][0] == 156 and len(results[0][3]) >= 3


def test_damaged_messages_give_parts_or_reasons_never_an_error(tmp_path):
    import random

    pdf = make_pdf(tmp_path / "p.pdf", LONG).read_bytes()
    whole = bytes(make_message(CHINESE, "天气", "d@x", charset="gb2312", attachments=(("p.pdf", pdf),)))
    rng = random.Random(5)
    for _ in range(300):
        data = bytearray(whole)
        for _ in range(rng.randint(1, 40)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        parsed = parse_message(bytes(data), 1 << 20, 5)
        assert parsed.parts and all((p.text is None) != (p.error is None) for p in parsed.parts)
