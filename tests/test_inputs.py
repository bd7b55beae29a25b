"""Bad input is reported, never fatal: stray bytes in a text, a file name that is not UTF-8, an unclosed CSV quote,
files and records over the size limits."""

from __future__ import annotations

import codecs
import io
import json
import os
import random
from pathlib import Path

import pytest
import xxhash

import dedupdb
import dedupdb.ingest.pipeline as pipeline
from dedupdb.errors import InputError, ReadError
from dedupdb.ingest.records import BadRecord, EndOfRecords, Record, RecordOptions, read_records
from dedupdb.config import parse_size
from dedupdb.ingest.sources import decode_bytes, few_replacements

from .conftest import CHINESE, CHINESE_OTHER, ENGLISH, ENGLISH_OTHER, interrupt_batch, write

LONG_CHINESE = CHINESE * 4 + CHINESE_OTHER * 4


def _json(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _stray(raw: bytes, at: int, bad: bytes = b"\xff") -> bytes:
    return raw[:at] + bad + raw[at:]


def _bad_name(folder: Path, name: bytes = b"bad-\xff.txt", text: str = ENGLISH_OTHER) -> Path:
    """A file whose name is not valid UTF-8, as Python sees it (with a surrogate escape)."""
    raw = os.path.join(os.fsencode(folder), name)
    try:
        with open(raw, "wb") as f:
            f.write(text.encode())
    except OSError:
        pytest.skip("this file system refuses names that are not UTF-8")
    return Path(os.fsdecode(raw))


# --- 1. a few undecodable bytes ------------------------------------------------------------------


@pytest.mark.parametrize("encoding", ["utf-8", "gb18030"])
def test_a_stray_byte_is_replaced_not_fatal(encoding):
    raw = LONG_CHINESE.encode(encoding)
    middle = len(raw) // 2 - (len(raw) // 2) % (3 if encoding == "utf-8" else 2)  # on a character boundary
    decoded = decode_bytes(_stray(raw, middle))
    assert decoded.encoding == encoding and decoded.replaced == 1
    assert decoded.text.replace("\ufffd", "", 1) == LONG_CHINESE
    assert decoded.note == f"1 undecodable byte replaced by U+FFFD (read as {encoding})"


KOREAN = "오늘은 날씨가 정말 좋아서 우리는 함께 공원에 산책을 갔습니다. 호수에서 낚시를 하는 사람들이 많았고 아이들은 잔디밭에서 연을 날리고 있었습니다."
TRADITIONAL = "今天天氣很好，我們一起去公園散步，看到很多人在湖邊釣魚，孩子們在草地上放風箏，大家都很開心。這家酒店的服務態度非常差，房間又小又髒。"


@pytest.mark.parametrize(
    ("text", "encoding", "read_as"), [(KOREAN, "euc_kr", "cp949"), (TRADITIONAL, "big5", "big5hkscs")], ids=["euc-kr", "big5"]
)
def test_a_stray_byte_in_another_legacy_encoding(text, encoding, read_as):
    """The detector judges the text without its stray bytes: EUC-KR is not taken for GB18030, which would read
    its bytes as Chinese characters."""
    decoded = decode_bytes(text.encode(encoding) + b"\xff" + text.encode(encoding))
    assert decoded.encoding == read_as and decoded.replaced == 1
    assert decoded.text == text + "\ufffd" + text


def test_a_cut_character_and_scattered_bytes_are_counted():
    raw = LONG_CHINESE.encode()
    assert decode_bytes(raw[:-1]).replaced == 2  # the last character cut short: 2 of its 3 bytes are left
    two = _stray(_stray(raw, 30, b"\xfe"), 91, b"\xc0")
    decoded = decode_bytes(two)
    assert decoded.replaced == 2 and decoded.text.count("\ufffd") == 2
    # A byte dropped inside a character spoils that character too.
    inside = decode_bytes(_stray(raw, 31))
    assert inside.replaced == 4 and inside.encoding == "utf-8" and inside.text.startswith(LONG_CHINESE[:10])


def test_bad_unit_in_utf16_big_endian_keeps_the_byte_order():
    raw = codecs.BOM_UTF16_BE + CHINESE[:4].encode("utf-16-be") + b"\xd8\x00" + CHINESE[4:].encode("utf-16-be")
    decoded = decode_bytes(raw)
    assert decoded.text == CHINESE[:4] + "\ufffd" + CHINESE[4:] and decoded.replaced == 2


@pytest.mark.parametrize("stray", [b"\xff", b"\xe9", b"\x80"])
def test_utf8_with_a_stray_byte_is_not_taken_for_a_legacy_encoding(stray):
    """The detector, shown English with a little Chinese and one stray byte, would pick cp1252 or johab."""
    text = f"{ENGLISH} 今天天气很好 {ENGLISH}"
    decoded = decode_bytes(_stray(text.encode(), 60, stray))
    assert decoded.encoding == "utf-8" and decoded.replaced == 1
    assert decoded.text == text[:60] + "\ufffd" + text[60:]


def test_legacy_encodings_still_win_over_utf8_with_replacements():
    latin = "Café crème brûlée, à la façon de grand-mère, naïve"
    decoded = decode_bytes(latin.encode("latin-1"))
    assert decoded.text == latin and decoded.replaced == 0


def test_more_than_a_few_replacements_is_binary():
    raw = (LONG_CHINESE * 3).encode()
    bad = few_replacements(len(raw.decode())) + 1
    step = len(raw) // (bad + 1)
    damaged = b"".join(raw[i * step : (i + 1) * step] + b"\xff" for i in range(bad)) + raw[bad * step :]
    with pytest.raises(ReadError, match="binary"):
        decode_bytes(damaged)


@pytest.mark.parametrize("kind", ["nul", "controls", "random", "random-no-controls"])
def test_real_binaries_are_still_binary(kind):
    rng = random.Random(7)
    data = {
        "nul": ENGLISH.encode() + b"\x00\x00\x01\x02" + ENGLISH.encode(),
        "controls": bytes(rng.choice(b"\x01\x02\x03\x04\x05\x06\x0e\x0fabc") for _ in range(2000)),
        "random": bytes(rng.randrange(256) for _ in range(4096)),
        "random-no-controls": bytes(rng.randrange(0x20, 0x100) for _ in range(4096)),
    }[kind]
    with pytest.raises(ReadError, match="binary"):
        decode_bytes(data)


@pytest.fixture
def stray_folder(tmp_path) -> Path:
    folder = tmp_path / "stray"
    raw = LONG_CHINESE.encode()
    (folder).mkdir()
    (folder / "utf8.txt").write_bytes(_stray(raw, 3 * 40))
    (folder / "gb.txt").write_bytes(_stray(CHINESE_OTHER.encode("gb18030") * 3, 2 * 20))
    (folder / "clean.txt").write_bytes(ENGLISH.encode())
    (folder / "blob.txt").write_bytes(bytes(range(256)) * 8)
    return folder


def test_cli_lists_replaced_bytes_as_warnings(cli, stray_folder):
    result = cli("add", str(stray_folder))
    assert result.exit_code == 0, result.output
    assert "added 3" in result.output and "failed 0" in result.output and "skipped 1" in result.output
    assert "warnings 2 (-v lists them)" in result.output
    assert "undecodable" not in result.output  # listed only with -v
    (stray_folder / "utf8.txt").write_bytes(_stray(LONG_CHINESE.encode(), 3 * 50))  # changed: read again
    verbose = cli("add", "-v", str(stray_folder))
    assert verbose.exit_code == 0, verbose.output
    assert "utf8.txt: 1 undecodable byte replaced by U+FFFD (read as utf-8)" in verbose.output
    assert "blob.txt: binary file" in verbose.output
    assert "updated 1" in verbose.output and "warnings 1 in" in verbose.output


def test_json_and_library_carry_the_warnings(cli, stray_folder, db_path):
    summary = _json(cli("add", str(stray_folder), "--format", "json"))
    assert summary["added"] == 3 and summary["failed"] == 0
    assert sorted((Path(w["path"]).name, w["message"]) for w in summary["warnings"]) == [
        ("gb.txt", "1 undecodable byte replaced by U+FFFD (read as gb18030)"),
        ("utf8.txt", "1 undecodable byte replaced by U+FFFD (read as utf-8)"),
    ]
    with dedupdb.open(db_path) as db:
        for name in ("utf8.txt", "gb.txt"):
            os.utime(stray_folder / name, (2, 2))
        summary = db.add([stray_folder], workers=0)
        assert summary.unchanged == 3 and summary.warnings == []  # the same bytes: not read again
        (stray_folder / "utf8.txt").write_bytes(_stray(LONG_CHINESE.encode(), 3 * 41))
        summary = db.add([stray_folder], workers=0)
        assert summary.updated == [str(stray_folder / "utf8.txt")] and not summary.failed
        assert summary.warnings == [(str(stray_folder / "utf8.txt"), "1 undecodable byte replaced by U+FFFD (read as utf-8)")]
        assert db.query(LONG_CHINESE)[0].path == str(stray_folder / "utf8.txt")


# --- 2. file names that are not UTF-8 ----------------------------------------------------------------


def test_cli_bad_name_argument_fails_alone(cli, tmp_path):
    good = write(tmp_path / "good.txt", ENGLISH)
    bad = _bad_name(tmp_path)
    result = cli("add", str(good), str(bad))
    assert result.exit_code == 23, result.output  # some files could not be read
    assert "added 1" in result.output and "failed 1" in result.output
    assert "bad-\ufffd.txt: name is not valid UTF-8" in result.output
    assert "Traceback" not in result.output
    again = cli("add", str(good), str(bad), "--format", "json")
    assert again.exit_code == 23, again.output
    summary = json.loads(again.stdout)
    assert summary["unchanged"] == 1
    assert summary["failed_paths"] == [{"path": str(tmp_path / "bad-\ufffd.txt"), "reason": "name is not valid UTF-8"}]


def test_library_bad_name_argument_and_folder(tmp_path, db_path):
    good = write(tmp_path / "good.txt", ENGLISH)
    bad = _bad_name(tmp_path)
    bad_folder = Path(os.fsdecode(os.path.join(os.fsencode(tmp_path), b"dir-\xfe")))
    os.mkdir(bad_folder)
    write(bad_folder / "inside.txt", CHINESE)
    walked = tmp_path / "walked"
    walked.mkdir()
    write(walked / "fine.txt", CHINESE_OTHER)
    _bad_name(walked, b"odd-\xff.txt")
    with dedupdb.open(db_path) as db:
        summary = db.add([bad, good, bad_folder, walked])
        assert summary.added == [str(good), str(walked / "fine.txt")]
        assert summary.failed == [
            (str(tmp_path / "bad-\ufffd.txt"), "name is not valid UTF-8"),
            (str(tmp_path / "dir-\ufffd"), "name is not valid UTF-8"),
        ]
        assert (str(walked / "odd-\ufffd.txt"), "name is not valid UTF-8") in summary.skipped


# --- 3. CSV: an unclosed quote ---------------------------------------------------------------------

CSV_UNCLOSED = (
    "id,text\n"
    "1,first record of the table\n"
    '2,"an opening quote that is never closed\n'
    "3,third record of the table\n"
    '4,"fourth, with a comma and ""doubled"" quotes"\n'
    "5,fifth record of the table\n"
)


def _read(data: str, start: tuple[int, int] = (0, 0), **kwargs) -> list:
    """Every item read, checking on the way that the hasher holds exactly the bytes before each item's end."""
    raw = data.encode()
    hasher = xxhash.xxh3_128(raw[: start[0]])
    out = []
    options = RecordOptions("csv", "text", "id")
    for item in read_records(io.BytesIO(raw), options, start[0], start[1], "utf-8", hasher, **kwargs):
        assert hasher.hexdigest() == xxhash.xxh3_128(raw[: item.end_offset]).hexdigest(), item
        consumed = raw[: item.end_offset]
        assert consumed.count(b"\n") + (not consumed.endswith(b"\n") and bool(consumed)) == item.end_line, item
        out.append(item)
    return out


def test_unclosed_quote_is_reported_and_the_records_after_it_are_read():
    items = _read(CSV_UNCLOSED)
    bad = [i for i in items if isinstance(i, BadRecord)]
    assert [(b.line, b.reason.split(":")[0]) for b in bad] == [(3, "unclosed quote")]
    assert "reading resumed at line 4" in bad[0].reason
    assert bad[0].end_offset == CSV_UNCLOSED.index("3,third")  # resumes just past the bad record's first line
    records = [(r.record_id, r.text, r.line) for r in items if isinstance(r, Record)]
    assert records == [
        ("1", "first record of the table", 2),
        ("3", "third record of the table", 4),
        ("4", 'fourth, with a comma and "doubled" quotes', 5),
        ("5", "fifth record of the table", 6),
    ]
    assert items[-1] == EndOfRecords(len(CSV_UNCLOSED.encode()), 6)


@pytest.mark.parametrize(
    ("data", "reason", "ids", "bad_lines"),
    [
        ('id,text\n1,one\n2,"open to the end\n3,three\n', "runs on to the end of the file", ["1", "3"], [3]),
        ('id,text\n1,one\n2,"open\n3,three\n4,"four"\n', "breaks there", ["1", "3", "4"], [3]),
        # The quote closes on line 4, but the record comes out with a field too many: line 4 is read again, and
        # is bad itself (its stray quote is text now, and it still has 3 fields).
        ('id,text\n1,one\n2,"open\n3,three",x\n4,four\n', "leaving 3 fields where the header has 2", ["1", "4"],
         [3, 4]),
        ('id,text\n1,one\n2,"open at the very end', "runs on to the end of the file", ["1"], [3]),
        ('id,text\n1,one\n2,"abc"def,"open\n3,three\n', "does not end on its line", ["1", "3"], [3]),
    ],
    ids=["to-eof", "broken-by-a-later-quote", "field-count", "last-line", "within-a-line"],
)
def test_unclosed_quote_variants(data, reason, ids, bad_lines):
    items = _read(data)
    bad = [i for i in items if isinstance(i, BadRecord)]
    assert [b.line for b in bad] == bad_lines
    assert bad[0].reason.startswith("unclosed quote") and reason in bad[0].reason
    assert [r.record_id for r in items if isinstance(r, Record)] == ids


def test_quoted_newlines_commas_and_doubled_quotes_still_work():
    data = (
        "id,text,lang\n"
        '1,"a record\nacross three\nlines, with commas",en\n'
        '2,"she said ""hello, there""\nand left",en\n'
        '3,"""quoted"" at the start, and at the end: ""x""",en\n'
        "4,plain,en\n"
    )
    items = _read(data)
    records = {r.record_id: (r.text, r.line) for r in items if isinstance(r, Record)}
    assert records["1"] == ("a record\nacross three\nlines, with commas", 2)
    assert records["2"] == ('she said "hello, there"\nand left', 5)
    assert records["3"] == ('"quoted" at the start, and at the end: "x"', 7)
    assert records["4"] == ("plain", 8)
    assert items[-1].end_line == 8 and not [i for i in items if isinstance(i, BadRecord)]
    # A stray quote after a closing one, within one line, reads as the csv module always read it.
    lenient = _read('id,text\n1,"abc"def\n')
    assert [(r.record_id, r.text) for r in lenient if isinstance(r, Record)] == [("1", "abcdef")]


def test_resuming_after_a_bad_record_reads_on_from_the_right_place():
    resume_at = CSV_UNCLOSED.index("3,third")
    items = _read(CSV_UNCLOSED, (resume_at, 3))
    assert [r.record_id for r in items if isinstance(r, Record)] == ["3", "4", "5"]
    assert not [i for i in items if isinstance(i, BadRecord)]


def test_cli_csv_unclosed_quote_grows_and_resumes(cli, tmp_path):
    path = write(tmp_path / "t.csv", CSV_UNCLOSED)
    summary = _json(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert summary["records"] == 4 and summary["bad_record_count"] == 1
    assert summary["bad_records"][0]["where"] == f"{path}:3"
    assert summary["bad_records"][0]["reason"].startswith("unclosed quote")
    with open(path, "a") as f:
        f.write("6,sixth record appended later\n")
    grown = _json(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert grown["records"] == 1 and grown["updated"] == 1 and grown["bad_record_count"] == 0
    again = _json(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert again["unchanged"] == 1
    keys = [json.loads(line)["key"].rsplit("#")[-1] for line in cli("export").stdout.splitlines()]
    assert keys == ["1", "3", "4", "5", "6"]


def test_library_interrupted_csv_with_bad_records_resumes_exactly(tmp_path, db_path, monkeypatch):
    """Batches end inside the records an unclosed quote swallowed: the committed offsets and digests must still
    let the rerun read only what is not stored."""
    rows = ["id,text"]
    for i in range(1, 41):
        rows.append(f'{i},"record {i} opens a quote' if i % 7 == 0 else f"{i},{CHINESE_OTHER} number {i}")
    path = write(tmp_path / "r.csv", "\n".join(rows) + "\n")
    resume = interrupt_batch(monkeypatch, at=4, batch=5)
    options = RecordOptions("csv", id_field="id")
    with dedupdb.open(db_path) as db:
        with pytest.raises(KeyboardInterrupt):
            db.add([path], records=options, workers=0)
        kept = db.store.counts()["documents"]
        # Batches are cut by lines, not records (the records are parsed by the workers): three of them stored.
        assert 10 <= kept < 35
        resume()
        summary = db.add([path], records=options, workers=0)
        assert summary.records == 35 - kept  # read on from the stored offset, not from the start
        keys = {r[0].rsplit("#")[-1] for r in db.store.conn.execute("SELECT key FROM documents")}
        assert keys == {str(i) for i in range(1, 41) if i % 7}


# --- 4. size limits --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "size"),
    [("1500", 1500), ("200K", 200 << 10), ("64M", 64 << 20), ("1G", 1 << 30), ("1.5k", 1536), ("64MiB", 64 << 20),
     ("10kb", 10 << 10), (" 2 m ", 2 << 20), (4096, 4096)],
)
def test_parse_size(text, size):
    assert parse_size(text) == size


@pytest.mark.parametrize("text", ["", "x", "12Q", "-1", "0", "1e3", "K", True])
def test_parse_size_refuses(text):
    with pytest.raises(InputError):
        parse_size(text, "--max-file-size")


def test_cli_file_limit(cli, tmp_path):
    folder = tmp_path / "f"
    write(folder / "small.txt", ENGLISH)
    big = write(folder / "big.txt", ENGLISH_OTHER * 10)  # about 1.7 KB
    result = cli("add", str(folder), "--max-file-size", "1K")
    assert result.exit_code == 23, result.output  # a file over the limit is one not read
    assert "added 1" in result.output and "failed 1" in result.output
    assert f"{big}: larger than the file limit of 1 KiB (raise it with --max-file-size)" in result.output
    raised = _json(cli("add", str(folder), "--max-file-size", "4K", "--format", "json"))
    assert raised["added"] == 1 and raised["unchanged"] == 1 and raised["failed"] == 0


@pytest.mark.parametrize("option", ["--max-file-size", "--max-record-size"])
@pytest.mark.parametrize("value", ["12Q", "0", "lots"])
def test_cli_bad_limit_is_one_line(cli, tmp_path, db_path, option, value):
    path = write(tmp_path / "a.txt", ENGLISH)
    result = cli("add", str(path), option, value)
    assert result.exit_code == 2  # a bad option value: a usage error
    assert result.output.startswith(f"Error: {option}: ") and len(result.output.strip().splitlines()) == 1
    assert not db_path.exists()


def test_cli_help_shows_the_limits(runner):
    from dedupdb.cli.commands import app

    result = runner.invoke(app, ["add", "--help"])
    text = " ".join(result.output.replace("│", " ").split())
    assert "--max-file-size" in text and "[default: 64 MiB]" in text
    assert "--max-record-size" in text and "[default: 16 MiB]" in text


def test_cli_record_limit_for_lines_jsonl_and_csv(cli, tmp_path):
    long_text = ENGLISH_OTHER * 3  # about 500 bytes
    lines = write(tmp_path / "l.txt", f"{ENGLISH}\n{long_text}\n{CHINESE}\n")
    summary = _json(cli("add", str(lines), "--lines", "--max-record-size", "300", "--format", "json"))
    assert summary["records"] == 2
    assert summary["bad_records"] == [
        {"where": f"{lines}:2", "reason": "longer than the record limit of 300 bytes (raise it with --max-record-size)"}
    ]
    jsonl = write(tmp_path / "j.jsonl", "".join(json.dumps({"text": t}) + "\n" for t in (ENGLISH, long_text)))
    summary = _json(cli("add", str(jsonl), "--records", "auto", "--max-record-size", "300", "--format", "json"))
    assert summary["records"] == 1 and "--max-record-size" in summary["bad_records"][0]["reason"]
    words = "many words without a comma " * 10
    csv_text = f'id,text\n1,"{ENGLISH}"\n2,"{words}\n{words}"\n3,{CHINESE}\n'
    table = write(tmp_path / "t.csv", csv_text)
    summary = _json(cli("add", str(table), "--id-field", "id", "--max-record-size", "300", "--format", "json"))
    # Over the limit across lines, the record may as well be an unclosed quote: reading resumes on line 4, which
    # is bad on its own.
    assert summary["records"] == 2 and [b["where"] for b in summary["bad_records"]] == [f"{table}:3", f"{table}:4"]
    assert "--max-record-size" in summary["bad_records"][0]["reason"]
    # The limit is part of how the file is read: another one reads it again, and a plain add keeps it.
    raised = _json(cli("add", str(table), "--id-field", "id", "--max-record-size", "1K", "--format", "json"))
    assert raised["records"] == 3 and raised["bad_record_count"] == 0 and raised["updated"] == 1
    assert _json(cli("add", str(tmp_path), "--format", "json"))["unchanged"] == 3


def test_library_limits(tmp_path, db_path):
    small = write(tmp_path / "small.txt", ENGLISH)
    big = write(tmp_path / "big.txt", ENGLISH_OTHER * 10)
    posts = write(tmp_path / "posts.txt", f"{ENGLISH}\n{'x' * 2000}\n")
    with dedupdb.open(db_path) as db:
        with pytest.raises(InputError, match="max_file_size"):
            db.add([small], max_file_size="huge")
        with pytest.raises(InputError, match="max_record_size"):
            db.add([small], max_record_size=0)
        with pytest.raises(InputError, match="record limit"):
            RecordOptions("lines", max_record_bytes=-5)
        summary = db.add([small, big], max_file_size=1024)
        assert summary.added == [str(small)]
        assert summary.failed == [(str(big), "larger than the file limit of 1 KiB (raise it with --max-file-size)")]
        summary = db.add([posts], records=RecordOptions("lines"), max_record_size="1K")
        assert summary.records == 1 and summary.bad_records[0][0] == f"{posts}:2"
        assert db.add([big], max_file_size="2M").added == [str(big)]


def test_file_limit_reaches_the_worker_processes(tmp_path, db_path, monkeypatch):
    """The second batch is read in worker processes: the limit and the warnings must travel with it."""
    monkeypatch.setattr(pipeline, "INGEST_BATCH", 64)
    folder = tmp_path / "many"
    for i in range(64):
        write(folder / f"a{i:03}.txt", f"{ENGLISH_OTHER} {i}")
    for i in range(62):
        write(folder / f"b{i:03}.txt", f"{CHINESE_OTHER} {i}")
    write(folder / "z-big.txt", ENGLISH * 20)
    (folder / "z-stray.txt").write_bytes(_stray(LONG_CHINESE.encode(), 30))
    shipped = []
    real_submit = pipeline.WorkPool.submit

    def submit(self, work, items):
        shipped.extend(job[0] for job in items if work is pipeline.read_files)
        return real_submit(self, work, items)

    monkeypatch.setattr(pipeline.WorkPool, "submit", submit)
    with dedupdb.open(db_path) as db:
        summary = db.add([folder], workers=2, max_file_size="2K")
    assert str(folder / "z-big.txt") in shipped and str(folder / "z-stray.txt") in shipped and len(shipped) == 64
    assert len(summary.added) == 127
    assert summary.failed == [(str(folder / "z-big.txt"), "larger than the file limit of 2 KiB (raise it with --max-file-size)")]
    assert summary.warnings == [(str(folder / "z-stray.txt"), "1 undecodable byte replaced by U+FFFD (read as utf-8)")]
