from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest

from dedupdb.sketch.bloom import BloomFilter, optimal_size
from dedupdb.cli.commands import app
from dedupdb.ops.streamfilter import FilterOptions, run_filter
from dedupdb.errors import InputError
from dedupdb.ingest.records import RecordOptions

from .conftest import CHINESE, CHINESE_EDITED, CHINESE_OTHER, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, write

NO_TEXT = "no field 'text' (--text-field names the field holding the text)"  # a record without the text's field


def test_bloom_sizing_follows_the_formulas():
    bits, hashes = optimal_size(1_000_000, 0.01)
    assert bits == math.ceil(-1_000_000 * math.log(0.01) / math.log(2) ** 2) == 9_585_059
    assert hashes == round(bits / 1_000_000 * math.log(2)) == 7


def test_bloom_never_forgets_and_errs_within_its_rate():
    rng = np.random.default_rng(42)
    n, rate = 20_000, 0.01
    bloom = BloomFilter(n, rate)
    h1, h2 = rng.integers(0, 2**63, n, dtype=np.uint64), rng.integers(0, 2**63, n, dtype=np.uint64)
    bloom.add_new(h1, h2)
    # no false negatives, ever
    assert bloom.add_new(h1, h2).all()
    # false positives on fresh items: near the configured rate (binomial bounds, fixed seed)
    trials = 50_000
    fresh = bloom.add_new(rng.integers(0, 2**63, trials, dtype=np.uint64), rng.integers(0, 2**63, trials, dtype=np.uint64))
    observed = fresh.mean()
    sigma = math.sqrt(rate * (1 - rate) / trials)
    assert observed <= rate + 4 * sigma
    assert abs(bloom.expected_false_positive_rate(n) - rate) < 0.002


def test_bloom_membership_adds_nothing_and_agrees_with_add_new():
    rng = np.random.default_rng(7)
    bloom = BloomFilter(5_000, 0.01)
    h1, h2 = rng.integers(0, 2**63, 5_000, dtype=np.uint64), rng.integers(0, 2**63, 5_000, dtype=np.uint64)
    assert not bloom.may_contain(h1, h2).any()  # an empty filter holds nothing
    bloom.add_new(h1[:2_500], h2[:2_500])
    count, fill = bloom.count, bloom.fill_ratio
    assert bloom.may_contain(h1[:2_500], h2[:2_500]).all()
    others = bloom.may_contain(h1[2_500:], h2[2_500:])
    assert others.mean() < 0.01 and (bloom.count, bloom.fill_ratio) == (count, fill)
    assert (bloom.add_new(h1[2_500:], h2[2_500:]) == others).all()
    assert len(bloom.may_contain(h1[:0], h2[:0])) == 0


def _run(text: str, **kwargs) -> tuple[str, object, str]:
    out, dropped = io.StringIO(), io.StringIO()
    options = FilterOptions(**kwargs)
    report = run_filter(io.BytesIO(text.encode("utf-8")), out, options, dropped)
    return out.getvalue(), report, dropped.getvalue()


def test_filter_lines_is_exact_on_small_input():
    lines = [ENGLISH, ENGLISH.upper(), ENGLISH_OTHER, CHINESE, "Ｔｈｅ  " + ENGLISH[4:], CHINESE, "", CHINESE_OTHER]
    out, report, dropped = _run("\n".join(lines) + "\n")
    assert out.splitlines() == [ENGLISH, ENGLISH_OTHER, CHINESE, CHINESE_OTHER]
    assert (report.read, report.kept, report.exact_duplicates) == (7, 4, 3)
    records = [json.loads(line) for line in dropped.splitlines()]
    assert [(r["key"], r["duplicate_of"]) for r in records] == [("2", "1"), ("5", "1"), ("6", "4")]


def test_filter_without_dropped_file_uses_the_bloom_filter_alone():
    out = io.StringIO()
    lines = "".join(f"record {i % 500}\n" for i in range(5000))
    report = run_filter(io.BytesIO(lines.encode()), out, FilterOptions(capacity=1000, error_rate=0.001))
    assert len(out.getvalue().splitlines()) == report.kept == 500
    assert report.false_positive_rate < 0.001


def test_filter_near_stage():
    text = "\n".join([CHINESE, CHINESE_EDITED, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER]) + "\n"
    out, report, dropped = _run(text, near=True)
    assert out.splitlines() == [CHINESE, ENGLISH, ENGLISH_OTHER]
    assert report.near_duplicates == 2
    assert [json.loads(d)["duplicate_of"] for d in dropped.splitlines()] == ["1", "3"]


def test_filter_jsonl_with_ids_and_bad_lines():
    rows = [{"id": "a", "text": ENGLISH}, {"id": "b", "text": ENGLISH.lower()}, {"id": "c"}]
    text = "".join(json.dumps(r) + "\n" for r in rows) + "not json\n"
    out, report, dropped = _run(text, records=RecordOptions("jsonl", "text", "id"))
    assert [json.loads(line)["id"] for line in out.splitlines()] == ["a"]
    assert [reason for _, reason in report.bad_records] == [NO_TEXT, "invalid JSON (Expecting value)"]
    assert json.loads(dropped)["duplicate_of"] == "a"


