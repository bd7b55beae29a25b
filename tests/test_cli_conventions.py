"""Command-line conventions: global options before the command, --version, completion, exit statuses."""

from __future__ import annotations

import json

import pytest

import dedupdb
from dedupdb.ingest import pipeline
from dedupdb.cli.commands import EXIT_PARTIAL, app
from dedupdb.errors import ReadError

from .conftest import ENGLISH, ENGLISH_OTHER, write


@pytest.fixture
def folder(tmp_path):
    root = tmp_path / "notes"
    write(root / "a.txt", ENGLISH)
    write(root / "b.txt", ENGLISH_OTHER)
    return root


# --- 1. global options ---------------------------------------------------------------------------------


def test_global_db_before_the_command(runner, tmp_path, folder):
    db = tmp_path / "global.db"
    result = runner.invoke(app, ["--db", str(db), "add", str(folder)])
    assert result.exit_code == 0, result.output
    assert "added 2" in result.output and db.exists()
    result = runner.invoke(app, ["--db", str(db), "add", str(folder), "--format", "json"])
    assert json.loads(result.stdout)["unchanged"] == 2


def test_command_db_still_works_and_wins_over_global(runner, tmp_path, folder):
    outer, inner = tmp_path / "outer.db", tmp_path / "inner.db"
    result = runner.invoke(app, ["--db", str(outer), "add", str(folder), "--db", str(inner)])
    assert result.exit_code == 0, result.output
    assert inner.exists() and not outer.exists()


def test_global_db_wins_over_env_var(runner, tmp_path, folder, monkeypatch):
    env_db, global_db = tmp_path / "env.db", tmp_path / "global.db"
    monkeypatch.setenv("DEDUPDB_DB", str(env_db))
    result = runner.invoke(app, ["--db", str(global_db), "add", str(folder)])
    assert result.exit_code == 0, result.output
    assert global_db.exists() and not env_db.exists()
    result = runner.invoke(app, ["add", str(folder)])  # the env var alone still works
    assert result.exit_code == 0, result.output
    assert env_db.exists()


def test_global_db_reaches_reading_commands(runner, tmp_path, folder):
    db = tmp_path / "g.db"
    assert runner.invoke(app, ["--db", str(db), "add", str(folder)]).exit_code == 0
    result = runner.invoke(app, ["--db", str(db), "stats", "--format", "json"])
    assert result.exit_code == 0, result.output
    assert result.stdout == _stats_via_command_db(runner, db)


@pytest.mark.parametrize("command", [["report", "--format", "json"], ["pairs", "--format", "jsonl"],
                                     ["check", "--format", "json"], ["journal", "--format", "json"],
                                     ["reindex", "--format", "json"], ["export", "--format", "jsonl"]])
def test_global_db_reaches_every_command_as_its_own_would(runner, tmp_path, folder, monkeypatch, command):
    """The global --db and the command's own --db name the same store, for each command that takes one."""
    db = tmp_path / "g.db"
    monkeypatch.setenv("DEDUPDB_DB", str(tmp_path / "elsewhere.db"))  # neither may fall back to it
    assert runner.invoke(app, ["--db", str(db), "add", str(folder)]).exit_code == 0
    before = runner.invoke(app, [*command, "--db", str(db)])
    after = runner.invoke(app, ["--db", str(db), *command])
    assert before.exit_code == 0 and after.exit_code == 0, (before.output, after.output)
    assert after.stdout == before.stdout and not (tmp_path / "elsewhere.db").exists()


def _stats_via_command_db(runner, db) -> str:
    result = runner.invoke(app, ["stats", "--db", str(db), "--format", "json"])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_global_db_of_a_missing_database_is_the_usual_error(runner, tmp_path):
    result = runner.invoke(app, ["--db", str(tmp_path / "none.db"), "report"])
    assert result.exit_code == 1
    assert "Error:" in result.output


