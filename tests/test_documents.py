"""Documents read as the text a person sees: PDF, DOCX, ODT, EPUB, RTF; their failures, bounds and cleanup."""

from __future__ import annotations

import hashlib
import json
import threading
import time
import zipfile
from pathlib import Path

import pytest

import dedupdb
import dedupdb.ingest.documents as documents
from dedupdb.errors import ReadError
from dedupdb.ingest.readers import decode_file
from dedupdb.text.normalize import normalize

from .conftest import CHINESE, CHINESE_OTHER, ENGLISH, ENGLISH_OTHER, write
from .writers import make_docx, make_epub, make_odt, make_pdf, make_rtf, make_scanned_pdf

ENGLISH_LONG = "\n\n".join([ENGLISH, ENGLISH_OTHER, ENGLISH.replace("twelve", "nine")])
CHINESE_LONG = "\n\n".join([CHINESE, CHINESE_OTHER, CHINESE.replace("公园", "河边")])
WRITERS = {".pdf": make_pdf, ".docx": make_docx, ".odt": make_odt, ".epub": make_epub, ".rtf": make_rtf}


def _sha(folder: Path) -> dict[str, str]:
    return {str(p): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("suffix", sorted(WRITERS))
@pytest.mark.parametrize("text", [ENGLISH_LONG, CHINESE_LONG], ids=["english", "chinese"])
def test_each_format_reads_as_the_text_it_shows(tmp_path, suffix, text):
    path = WRITERS[suffix](tmp_path / f"doc{suffix}", text)
    got = decode_file(path)
    assert normalize(got).replace(" ", "") == normalize(text).replace(" ", "")


@pytest.mark.parametrize("text", [ENGLISH_LONG, CHINESE_LONG], ids=["english", "chinese"])
def test_the_copies_of_one_text_in_every_format_are_one_group(tmp_path, text):
    folder = tmp_path / "archive"
    write(folder / "note.txt", text)
    for suffix, writer in WRITERS.items():
        writer(folder / f"copy{suffix}", text)
    write(folder / "other.txt", ENGLISH_OTHER if text is CHINESE_LONG else CHINESE_OTHER)
    with dedupdb.open(tmp_path / "db.sqlite") as db:
        summary = db.add([folder], workers=0)
        assert not summary.failed
        assert len(summary.added) == 7
        groups = db.clusters()
    assert [sorted(Path(m.key).name for m in g.members) for g in groups] == [
        ["copy.docx", "copy.epub", "copy.odt", "copy.pdf", "copy.rtf", "note.txt"]
    ]


def test_failures_are_reported_one_line_each_and_the_rest_is_added(cli, tmp_path):
    folder = tmp_path / "archive"
    make_pdf(folder.mkdir() or folder / "good.pdf", ENGLISH_LONG)
    make_pdf(folder / "locked.pdf", ENGLISH_LONG, password="secret")
    whole = make_pdf(tmp_path / "whole.pdf", CHINESE_LONG).read_bytes()
    (folder / "truncated.pdf").write_bytes(whole[: len(whole) // 2])
    make_scanned_pdf(folder / "scan.pdf")
    (folder / "broken.docx").write_bytes(b"PK\x03\x04 this is not a zip archive")
    (folder / "broken.epub").write_bytes(make_epub(tmp_path / "b.epub", ENGLISH).read_bytes()[:300])
    (folder / "broken.rtf").write_text("plain words, no RTF header")
    write(folder / "note.txt", CHINESE_LONG)
    result = cli("add", str(folder), "--format", "json")
    assert result.exit_code == 23, result.output
    summary = json.loads(result.stdout)
    reasons = {Path(f["path"]).name: f["reason"] for f in summary["failed_paths"]}
    assert reasons["locked.pdf"] == "locked: needs a password"
    assert reasons["truncated.pdf"].startswith("damaged: ")
    assert reasons["scan.pdf"].startswith("no text layer")
    assert reasons["broken.docx"].startswith("damaged: ")
    assert reasons["broken.epub"].startswith("damaged: ")
    assert reasons["broken.rtf"].startswith("damaged: ")
    assert sorted(Path(p).name for p in _stored_keys(cli)) == ["good.pdf", "note.txt"]
    # The table form says each on one line, and nothing like a traceback.
    table = cli("add", str(folder))
    assert table.exit_code == 23
    assert "Traceback" not in table.output
    assert "locked.pdf: locked: needs a password" in table.output


def _stored_keys(cli) -> list[str]:
    result = cli("export")
    return [json.loads(line)["key"] for line in result.stdout.splitlines() if line.startswith("{")]


def test_a_zip_member_that_inflates_past_the_limit_is_refused_before_inflating(tmp_path, monkeypatch):
    bomb = tmp_path / "bomb.docx"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"<a>" + b"x" * 5_000_000 + b"</a>")
    assert bomb.stat().st_size < 20_000
    inflated = []
    real_open = zipfile.ZipFile.open
    monkeypatch.setattr(zipfile.ZipFile, "open", lambda self, *a, **k: inflated.append(a) or real_open(self, *a, **k))
    with pytest.raises(ReadError, match="refused: word/document.xml inflates past the file limit of 1 MiB"):
        documents.extract(str(bomb), bomb.read_bytes(), max_bytes=1 << 20)
    assert inflated == []  # its stated size was enough to refuse it
    with dedupdb.open(tmp_path / "db.sqlite") as db:
        summary = db.add([bomb], workers=0, max_file_size="1M")
    assert summary.failed and "inflates past the file limit" in summary.failed[0][1]


def test_a_member_that_lies_about_its_size_is_cut_off(tmp_path):
    bomb = tmp_path / "liar.docx"
    with zipfile.ZipFile(bomb, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("word/document.xml", b"<a>" + b"x" * 3_000_000 + b"</a>")
    data = bytearray(bomb.read_bytes())
    # Rewrite the uncompressed size in the central directory (and the local header) to claim 100 bytes.
    for signature, offset in ((b"PK\x01\x02", 24), (b"PK\x03\x04", 22)):
        at = data.find(signature)
        data[at + offset : at + offset + 4] = (100).to_bytes(4, "little")
    with pytest.raises(ReadError) as caught:
        documents.extract("liar.docx", bytes(data), max_bytes=1 << 20)
    assert caught.value.reason.startswith(("refused: ", "damaged: "))


def test_the_text_of_a_document_obeys_the_file_limit(tmp_path):
    path = make_pdf(tmp_path / "long.pdf", "\n\n".join([ENGLISH_LONG] * 80))
    with pytest.raises(ReadError, match="its text is larger than the file limit of 20 KiB"):
        documents.extract(str(path), path.read_bytes(), max_bytes=20 * 1024)


def test_a_slow_document_is_stopped_by_the_alarm_and_reported(tmp_path, monkeypatch):
    def slow(data, limits):
        while True:
            time.sleep(0.01)  # a step that never checks the deadline itself

    monkeypatch.setitem(documents._READERS, ".pdf", slow)
    path = make_pdf(tmp_path / "slow.pdf", ENGLISH)
    write(tmp_path / "note.txt", ENGLISH_OTHER)
    started = time.monotonic()
    with dedupdb.open(tmp_path / "db.sqlite") as db:
        summary = db.add([tmp_path], workers=0, extract_timeout=0.3)
    assert time.monotonic() - started < 30
    assert summary.failed == [(str(path), "took longer than 0.3 s to read (raise it with --extract-timeout)")]
    assert [Path(p).name for p in summary.added] == ["note.txt"]


def test_outside_the_main_thread_the_reader_checks_its_deadline(tmp_path, monkeypatch):
    def slow(data, limits):
        while True:
            time.sleep(0.01)
            limits.check()

    monkeypatch.setitem(documents._READERS, ".pdf", slow)
    caught = []

    def run():
        try:
            documents.extract("slow.pdf", b"", max_bytes=1 << 20, seconds=0.2)
        except ReadError as exc:
            caught.append(exc.reason)

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(30)
    assert caught == ["took longer than 0.2 s to read (raise it with --extract-timeout)"]


def test_the_extract_timeout_option_is_checked(cli, tmp_path):
    write(tmp_path / "a.txt", ENGLISH)
    result = cli("add", str(tmp_path / "a.txt"), "--extract-timeout", "0")
    assert result.exit_code == 2
    assert "Traceback" not in result.output


def test_documents_are_incremental_and_a_changed_one_is_read_again(tmp_path):
    folder = tmp_path / "docs"
    folder.mkdir()
    make_docx(folder / "a.docx", ENGLISH_LONG)
    make_odt(folder / "b.odt", CHINESE_LONG)
    with dedupdb.open(tmp_path / "db.sqlite") as db:
        first = db.add([folder], workers=0)
        again = db.add([folder], workers=0)
        make_docx(folder / "a.docx", CHINESE_LONG)
        changed = db.add([folder], workers=0)
        groups = db.clusters()
    assert len(first.added) == 2 and again.unchanged == 2 and not again.added
    assert [Path(p).name for p in changed.updated] == ["a.docx"]
    assert [sorted(Path(m.key).name for m in g.members) for g in groups] == [["a.docx", "b.odt"]]


def test_a_pdf_and_a_text_copy_are_cleaned_by_the_keep_rule_and_never_hardlinked(cli, tmp_path):
    folder = tmp_path / "archive"
    write(folder / "paper.txt", ENGLISH_LONG)
    make_pdf(folder / "paper.pdf", ENGLISH_LONG)
    assert cli("add", str(folder)).exit_code == 0
    before = _sha(folder)
    linked = json.loads(cli("clean", "--action", "hardlink", "--format", "json").stdout)
    assert linked["steps"] == []
    assert cli("clean", "--action", "hardlink", "--yes").exit_code == 0
    assert _sha(folder) == before
    to = tmp_path / "moved"
    moved = cli("clean", "--action", "move", "--to", str(to), "--keep", "largest", "--yes")
    assert moved.exit_code == 0, moved.output
    assert sorted(p.name for p in folder.iterdir()) == ["paper.pdf"]  # the larger file is kept
    assert cli("undo").exit_code == 0
    assert _sha(folder) == before


def test_query_a_document_file(cli, tmp_path):
    write(tmp_path / "store" / "note.txt", CHINESE_LONG)
    assert cli("add", str(tmp_path / "store")).exit_code == 0
    pdf = make_pdf(tmp_path / "q.pdf", CHINESE_LONG)
    hits = json.loads(cli("query", "--file", str(pdf), "--format", "json").stdout)
    assert [Path(h["key"]).name for h in hits] == ["note.txt"]


@pytest.mark.parametrize("suffix", sorted(WRITERS))
def test_damaged_bytes_of_any_format_give_a_reason_never_another_error(tmp_path, suffix):
    import random

    whole = WRITERS[suffix](tmp_path / f"doc{suffix}", "\n\n".join([ENGLISH, CHINESE])).read_bytes()
    rng = random.Random(suffix)
    for _ in range(150):
        data = bytearray(whole)
        for _ in range(rng.randint(1, 20)):
            data[rng.randrange(len(data))] = rng.randrange(256)
        if rng.random() < 0.3:
            data = data[: rng.randrange(len(data))]
        try:
            text = documents.extract(f"x{suffix}", bytes(data), max_bytes=1 << 20, seconds=5)
        except ReadError as exc:
            assert exc.reason.split(":")[0] in ("damaged", "locked", "refused", "no text layer (a scanned or empty document)")
            assert "\n" not in exc.reason
        else:
            assert isinstance(text, str) and text.strip()