def test_filter_jsonl_takes_half_a_surrogate_pair_for_a_bad_record(runner):
    """A JSON escape can name half a surrogate pair, in the text or the id: that record is a bad one, with its line,
    and the stream goes on (it stopped there, with an error about arguments)."""
    text = (f'{{"id": "a", "text": "caf\\u00e9 \\ud800 ok"}}\n{{"id": "b", "text": "{ENGLISH}"}}\n'
            f'{{"id": "\\udc00", "text": "x y"}}\n{{"id": "c", "text": "{CHINESE}"}}\n')
    out, report, _ = _run(text, records=RecordOptions("jsonl", "text", "id"))
    assert [json.loads(line)["id"] for line in out.splitlines()] == ["b", "c"]
    assert report.bad_records == [(1, "not valid Unicode (an unpaired surrogate escape)"),
                                  (3, "not valid Unicode (an unpaired surrogate escape)")]
    result = runner.invoke(app, ["filter", "--format", "jsonl", "--id-field", "id"], input=text)
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["b", "c"]
    assert "bad record line 1: not valid Unicode" in result.stderr and "bad records 2" in result.stderr


def test_filter_reads_json_lines_as_add_does_and_numbers_bad_lines_where_they_are():
    """A JSON null or a missing field is no text (not the text "None"), a line that is not an object says so, and
    the parser's refusals are bad records; bad records keep their line numbers after byte-for-byte repeats were
    dropped unread."""
    text = ('{"text": null}\n{"text": "None"}\n[1, 2]\n{"text": "a b c"}\n{"text": "a b c"}\n{"text": "a b c"}\n'
            '{"text": ' + "9" * 5000 + '}\n{"text": ' + "[" * 100_000 + "]" * 100_000 + '}\nnot json\n{"x": 1}\n')
    for dropped in (False, True):  # the repeats dropped unread, or each kept with what it repeats
        out = io.StringIO()
        report = run_filter(io.BytesIO(text.encode()), out, FilterOptions(records=RecordOptions("jsonl", "text")),
                            io.StringIO() if dropped else None)
        assert [json.loads(line)["text"] for line in out.getvalue().splitlines()] == ["None", "a b c"]
        assert report.bad_records == [(1, NO_TEXT), (3, "not a JSON object"),
                                      (7, "invalid JSON (a number of more than 4,300 digits)"),
                                      (8, "invalid JSON (nested too deeply)"), (9, "invalid JSON (Expecting value)"),
                                      (10, NO_TEXT)]


def test_filter_csv_writes_its_header_only_once_it_is_read():
    """Blank lines before the header are passed over; a header lacking the column asked for is refused before
    anything is written; an empty stream writes nothing."""
    out, _, _ = _run("\n\nid,text\n1,hello there world\n2,hello there world\n", records=RecordOptions("csv", "text", "id"))
    assert out.splitlines() == ["id,text", "1,hello there world"]
    out = io.StringIO()
    with pytest.raises(InputError, match="no column 'text'"):
        run_filter(io.BytesIO(b"id,body\n1,hello\n"), out, FilterOptions(records=RecordOptions("csv", "text")))
    assert out.getvalue() == ""
    with pytest.raises(InputError, match="no column 'text'"):  # a row of empty fields is a header, not a blank line
        run_filter(io.BytesIO(b",,\nid,text\n1,hello\n"), io.StringIO(), FilterOptions(records=RecordOptions("csv", "text")))
    assert _run("", records=RecordOptions("csv", "text"))[0] == ""


def test_filter_csv_keeps_header():
    text = f'id,body\n1,"{ENGLISH}"\n2,"{ENGLISH.upper()}"\n3,other words here\n'
    out, report, _ = _run(text, records=RecordOptions("csv", "body", "id"))
    assert out.splitlines()[0] == "id,body" and len(out.splitlines()) == 3
    assert report.exact_duplicates == 1


def test_filter_cli_with_dropped_and_database(runner, cli, tmp_path, db_path):
    write(tmp_path / "stored.txt", ENGLISH)
    assert cli("add", str(tmp_path / "stored.txt")).exit_code == 0
    dropped = tmp_path / "dropped.jsonl"
    data = "\n".join([ENGLISH_OTHER, ENGLISH, ENGLISH_OTHER, CHINESE]) + "\n"
    result = runner.invoke(app, ["filter", "--dropped", str(dropped), "--db", str(db_path)], input=data)
    assert result.exit_code == 0, result.output
    assert result.stdout.splitlines()[:2] == [ENGLISH_OTHER, CHINESE]
    assert "kept 2" in result.stderr and "already stored 1" in result.stderr
    stages = [(json.loads(line)["stage"], json.loads(line)["duplicate_of"]) for line in dropped.read_text().splitlines()]
    assert stages == [("database", str(tmp_path / "stored.txt")), ("exact", "1")]


