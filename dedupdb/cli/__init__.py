"""The dedupdb command: typer commands (thin: parse, one library call, render) and their rendering."""

from dedupdb.cli.commands import app, main, run

__all__ = ["app", "main", "run"]
