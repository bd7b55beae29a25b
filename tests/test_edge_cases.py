"""Edge cases a careful user runs into: links, overlapping paths, partial lines, odd CSV, markup in names."""

from __future__ import annotations

import json
import os

from dedupdb.cli.commands import app

from .conftest import CHINESE, CHINESE_OTHER, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, write


def _json(result):
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_symlinks_are_skipped_so_a_cleanup_never_keeps_a_link(cli, tmp_path):
    real = write(tmp_path / "t" / "real.txt", ENGLISH)
    os.symlink(real, tmp_path / "t" / "link.txt")
    summary = _json(cli("add", str(tmp_path / "t"), "--format", "json"))
    assert summary["added"] == 1
    assert {"path": str(tmp_path / "t" / "link.txt"), "reason": "symbolic link"} in summary["skipped_paths"]


def test_overlapping_paths_are_read_once(cli, tmp_path):
    write(tmp_path / "t" / "sub" / "a.txt", ENGLISH)
    summary = _json(cli("add", str(tmp_path / "t"), str(tmp_path / "t" / "sub"), str(tmp_path / "t" / "sub" / "a.txt"),
                        "--format", "json"))
    assert summary["added"] == 1 and summary["failed"] == 0


def test_plain_add_keeps_reading_a_record_file_as_records(cli, tmp_path):
    path = write(tmp_path / "t" / "c.jsonl", json.dumps({"text": ENGLISH}) + "\n")
    assert _json(cli("add", str(path), "--records", "jsonl", "--format", "json"))["records"] == 1
    with open(path, "a") as f:
        f.write(json.dumps({"text": ENGLISH_OTHER}) + "\n")
    summary = _json(cli("add", str(tmp_path / "t"), "--format", "json"))
    assert summary["records"] == 1
    keys = {h["key"].rsplit("/", 1)[-1] for h in _json(cli("query", ENGLISH_OTHER, "--format", "json"))}
    assert keys == {"c.jsonl#2"}