def test_filter_warns_when_capacity_is_exceeded(runner):
    data = "".join(f"distinct line {i}\n" for i in range(50))
    result = runner.invoke(app, ["filter", "--capacity", "10"], input=data)
    assert result.exit_code == 0 and "raise --capacity" in result.stderr


def test_export_unique(cli, tmp_path):
    rows = [{"id": 1, "text": CHINESE}, {"id": 2, "text": CHINESE_EDITED + "，真的"}, {"id": 3, "text": ENGLISH_OTHER}]
    write(tmp_path / "posts.jsonl", "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows))
    write(tmp_path / "lines.txt", f"{ENGLISH}\n{ENGLISH_EDITED}\n")
    assert cli("add", str(tmp_path / "posts.jsonl"), "--id-field", "id").exit_code == 0
    assert cli("add", str(tmp_path / "lines.txt"), "--lines").exit_code == 0
    result = cli("export", "--unique")
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert json.loads(lines[0]) == rows[0] and json.loads(lines[1]) == rows[2]  # JSONL records verbatim
    assert json.loads(lines[2]) == {"key": str(tmp_path / "lines.txt") + "#1", "text": ENGLISH}
    assert len(lines) == 3
    longest = cli("export", "--unique", "--keep", "longest", "--format", "lines").stdout.splitlines()
    assert CHINESE_EDITED + "，真的" in longest and ENGLISH in longest and len(longest) == 3
    shortest = cli("export", "--unique", "--keep", "shortest", "--format", "lines").stdout.splitlines()
    assert CHINESE in shortest and ENGLISH_EDITED in shortest
    everything = cli("export", "--format", "csv").stdout.splitlines()
    assert everything[0] == "key,text" and len(everything) == 6


def test_export_to_a_file_keeps_what_the_user_owns(cli, tmp_path):
    """-o never writes over a file the database holds documents of; a file's permissions stay its own; a file of
    two names (a hard link), a named pipe and a device are written in place, not replaced by a plain file; a
    device that refuses the bytes is a failure, not 'exported'."""
    import os
    import stat
    import threading

    source = write(tmp_path / "posts.jsonl", json.dumps({"id": 1, "text": ENGLISH}) + "\n")
    other = write(tmp_path / "other.jsonl", json.dumps({"id": 2, "text": CHINESE}) + "\n")
    for path in (source, other):
        assert cli("add", str(path), "--id-field", "id").exit_code == 0
    before = source.read_bytes()
    result = cli("export", "-o", str(source))  # it would hold other.jsonl's records too, and lose its own
    assert result.exit_code == 1 and "one of the 2 files" in result.output and source.read_bytes() == before
    private = write(tmp_path / "private.jsonl", "old\n")
    private.chmod(0o600)
    assert cli("export", "-o", str(private)).exit_code == 0
    assert stat.S_IMODE(private.stat().st_mode) == 0o600
    assert [json.loads(line)["text"] for line in private.read_text().splitlines()] == [ENGLISH, CHINESE]
    linked = write(tmp_path / "one.jsonl", "old\n")
    os.link(linked, tmp_path / "two.jsonl")
    assert cli("export", "-o", str(tmp_path / "two.jsonl")).exit_code == 0
    assert linked.read_text() == (tmp_path / "two.jsonl").read_text() != "old\n"
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    got = []
    reader = threading.Thread(target=lambda: got.append(pipe.read_text()))
    reader.start()
    assert cli("export", "-o", str(pipe)).exit_code == 0
    reader.join()
    assert json.loads(got[0].splitlines()[0])["text"] == ENGLISH and stat.S_ISFIFO(pipe.stat().st_mode)
    full = tmp_path / "full"  # a node of the device that refuses every byte (/dev/full), made here, where allowed
    try:
        os.mknod(full, stat.S_IFCHR | 0o666, os.makedev(1, 7))
    except (PermissionError, AttributeError):
        return
    result = cli("export", "-o", str(full))
    assert result.exit_code == 1 and "No space left" in result.output and stat.S_ISCHR(full.stat().st_mode)


def test_export_leaves_out_changed_sources(cli, tmp_path):
    path = write(tmp_path / "a.txt", ENGLISH)
    cli("add", str(path))
    write(path, ENGLISH_OTHER + " and more")
    result = cli("export")
    assert result.stdout == "" and "changed since it was indexed" in result.stderr


def test_export_says_which_records_an_edit_in_place_left_out(cli, tmp_path):
    """A record whose id was edited in place, its file keeping its size and time, is no longer found by its id:
    left out, and said (it went unsaid, where a changed file is said)."""
    import os

    path = write(tmp_path / "r.jsonl", "".join(json.dumps({"id": str(i), "text": f"{ENGLISH} {i}"}) + "\n"
                                              for i in range(4)))
    assert cli("add", str(path), "--id-field", "id").exit_code == 0
    kept = path.stat()
    path.write_text(path.read_text().replace('"id": "2"', '"id": "X"'))
    os.utime(path, ns=(kept.st_atime_ns, kept.st_mtime_ns))
    result = cli("export")
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == ["0", "1", "3"]
    assert "1 of its stored records not found in it" in result.stderr