def test_version(runner):
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"dedupdb {dedupdb.__version__}\n" == "dedupdb 0.1.0\n"


def test_help_lists_commands_global_options_and_completion(runner):
    result = runner.invoke(app, ["--help"])
    assert result.exit_code == 0, result.output
    for word in ("add", "report", "query", "--db", "--version", "--install-completion", "--show-completion"):
        assert word in result.output


def test_no_arguments_still_shows_help(runner):
    result = runner.invoke(app, [])
    assert "add" in result.output and "Usage" in result.output


def test_unknown_option_is_a_usage_error(runner):
    assert runner.invoke(app, ["--nonsense"]).exit_code == 2
    assert runner.invoke(app, ["add", "--nonsense", "x"]).exit_code == 2


# --- 2. exit statuses of add -----------------------------------------------------------------------------


@pytest.fixture
def unreadable(monkeypatch):
    """Reading any file named bad*.txt fails as a permission error would."""
    real = pipeline.read_bytes

    def flaky(path, *limit):
        if path.name.startswith("bad"):
            raise ReadError(str(path), "permission denied")
        return real(path, *limit)

    monkeypatch.setattr(pipeline, "read_bytes", flaky)


def test_add_all_read_is_status_0(cli, folder):
    result = cli("add", str(folder))
    assert result.exit_code == 0, result.output


def test_skipped_files_do_not_change_the_status(cli, mixed_folder):
    # binary files, a hidden folder and a .jpg: skipped by rule, not failures
    result = cli("add", str(mixed_folder), "--format", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["skipped"] >= 1 and summary["failed"] == 0


def test_unreadable_files_are_status_23_and_counted(cli, folder, unreadable):
    write(folder / "bad.txt", ENGLISH)
    result = cli("add", str(folder))
    assert result.exit_code == EXIT_PARTIAL == 23, result.output
    assert "added 2" in result.output and "failed 1" in result.output
    assert "bad.txt: permission denied" in result.output
    result = cli("add", str(folder), "--format", "json")
    assert result.exit_code == 23
    summary = json.loads(result.stdout)
    assert summary["unchanged"] == 2 and summary["failed"] == 1  # what could be read was kept


def test_errors_file_lists_failed_paths_with_reasons(cli, folder, tmp_path, unreadable):
    write(folder / "bad.txt", ENGLISH)
    write(folder / "bad two.txt", ENGLISH_OTHER)
    errors = tmp_path / "errors.tsv"
    result = cli("add", str(folder), "--errors", str(errors))
    assert result.exit_code == 23, result.output
    lines = sorted(errors.read_text(encoding="utf-8").splitlines())
    assert lines == [
        f"{folder / 'bad two.txt'}\tpermission denied",
        f"{folder / 'bad.txt'}\tpermission denied",
    ]


def test_errors_file_is_empty_when_nothing_failed(cli, folder, tmp_path):
    errors = tmp_path / "errors.tsv"
    errors.write_text("stale\n")
    result = cli("add", str(folder), "--errors", str(errors))
    assert result.exit_code == 0, result.output
    assert errors.read_text() == ""


def test_errors_file_that_cannot_be_written_is_an_error(cli, folder, tmp_path, unreadable):
    write(folder / "bad.txt", ENGLISH)
    result = cli("add", str(folder), "--errors", str(tmp_path / "no" / "such" / "dir" / "e.tsv"))
    assert result.exit_code == 1
    assert "Error: cannot write" in result.output


def test_file_over_the_size_limit_is_a_failure(cli, tmp_path):
    folder = tmp_path / "f"
    write(folder / "small.txt", ENGLISH)
    write(folder / "big.txt", ENGLISH_OTHER * 10)
    errors = tmp_path / "e.tsv"
    result = cli("add", str(folder), "--max-file-size", "1K", "--errors", str(errors))
    assert result.exit_code == 23, result.output
    assert errors.read_text(encoding="utf-8").startswith(f"{folder / 'big.txt'}\tlarger than the file limit")
