"""The documentation names everything the command line offers: every command in the README's command list and
with a section of docs/commands.md, every option in its command's section, a help for every command, and only
real commands in the README's first session."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import typer

from dedupdb.cli.commands import app

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text("utf-8")
COMMANDS_DOC = (ROOT / "docs" / "commands.md").read_text("utf-8")

CLI = typer.main.get_command(app)
COMMANDS = sorted(CLI.commands)
GLOBAL = "Global options"  # the section of docs/commands.md for the options before the command


def _long_flag(param) -> str:
    flags = [*param.opts, *param.secondary_opts]
    return next((f for f in flags if f.startswith("--")), flags[0])


def _options(command) -> list[str]:
    return [_long_flag(p) for p in command.params if p.param_type_name == "option" and not getattr(p, "hidden", False)]


OPTIONS = [(name, flag) for name in COMMANDS for flag in _options(CLI.commands[name])]
GLOBAL_OPTIONS = _options(CLI)


def _sections(text: str) -> dict[str, str]:
    """The level-two sections of a Markdown text by heading (a command's: its name, from '## `dedupdb NAME`')."""
    out = {}
    for part in re.split(r"^## ", text, flags=re.M)[1:]:
        heading, _, body = part.partition("\n")
        named = re.fullmatch(r"`dedupdb ([\w-]+)`\s*", heading)
        out[named.group(1) if named else heading.strip()] = body
    return out


SECTIONS = _sections(COMMANDS_DOC)


def _readme_command_list() -> str:
    sections = _sections(README)
    assert "Commands" in sections, "README.md has no '## Commands' section"
    return sections["Commands"]


def _first_session() -> list[str]:
    """The commands run in the README's first shell code block that runs dedupdb ('$ dedupdb X' or 'dedupdb X')."""
    for language, block in re.findall(r"^```(\w*)\n(.*?)^```", README, flags=re.M | re.S):
        if language not in ("console", "bash", "sh", "shell", "text", ""):
            continue
        commands = []
        for line in block.splitlines():
            words = re.sub(r"^\$\s+", "", line.strip()).split()
            if not words or words[0] != "dedupdb":
                continue
            words = words[1:]
            while words and words[0].startswith("-"):  # global options: --db PATH, --version
                words = words[2:] if words[0] == "--db" else words[1:]
            if words:
                commands.append(words[0])
        if commands:
            return commands
    return []


SESSION = list(dict.fromkeys(_first_session()))  # each command once


@pytest.mark.parametrize("command", COMMANDS)
def test_command_is_in_the_readme_command_list(command):
    assert re.search(rf"`dedupdb {re.escape(command)}\b", _readme_command_list()), (
        f"'dedupdb {command}' is missing from README.md's command list (## Commands)"
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_command_has_a_section_in_docs_commands(command):
    assert command in SECTIONS, f"docs/commands.md has no section '## `dedupdb {command}`'"


@pytest.mark.parametrize("command,option", OPTIONS, ids=[f"{c}-{o}" for c, o in OPTIONS])
def test_option_is_documented_in_its_command_section(command, option):
    section = SECTIONS.get(command, "")
    assert re.search(rf"`{re.escape(option)}(?![\w-])", section), (
        f"option {option} of 'dedupdb {command}' is not documented in its section of docs/commands.md"
    )


@pytest.mark.parametrize("option", GLOBAL_OPTIONS)
def test_global_option_is_documented(option):
    assert re.search(rf"`{re.escape(option)}(?![\w-])", SECTIONS.get(GLOBAL, "")), (
        f"global option {option} is not documented under '## {GLOBAL}' in docs/commands.md"
    )


@pytest.mark.parametrize("command", COMMANDS)
def test_command_has_a_help(command):
    assert (CLI.commands[command].help or "").strip(), f"'dedupdb {command}' has no help text"


def test_readme_first_session_runs_dedupdb():
    assert SESSION, "README.md's first shell code block runs no dedupdb command"


@pytest.mark.parametrize("command", SESSION or ["<none>"])
def test_readme_first_session_uses_real_commands(command):
    assert command in CLI.commands, f"README.md's first session runs 'dedupdb {command}', which is no command"


@pytest.mark.parametrize("link", sorted(set(re.findall(r"\]\((docs/[^)#]+)", README))))
def test_readme_links_to_docs_that_exist(link):
    assert (ROOT / link).is_file(), f"README.md links to {link}, which does not exist"


@pytest.mark.parametrize("command", sorted(CLI.commands))
def test_help_paragraphs_are_whole_sentences(command):
    """A help's paragraphs hold no line break of the source: the terminal wraps them at its own width."""
    assert all("\n" not in paragraph for paragraph in CLI.commands[command].help.split("\n\n"))


def test_ray_help_names_its_extra(runner):
    for args in (["--help"], ["ray", "--help"]):
        result = runner.invoke(app, args, env={"COLUMNS": "200"})
        assert 'pip install "dedupdb[ray]"' in result.stdout
