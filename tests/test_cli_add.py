from __future__ import annotations

import json
import os
import shutil

import dedupdb
from dedupdb.cli.commands import app

from .conftest import CHINESE_OTHER, ENGLISH, write


def _summary(result) -> dict:
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _clusters(cli) -> list[dict]:
    result = cli("report", "--format", "json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def _cluster_paths(clusters) -> list[set[str]]:
    return [{os.path.basename(m["path"]) for m in c["members"]} for c in clusters]


def test_add_mixed_folder_finds_copies_and_skips_binary(cli, mixed_folder):
    summary = _summary(cli("add", str(mixed_folder), "--format", "json"))
    assert summary["added"] == 10
    assert summary["failed"] == 0
    skipped = {os.path.basename(s["path"]): s["reason"] for s in summary["skipped_paths"]}
    assert skipped["image.txt"].startswith("binary")
    assert skipped["photo.jpg"] == "not a text file type"
    assert skipped[".hidden"] == "hidden folder"

    clusters = _cluster_paths(_clusters(cli))
    assert {"report.txt", "report copy.txt", "report-edited.md"} in clusters
    assert {"park-gb18030.txt", "park-utf16.txt", "park-edited.txt"} in clusters
    assert {"weather.txt", "page.html"} in clusters  # HTML reduced to its visible text
    assert not any("hotel.txt" in c or "empty.txt" in c for c in clusters)


def test_report_marks_exact_and_near_members(cli, mixed_folder):
    cli("add", str(mixed_folder))
    clusters = _clusters(cli)
    english = next(c for c in clusters if any(m["path"].endswith("report.txt") for m in c["members"]))
    by_name = {os.path.basename(m["path"]): m for m in english["members"]}
    assert by_name["report.txt"]["exact"] and by_name["report copy.txt"]["exact"]
    assert not by_name["report-edited.md"]["exact"]
    assert 0.5 <= by_name["report-edited.md"]["similarity"] < 1.0
    assert english["kind"] == "near"
    assert english["reclaimable_bytes"] == english["total_bytes"] - english["members"][0]["bytes"]


def test_readd_is_incremental(cli, mixed_folder):
    cli("add", str(mixed_folder))
    again = _summary(cli("add", str(mixed_folder), "--format", "json"))
    assert (again["added"], again["updated"], again["unchanged"], again["missing"]) == (0, 0, 10, 0)

    # modified, deleted and renamed files
    write(mixed_folder / "weather.txt", CHINESE_OTHER + " 更新")
    (mixed_folder / "copies" / "report copy.txt").unlink()
    shutil.move(mixed_folder / "zh" / "hotel.txt", mixed_folder / "zh" / "hotel-renamed.txt")
    third = _summary(cli("add", str(mixed_folder), "--format", "json"))
    assert third["updated"] == 1
    assert third["added"] == 1  # the renamed file
    assert third["missing"] == 2
    assert {os.path.basename(p) for p in third["missing_paths"]} == {"report copy.txt", "hotel.txt"}

    clusters = _cluster_paths(_clusters(cli))
    assert {"weather.txt", "page.html"} not in clusters  # weather.txt now holds other text
    assert {"hotel-renamed.txt", "weather.txt"} in clusters
    assert {"report.txt", "report-edited.md"} in clusters


def test_touched_but_unchanged_file_is_not_reindexed(cli, mixed_folder):
    cli("add", str(mixed_folder))
    path = mixed_folder / "report.txt"
    os.utime(path, ns=(path.stat().st_atime_ns, path.stat().st_mtime_ns + 10**9))
    summary = _summary(cli("add", str(mixed_folder), "--format", "json"))
    assert summary["unchanged"] == 10 and summary["updated"] == 0


def test_include_and_exclude(cli, mixed_folder):
    summary = _summary(cli("add", str(mixed_folder), "--only", "*.md", "--format", "json"))
    assert summary["added"] == 1
    summary = _summary(cli("add", str(mixed_folder), "--exclude", "zh", "--exclude", "*.html", "--format", "json"))
    assert summary["added"] == 4  # report, its copy, weather, empty (the .md is known already)
    excluded = {os.path.basename(s["path"]) for s in summary["skipped_paths"] if s["reason"] == "excluded"}
    assert excluded == {"zh", "page.html"}


def test_single_file_and_text_summary(cli, tmp_path):
    path = write(tmp_path / "one.txt", ENGLISH)
    result = cli("add", str(path))
    assert result.exit_code == 0
    assert "added 1" in result.stdout


def test_missing_path_is_one_line_error(cli, tmp_path):
    result = cli("add", str(tmp_path / "nope"))
    assert result.exit_code == 1
    assert "no such file or folder" in result.output
    assert "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_one_bad_file_does_not_stop_the_ingest(cli, tmp_path, monkeypatch):
    import dedupdb.ingest.pipeline as pipeline
    from dedupdb.errors import ReadError

    folder = tmp_path / "f"
    write(folder / "ok.txt", ENGLISH)
    write(folder / "bad.txt", CHINESE_OTHER)
    real = pipeline.read_bytes

    def flaky(path, *limit):
        if path.name == "bad.txt":
            raise ReadError(str(path), "permission denied")
        return real(path, *limit)

    monkeypatch.setattr(pipeline, "read_bytes", flaky)
    result = cli("add", str(folder))
    assert result.exit_code == 23  # some files could not be read
    assert "bad.txt: permission denied" in result.output
    assert "added 1" in result.output and "failed 1" in result.output


def test_library_add_and_env_var(tmp_path, monkeypatch, runner, mixed_folder):
    target = tmp_path / "env.db"
    monkeypatch.setenv("DEDUPDB_DB", str(target))
    result = runner.invoke(app, ["add", str(mixed_folder)])
    assert result.exit_code == 0, result.output
    assert target.exists()
    with dedupdb.open(target, create=False) as db:
        summary = db.add([mixed_folder])
        assert summary.unchanged == 10
        assert len(db.clusters()) == 3


def test_default_database_lives_in_user_data_dir(runner, mixed_folder, isolated_dirs):
    result = runner.invoke(app, ["add", str(mixed_folder)])
    assert result.exit_code == 0, result.output
    assert (isolated_dirs / "data" / "dedupdb" / "dedupdb.sqlite").exists()


def test_init_help_quotes_the_real_defaults(runner):
    result = runner.invoke(app, ["init", "--help"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.replace("│", " ").split())
    defaults = dedupdb.Settings()
    assert f"MinHash permutations [default: {defaults.num_perm}]" in text
    assert f"space-separated text [default: {defaults.word_ngram}]" in text
    assert f"CJK text [default: {defaults.cjk_ngram}]" in text
    assert f"0 for none [default: {defaults.char_ngram}]" in text