def test_a_last_line_still_being_written_is_read_again_whole(cli, tmp_path, db_path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"id": 1, "text": ENGLISH}) + "\n" + '{"id": 2, "text": "second rec')
    first = _json(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert first["records"] == 1 and first["bad_record_count"] == 1
    with open(path, "a") as f:
        f.write('ord is complete now and long enough"}\n')
    second = _json(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert second["bad_record_count"] == 0 and second["records"] == 2
    hits = _json(cli("query", "second record is complete now and long enough", "--format", "json"))
    assert [h["key"].rsplit("/", 1)[-1] for h in hits] == ["s.jsonl#2"]


def test_trailing_blank_lines_do_not_make_a_file_look_changed(cli, tmp_path):
    path = write(tmp_path / "b.jsonl", json.dumps({"text": ENGLISH}) + "\n\n\n")
    cli("add", str(path), "--records", "jsonl")
    again = _json(cli("add", str(path), "--records", "jsonl", "--format", "json"))
    assert again["unchanged"] == 1 and again["updated"] == 0
    assert cli("export").stdout.strip() == json.dumps({"text": ENGLISH})


def test_csv_quoted_newlines_and_doubled_quotes(cli, tmp_path):
    rows = ["id,text"] + [f"{i},row number {i} of the table" for i in range(25)]
    rows += ['q,"she said ""hello"" to everyone in the room"', 'm,"a record\nacross\nlines of text"']
    path = write(tmp_path / "t.csv", "\n".join(rows) + "\n")
    summary = _json(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert summary["records"] == 27 and summary["bad_record_count"] == 0
    with open(path, "a") as f:
        f.write("z,one more row appended later on\n")
    grown = _json(cli("add", str(path), "--id-field", "id", "--format", "json"))
    assert grown["records"] == 1
    exported = [json.loads(line)["key"].rsplit("#")[-1] for line in cli("export").stdout.splitlines()]
    assert exported[-3:] == ["q", "m", "z"]


def test_rm_of_a_file_path_forgets_the_file(cli, tmp_path):
    path = write(tmp_path / "a.txt", ENGLISH)
    cli("add", str(path))
    assert "forgot 1 documents" in cli("rm", str(path)).stdout
    assert _json(cli("add", str(path), "--format", "json"))["added"] == 1


def test_export_writes_safely_over_its_own_source(cli, tmp_path):
    path = write(tmp_path / "c.jsonl", "".join(json.dumps({"id": i, "text": t}) + "\n"
                                              for i, t in enumerate([ENGLISH, ENGLISH.upper(), CHINESE])))
    cli("add", str(path), "--id-field", "id")
    result = cli("export", "--unique", "-o", str(path))
    assert result.exit_code == 0 and "exported 2" in result.stderr
    assert [json.loads(line)["id"] for line in path.read_text().splitlines()] == [0, 2]


def test_export_to_dash_writes_standard_output_not_a_file_named_dash(cli, tmp_path, monkeypatch):
    path = write(tmp_path / "e.jsonl", json.dumps({"id": 1, "text": ENGLISH}) + "\n")
    cli("add", str(path), "--id-field", "id")
    monkeypatch.chdir(tmp_path)
    result = cli("export", "-o", "-")
    assert result.exit_code == 0, result.output
    assert [json.loads(line)["id"] for line in result.stdout.splitlines()] == [1]
    assert not (tmp_path / "-").exists()


def test_duplicate_ids_are_exported_once(cli, tmp_path):
    path = write(tmp_path / "d.jsonl", json.dumps({"id": 3, "text": ENGLISH}) + "\n" +
                 json.dumps({"id": 3, "text": CHINESE_OTHER}) + "\n")
    cli("add", str(path), "--id-field", "id")
    assert len(cli("export").stdout.splitlines()) == 1


def test_move_into_the_cleaned_folder_is_refused(cli, tmp_path):
    write(tmp_path / "t" / "a.txt", ENGLISH)
    write(tmp_path / "t" / "b.txt", ENGLISH)
    cli("add", str(tmp_path / "t"))
    result = cli("clean", "--action", "move", "--to", str(tmp_path / "t" / "dupes"), "--yes")
    assert result.exit_code == 1 and "--to must lie outside" in result.output
    assert (tmp_path / "t" / "a.txt").exists() and (tmp_path / "t" / "b.txt").exists()


def test_hardlink_twice_then_undo(cli, tmp_path):
    write(tmp_path / "t" / "a.txt", ENGLISH)
    write(tmp_path / "t" / "b.txt", ENGLISH)
    cli("add", str(tmp_path / "t"))
    assert cli("clean", "--action", "hardlink", "--yes").exit_code == 0
    cli("add", str(tmp_path / "t"))
    second = cli("clean", "--action", "hardlink", "--yes")
    assert "0 done" in second.stdout or "Nothing to clean" in second.stdout
    assert not list((tmp_path / "t").glob("*partial*"))
    result = cli("undo")
    assert result.exit_code == 0 and "Traceback" not in result.output


def test_clean_leaves_weak_links_of_a_chain_by_default(cli, tmp_path):
    words = ENGLISH.split()
    texts = [" ".join(words[:i] + [f"x{j}" for j in range(i, i + 4)] + words[i + 4:]) for i in (0, 8, 16)]
    for i, text in enumerate(texts):
        write(tmp_path / "c" / f"{i}.txt", text)
    cli("add", str(tmp_path / "c"))
    planned = cli("clean").stdout.splitlines()
    everything = cli("clean", "--min-similarity", "0").stdout.splitlines()
    assert len(planned) <= len(everything)


def test_markup_in_names_and_texts_is_shown_as_is(cli, tmp_path):
    text = "see [/usr/bin] and [red]this[/red] in the manual for the details you need"
    write(tmp_path / "d[/x]" / "a.txt", text)
    write(tmp_path / "d[/x]" / "b.txt", text)
    cli("add", str(tmp_path / "d[/x]"))
    assert "d[/x]/a.txt" in cli("report").stdout
    result = cli("query", text)
    assert result.exit_code == 0 and "[red]this[/red]" in result.stdout


def test_filter_and_query_read_gb18030(runner, cli, tmp_path):
    data = "的一是在不了有和人这中大为上个国我以要\n的一是在不了有和人这中大为上个国我以要\n的一在是不了有和人这\n".encode("gb18030")
    result = runner.invoke(app, ["filter"], input=data)
    assert result.exit_code == 0 and "kept 2" in result.stderr
    write(tmp_path / "z.txt", CHINESE)
    cli("add", str(tmp_path / "z.txt"))
    hits = _json(cli("query", "-", "--format", "json", input=CHINESE.encode("gb18030")))
    assert hits and hits[0]["exact"]


def test_bad_query_options_are_refused(cli, tmp_path):
    write(tmp_path / "a.txt", ENGLISH_EDITED)
    cli("add", str(tmp_path / "a.txt"))
    assert cli("query", ENGLISH, "--top", "-1").exit_code == 2
    assert cli("query", ENGLISH, "--threshold", "5").exit_code == 2
