"""The dedupdb command: parse options, make one library call, render. No SQL and no maths here."""

from __future__ import annotations

import atexit
import errno
import functools
import inspect
import io
import os
import signal
import sqlite3
import sys
import threading
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, Optional

import typer

try:  # typer 0.2x carries its own copy of click, whose context is the one commands run in
    from typer._click.exceptions import ClickException
    from typer._click.globals import get_current_context
except ImportError:  # older typer, on click itself
    from click import get_current_context
    from click.exceptions import ClickException

from dedupdb import __version__, compiled
from dedupdb.cli import render
from dedupdb.config import (
    DB_ENV_VAR,
    MAX_FILE_BYTES,
    MAX_RECORD_BYTES,
    PRESET_BANDING,
    PRESET_SUPER_SHINGLES,
    QUERY_CONTAINMENT,
    Settings,
    parse_size,
    size_text,
)
from dedupdb.errors import DedupError, InputError, OptionError
from dedupdb.ops.actions import Action

if TYPE_CHECKING:  # the database module brings numpy and the whole index: help and usage errors need neither
    from dedupdb.database import Database

app = typer.Typer(
    name="dedupdb",
    help="A local near-duplicate database for text: finds documents that are the same or nearly the same.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
)

_DEFAULTS = Settings()  # help texts quote the real defaults

DbOption = typer.Option(
    None, "--db", envvar=DB_ENV_VAR, help="Database file (default: in the user data dir).", show_default=False
)

# Exit statuses besides 0 (ok), 1 (error, one line on stderr), 2 (usage error) and 128 + signal (stopped).
EXIT_PARTIAL = 23  # add: some files could not be read (rsync's "partial transfer due to error")


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"dedupdb {__version__}")
        raise typer.Exit(0)


@app.callback()
def _global_options(
    ctx: typer.Context,
    db: Optional[Path] = typer.Option(
        None, "--db", help="Database file for every command (a command's own --db wins over it).", show_default=False
    ),
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Show the version and exit."
    ),
) -> None:
    ctx.ensure_object(dict)["db"] = db


def _db_given(db: Optional[Path]) -> Optional[Path]:
    """The database a command uses: its own --db given on the command line, else the global --db (before the
    command), else $DEDUPDB_DB (which arrives as the command's own --db), else None (the default)."""
    ctx = get_current_context(silent=True)
    if ctx is None:
        return db
    source = ctx.get_parameter_source("db")
    if db is not None and source is not None and source.name == "COMMANDLINE":
        return db
    root = ctx.find_root().obj
    global_db = root.get("db") if isinstance(root, dict) else None
    return global_db if global_db is not None else db


class ListFormat(str, Enum):
    table = "table"
    json = "json"


class ReportFormat(str, Enum):
    table = "table"
    json = "json"
    csv = "csv"


class PairsFormat(str, Enum):
    jsonl = "jsonl"
    csv = "csv"


class PairsBy(str, Enum):
    document = "document"
    content = "content"


class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP, raised in the main thread where Ctrl-C raises KeyboardInterrupt, so that the same
    clean-up runs: the transaction in progress rolls back, the work committed before it stays."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _stopped(signum: int) -> None:
    what = "Interrupted" if signum == signal.SIGINT else f"Stopped by {signal.Signals(signum).name}"
    render.err_console.print(
        f"{what}: work committed so far is kept; run the command again to resume.", highlight=False, soft_wrap=True
    )
    raise typer.Exit(128 + signum) from None


def friendly(command):
    """Turn library errors into a one-line message and exit status 1 (2 for a bad option value); Ctrl-C, SIGTERM
    and SIGHUP into one line and exit status 128 + the signal's number; a reader of the output going away into a
    quiet exit 0."""

    @functools.wraps(command)
    def wrapper(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except DedupError as exc:
            if _stop_signal is not None:  # a failure the stop caused (SIGTERM to the group ends the workers too)
                _stopped(_stop_signal)
            # soft_wrap: one line however narrow the terminal, so that scripts can read it as one
            render.err_console.print(f"Error: {render.controls_escaped(str(exc))}", highlight=False, markup=False,
                                     soft_wrap=True)
            raise typer.Exit(2 if isinstance(exc, OptionError) else 1) from None
        except KeyboardInterrupt as exc:
            _stopped(exc.signum if isinstance(exc, Terminated) else int(signal.SIGINT))
        except BrokenPipeError:
            # 'dedupdb pairs | head -1': the reader has what it wanted. (Before SQLite's errors: it is an OSError.)
            _stdout_to_devnull()
            raise typer.Exit(0) from None
        except UnicodeEncodeError:
            # Arguments that are not valid UTF-8 (a file name in another encoding) reach Python as surrogates.
            render.err_console.print("Error: a name or argument is not valid UTF-8", highlight=False)
            raise typer.Exit(1) from None
        except sqlite3.Error as exc:
            # Last resort: the store turns its SQLite errors into DatabaseError; one that escapes it is still one line.
            render.err_console.print(f"Error: database error: {render.controls_escaped(str(exc))}", highlight=False,
                                     markup=False, soft_wrap=True)
            raise typer.Exit(1) from None

    return wrapper


def _stdin():
    """Standard input as bytes; a one-line error when the command was started with it closed ('<&-')."""
    if sys.stdin is None:
        raise InputError("standard input is closed")
    return sys.stdin.buffer


class Preset(str, Enum):
    banding = PRESET_BANDING
    super_shingles = PRESET_SUPER_SHINGLES


def _warn_unfingerprinted(database: Database, containment: float | None) -> None:
    missing = database.unfingerprinted() if containment else 0
    if missing:
        render.err_console.print(
            f"Warning: {missing} texts stored before containment fingerprints existed are not searched for it; "
            "'dedupdb reindex --from-sources' reads them again",
            highlight=False, soft_wrap=True,
        )


def _open(db: Optional[Path], create: bool = False, **settings) -> Database:
    from dedupdb.database import Database

    return Database.open(_db_given(db), create=create, **settings)


@app.command()
@friendly
def init(
    db: Optional[Path] = DbOption,
    threshold: Optional[float] = typer.Option(None, help=f"Jaccard similarity for near-duplicates \\[default: {_DEFAULTS.threshold}]."),
    permutations: Optional[int] = typer.Option(None, help=f"MinHash permutations \\[default: {_DEFAULTS.num_perm}]."),
    word_ngram: Optional[int] = typer.Option(None, help=f"Shingle size in words, for space-separated text \\[default: {_DEFAULTS.word_ngram}]."),
    cjk_ngram: Optional[int] = typer.Option(None, help=f"Shingle size in characters, for CJK text \\[default: {_DEFAULTS.cjk_ngram}]."),
    char_ngram: Optional[int] = typer.Option(None, help=f"Size of the character n-grams short space-separated text adds to its words, 0 for none \\[default: {_DEFAULTS.char_ngram}]."),
    simhash_distance: Optional[int] = typer.Option(None, help=f"SimHash Hamming distance \\[default: {_DEFAULTS.simhash_distance}]."),
    preset: Optional[Preset] = typer.Option(
        None, help="How candidate pairs are found: LSH bands chosen for the threshold, or Broder's super-shingles "
        "(6 groups of 14 MinHash values, candidates on 2 equal groups; for near-identical texts only) "
        f"\\[default: {_DEFAULTS.preset}].",
    ),
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Output format."),
) -> None:
    """Create a database with chosen settings (the first 'add' does this with the defaults), and show the chance
    that a pair of each similarity becomes a candidate under its preset and the other one."""
    with _open(
        db,
        create=True,
        threshold=threshold,
        num_perm=permutations,
        word_ngram=word_ngram,
        cjk_ngram=cjk_ngram,
        char_ngram=char_ngram,
        simhash_distance=simhash_distance,
        preset=preset.value if preset else None,
    ) as database:
        if fmt is ListFormat.json:
            render.write_json(render.init_json(database))
            return
        render.console.print(f"Database ready at {database.path}", highlight=False)
        render.candidate_curves(database.candidate_curves(), database.settings.threshold)


class RecordFormat(str, Enum):
    auto = "auto"
    jsonl = "jsonl"
    csv = "csv"
    lines = "lines"


@app.command()
@friendly
def add(
    paths: list[Path] = typer.Argument(..., help="Files and folders to index (folders recursively); '-' for stdin."),
    db: Optional[Path] = DbOption,
    include: list[str] = typer.Option(
        [], "--include", metavar="GLOB",
        help="Also files matching this glob, whatever their type; adds to the default choice (repeatable).",
    ),
    only: list[str] = typer.Option(
        [], "--only", metavar="GLOB",
        help="Only files matching this glob: replaces the default choice of files (repeatable).",
    ),
    exclude: list[str] = typer.Option(
        [], "--exclude", metavar="GLOB", help="Skip files and folders matching this glob (repeatable)."
    ),
    follow_symlinks: bool = typer.Option(
        False, "--follow-symlinks",
        help="Follow symbolic links to files and folders, each by its own path (loops are skipped); without it, "
        "links are skipped (-v lists them).",
    ),
    records: Optional[RecordFormat] = typer.Option(
        None, "--records", help="Read files as records, one document each: by suffix (auto) or all in one format."
    ),
    lines: bool = typer.Option(False, "--lines", help="Each line of each file is a document (--records lines)."),
    text_field: Optional[str] = typer.Option(None, "--text-field", help="JSONL key or CSV column holding the text."),
    id_field: Optional[str] = typer.Option(None, "--id-field", help="JSONL key or CSV column holding the record id."),
    threshold: Optional[float] = typer.Option(None, help="Jaccard threshold, for a new database."),
    workers: Optional[int] = typer.Option(
        None, "--workers", min=0, help="Processes sketching texts, 0 for none \\[default: one per core]."
    ),
    max_file_size: Optional[str] = typer.Option(
        None, "--max-file-size", metavar="SIZE",
        help=f"Larger files are reported as failed, not read: bytes, or 200K, 64M, 1G \\[default: {size_text(MAX_FILE_BYTES)}].",
        show_default=False,
    ),
    max_record_size: Optional[str] = typer.Option(
        None, "--max-record-size", metavar="SIZE",
        help=f"Longer records are reported as bad records \\[default: {size_text(MAX_RECORD_BYTES)}].",
        show_default=False,
    ),
    extract_timeout: Optional[float] = typer.Option(
        None, "--extract-timeout", metavar="SECONDS", min=0.001,
        help="A document (PDF, DOCX...) that takes longer to read is reported as failed \\[default: 60].",
        show_default=False,
    ),
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Summary format."),
    verbose: bool = typer.Option(
        False, "--verbose", "-v", help="List skipped files with their reasons, and files read with a warning."
    ),
    errors: Optional[Path] = typer.Option(
        None, "--errors", metavar="FILE",
        help="Write the files that could not be read to FILE, one per line: path, a tab, the reason.",
    ),
) -> None:
    """Index files and folders incrementally: unchanged files are skipped, changed ones re-indexed.

    In folders, dedupdb reads files of a text type (.txt .md .html .json .csv ... see the README), documents
    (.pdf .docx .odt .epub .rtf) as their text, mail, and files of any other type or none (README, LICENSE)
    whose first 8 KiB read as text; known binary types (.jpg .zip ...) are skipped unread. --include adds files
    to that choice, --only replaces it, --exclude takes files out.

    Record files (JSONL, CSV, one text per line) hold one document per record, keyed FILE#ID or FILE#LINE.
    Mail (.eml, mbox, Maildir) holds one document per message, keyed FILE#MESSAGE-ID, and one per readable
    attachment, keyed FILE#MESSAGE-ID/NAME.

    Exit status 23 when some files could not be read (they are listed, and counted as failed); files skipped
    by rule (binary, hidden, of another type) do not count."""
    limits = {
        "max_file_size": None if max_file_size is None else parse_size(max_file_size, "--max-file-size"),
        "max_record_size": None if max_record_size is None else parse_size(max_record_size, "--max-record-size"),
    }
    options = None
    if lines or records or text_field or id_field:
        chosen = "lines" if lines else (records.value if records else "auto")
        from dedupdb.ingest.records import RecordOptions

        options = RecordOptions(chosen, text_field, id_field)
    from dedupdb.ingest.pipeline import add_targets

    add_targets(paths, options)  # a path that is not there fails before a first add makes its database
    with _open(db, create=True, threshold=threshold) as database:
        with render.progress_bar("Indexing", in_bytes=True) as progress:
            summary = database.add(
                paths, tuple(include), tuple(exclude), progress, options, workers=workers, only=tuple(only),
                follow_symlinks=follow_symlinks, extract_timeout=extract_timeout, **limits,
            )
    if fmt is ListFormat.json:
        render.write_json(render.add_summary_json(summary))
    else:
        render.add_summary(summary, verbose)
    if errors is not None:
        _write_errors(errors, summary.failed)
    if summary.failed:
        raise typer.Exit(EXIT_PARTIAL)


class JobKeep(str, Enum):
    first = "first"
    last = "last"
    longest = "longest"
    shortest = "shortest"


@app.command(name="ray")
@friendly
def ray_job(
    inputs: list[str] = typer.Argument(..., help="Record files and folders: local paths or URIs pyarrow opens (s3://...)."),
    out: Path = typer.Option(..., "--out", help="A new or empty folder for the job's output (Parquet)."),
    address: Optional[str] = typer.Option(None, "--address", help="A Ray cluster to run on \\[default: a local runtime]."),
    workers: Optional[int] = typer.Option(None, "--workers", min=1, help="CPUs of the local runtime \\[default: all]."),
    records: Optional[RecordFormat] = typer.Option(
        None, "--records", help="Read every input in this record format (default: by suffix; .parquet always)."
    ),
    lines: bool = typer.Option(False, "--lines", help="Each line of each file is a document (--records lines)."),
    text_field: Optional[str] = typer.Option(None, "--text-field", help="JSONL key, CSV or Parquet column holding the text."),
    id_field: Optional[str] = typer.Option(None, "--id-field", help="JSONL key, CSV or Parquet column holding the record id."),
    max_record_size: Optional[str] = typer.Option(
        None, "--max-record-size", metavar="SIZE", help="Records longer than this are bad records \\[default: 16M]."
    ),
    threshold: Optional[float] = typer.Option(None, help=f"Jaccard similarity for near-duplicates \\[default: {_DEFAULTS.threshold}]."),
    permutations: Optional[int] = typer.Option(None, help=f"MinHash permutations \\[default: {_DEFAULTS.num_perm}]."),
    unique: bool = typer.Option(False, "--unique", help="Also write the deduplicated corpus, as shards in the inputs' formats."),
    keep: JobKeep = typer.Option(JobKeep.first, "--keep", help="Which member of a cluster is kept: first or last in the input, longest or shortest text."),
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Summary format."),
) -> None:
    """Find the near-duplicates of a corpus too large for one machine on a Ray cluster (or a local runtime),
    with the engine 'add' uses, and write pairs, clusters, signatures and documents as Parquet; 'dedupdb import'
    loads them into a database. Needs the ray extra: pip install "dedupdb\\[ray]"."""
    import importlib.util

    from dedupdb.ingest.records import RecordOptions

    if importlib.util.find_spec("ray") is None or importlib.util.find_spec("pyarrow") is None:
        raise InputError('the ray extra is not installed: pip install "dedupdb[ray]"')
    from dedupdb.database import candidate_scheme
    from dedupdb.scaleout import job

    settings = Settings(**{k: v for k, v in {"threshold": threshold, "num_perm": permutations}.items() if v is not None})
    limit = None if max_record_size is None else parse_size(max_record_size, "--max-record-size")
    chosen = "lines" if lines else (records.value if records else "auto")
    options = RecordOptions(chosen, text_field, id_field, limit)
    terminal = sys.stderr.isatty()
    manifest = job.run(inputs, out, settings, candidate_scheme(settings), options, address, workers, keep.value, unique,
                       progress=render.job_stage, bars=terminal)
    if fmt is ListFormat.json:
        render.write_json(render.job_json(manifest, str(out)))
    else:
        render.job_summary(manifest, str(out))
    if manifest.failed_inputs:
        raise typer.Exit(EXIT_PARTIAL)  # as add: some inputs could not be read, the others were


def _write_errors(path: Path, failed: list[tuple[str, str]]) -> None:
    """One line per file not read: its path, a tab, the reason (control characters in either escaped, \\t, \\n)."""
    try:
        with open(path, "w", encoding="utf-8", errors="surrogateescape") as out:
            for name, reason in failed:
                out.write(f"{render.one_line(name)}\t{render.one_line(reason)}\n")
    except OSError as exc:
        raise DedupError(f"cannot write {path}: {exc.strerror or exc}") from None


class KeepFileRule(str, Enum):
    oldest = "oldest"
    newest = "newest"
    first = "first"
    last = "last"
    longest = "longest"
    shortest = "shortest"
    largest = "largest"
    smallest = "smallest"


KeepOption = typer.Option(
    KeepFileRule.oldest, "--keep",
    help="Which document of each group to keep: by modification time, order of adding, text length or size.",
)
PreferOption = typer.Option(None, "--prefer", help="Keep a document under this folder where there is one.")
TemplatesOption = typer.Option(
    False, "--include-templates",
    help="Also group texts that differ only in numbers, dates or names, or in one slot of a shared frame "
    "(template pairs, left apart by default).",
)


@app.command()
@friendly
def report(
    db: Optional[Path] = DbOption,
    fmt: ReportFormat = typer.Option(ReportFormat.table, "--format", help="Output format."),
    min_size: int = typer.Option(0, "--min-size", help="Only clusters whose documents total at least this many bytes."),
    keep: KeepFileRule = KeepOption,
    prefer: Optional[Path] = PreferOption,
    related: bool = typer.Option(
        False, "--related", help="Whole connected components, whose members may be alike only through others."
    ),
    templates: bool = TemplatesOption,
) -> None:
    """List duplicate groups, exact and near, the most reclaimable bytes first.

    Each group shows the document to keep (the same one 'clean' keeps with the same --keep and --prefer) and
    the others, each an exact copy of it or at least the threshold similar to it. Texts that differ only in
    numbers or one slot of a frame (template pairs) are grouped, as kind "template", with --include-templates."""
    with _open(db) as database:
        clusters = database.clusters(min_size=min_size, keep=keep.value, prefer=prefer, related=related,
                                     templates=templates)
        apart = 0 if templates else database.template_pair_count()
    if fmt is ReportFormat.json:
        render.write_json([render.cluster_json(c) for c in clusters])
    elif fmt is ReportFormat.csv:
        render.report_csv(clusters)
    else:
        render.report_table(clusters, related, apart)


@app.command()
@friendly
def query(
    text: Optional[str] = typer.Argument(None, help="The text to look for; '-' reads standard input."),
    file: Optional[Path] = typer.Option(None, "--file", "-f", help="Read the query text from this file."),
    db: Optional[Path] = DbOption,
    threshold: Optional[float] = typer.Option(
        None, min=0.0, max=1.0, help="Minimum Jaccard similarity \\[default: the database's]."
    ),
    top: int = typer.Option(10, "--top", min=0, help="At most this many results (0 for all)."),
    containment: float = typer.Option(
        QUERY_CONTAINMENT, "--containment", min=0.0, max=1.0,
        help="Also list documents holding at least this share of the text's shingles, such as the long text a "
        "remembered passage comes from (0: near-duplicates only).",
    ),
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Output format (with --records, json is one line a record)."),
    records: Optional[Path] = typer.Option(
        None, "--records", metavar="FILE",
        help="Look for every record of this file ('-': standard input), without adding any: JSON Lines, CSV or one "
        "text per line (by suffix; compressed too), read as 'add' reads them.",
    ),
    record_format: RecordFormat = typer.Option(
        RecordFormat.auto, "--record-format", help="Format of the --records file (auto: by suffix, else lines)."
    ),
    text_field: Optional[str] = typer.Option(None, "--text-field", help="JSONL key or CSV column holding the text."),
    id_field: Optional[str] = typer.Option(None, "--id-field", help="JSONL key or CSV column holding the record id."),
    workers: Optional[int] = typer.Option(
        None, "--workers", min=0, help="With --records: processes answering the records, 0 for none \\[default: cores]."
    ),
) -> None:
    """Find stored documents that are near-duplicates of a text, or that contain it; exact copies first, then by
    the share of the text each holds.

    With --records FILE, every record of a corpus is looked for, none is added: each record's matches (key,
    jaccard, containment, exact) are written as they are found, one JSON line a record with --format json. Bad
    records are listed on standard error, and make the exit status 23."""
    if records is not None:
        if text is not None or file is not None:
            raise DedupError("give TEXT, --file or --records, not two of them")
        _query_records(records, db, record_format.value, text_field, id_field, threshold, top, containment, fmt, workers)
        return
    if record_format is not RecordFormat.auto or text_field or id_field or workers is not None:
        raise DedupError("--record-format, --text-field, --id-field and --workers go with --records FILE")
    if file is not None and text is not None:
        raise DedupError("give either TEXT or --file, not both")
    if file is not None:
        from dedupdb.ingest.readers import decode_file

        content = decode_file(file)
    elif text == "-":
        from dedupdb.ingest.sources import decode

        content, _ = decode(_stdin().read(), "standard input")
    elif text is not None:
        content = text
    else:
        raise DedupError("give a TEXT to look for, '-' for standard input, or --file PATH")
    empty = "the database is empty; add documents with 'dedupdb add PATH' first"
    with _open(db) as database:
        # Asked only when nothing is found (or the text is refused): an empty store finds nothing. Its message still
        # comes first.
        try:
            hits = database.query(content, threshold=threshold, top=top, containment=containment or None)
        except DedupError:
            if database.is_empty():
                raise DedupError(empty) from None
            raise
        if not hits and database.is_empty():
            raise DedupError(empty)
        _warn_unfingerprinted(database, containment)
    if fmt is ListFormat.json:
        render.write_json(render.query_json(hits))
    else:
        render.query_table(hits)


def _query_records(path: Path, db, fmt_name: str, text_field, id_field, threshold, top, containment, fmt, workers) -> None:
    from contextlib import closing

    from dedupdb.ingest.records import RecordOptions

    options = RecordOptions(fmt_name, text_field, id_field)
    source = str(path) if str(path) == "-" else path
    with _open(db) as database:
        if database.is_empty():
            raise DedupError("the database is empty; add documents with 'dedupdb add PATH' first")
        _warn_unfingerprinted(database, containment)
        with render.progress_bar("Querying", in_bytes=True) as progress:
            found = database.query_records(source, options, threshold, top, containment or None, workers,
                                           render.known_total(progress), _stdin() if source == "-" else None)
            with closing(found):
                tally = render.query_results(found, str(path), fmt is ListFormat.json)
    render.query_results_summary(tally)
    if tally.bad:
        raise typer.Exit(EXIT_PARTIAL)


@app.command()
@friendly
def pairs(
    db: Optional[Path] = DbOption,
    fmt: PairsFormat = typer.Option(PairsFormat.jsonl, "--format", help="Output format."),
    by: PairsBy = typer.Option(
        PairsBy.document, "--by",
        help="document: every pair of documents, exact copies included; content: one line per pair of distinct "
        "texts, each by its first document key.",
    ),
    containment: Optional[float] = typer.Option(
        None, "--containment", min=0.0, max=1.0, metavar="X",
        help="Also pairs in which the smaller text holds at least X of its shingles in the larger (a truncated copy, "
        "an excerpt, texts merged into one), and the containment of every pair.",
    ),
) -> None:
    """Every pair of exact copies and verified near-duplicates with its scores (a, b, jaccard, hamming, exact,
    containment), one line each, for scripts and evaluation."""
    from contextlib import closing

    # The pairs stream from an open cursor: closed before the database, also when the output's reader goes away.
    with _open(db) as database, closing(database.pairs(by.value, containment)) as found:
        _warn_unfingerprinted(database, containment)
        if fmt is PairsFormat.csv:
            render.pairs_csv(found)
        else:
            render.pairs_jsonl(found)


@app.command()
@friendly
def stats(
    db: Optional[Path] = DbOption,
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Output format."),
) -> None:
    """Documents, clusters, reclaimable bytes, database size and settings."""
    with _open(db) as database:
        numbers = database.stats()
    if fmt is ListFormat.json:
        render.write_json(numbers)
    else:
        render.stats_table(numbers)


@app.command()
@friendly
def check(
    db: Optional[Path] = DbOption,
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Output format."),
) -> None:
    """Verify the database: SQLite's integrity check, stored signatures against their checksums, index rows,
    document counts, pairs and clusters.

    Exit status 0 when all hold, 1 with one line per failed check otherwise."""
    from dedupdb.database import check_path

    report = check_path(_db_given(db))
    if fmt is ListFormat.json:
        render.write_json(render.check_json(report))
    else:
        render.check_report(report)
    if not report.sound:
        raise typer.Exit(1)


@app.command()
@friendly
def reindex(
    db: Optional[Path] = DbOption,
    threshold: Optional[float] = typer.Option(None, help="A new Jaccard threshold to rebuild the index for."),
    from_sources: bool = typer.Option(
        False, "--from-sources",
        help="Read every indexed file and record file again and rebuild all fingerprints with this version's "
        "algorithm (what a store made by an older version needs).",
    ),
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Output format."),
) -> None:
    """Rebuild LSH bands, pairs and clusters from the stored signatures (no file is read again), or with
    --from-sources every fingerprint from the files themselves."""
    with _open(db) as database:
        if from_sources:
            if threshold is not None:
                raise DedupError("--from-sources keeps the threshold; change it with a second 'dedupdb reindex'")
            with render.progress_bar("Reading again", in_bytes=True) as progress:
                summary, gone = database.reindex_from_sources(progress)
            if fmt is ListFormat.json:
                render.write_json({**render.add_summary_json(summary), "forgotten_paths": gone})
                return
            for path in gone:
                render.err_console.print(f"forgotten (cannot be read again): {render.one_line(path)}", highlight=False,
                                         markup=False, soft_wrap=True)
            render.add_summary(summary)
            return
        with render.progress_bar("Reindexing") as progress:
            banding = database.reindex(threshold, progress)
        if fmt is ListFormat.json:
            render.write_json({"threshold": database.settings.threshold, "scheme": banding.describe()})
            return
        render.console.print(
            f"Reindexed at threshold {database.settings.threshold} ({banding.describe()})",
            highlight=False,
        )


@app.command()
@friendly
def optimize(
    db: Optional[Path] = DbOption,
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Output format."),
) -> None:
    """Merge each index's sorted runs into one of small blocks, so that a query reads one small block a key
    instead of a large one a key and run (worth it on a large store at rest; matches stay the same).

    Safe to interrupt: each index is merged in one transaction, kept whole or not at all."""
    with _open(db) as database:
        summary = database.optimize()
    if fmt is ListFormat.json:
        render.write_json({"runs_before": summary.runs_before, "runs_after": summary.runs_after,
                           "rewritten": summary.rewritten, "seconds": round(summary.seconds, 3)})
        return
    for name, label in (("index", "index rows"), ("containment", "containment rows")):
        before, after = summary.runs_before[name], summary.runs_after[name]
        if summary.rewritten[name]:
            line = f"{before} run{'s' * (before != 1)} merged into {after} of small blocks"
        else:
            line = "nothing to merge" + (" (one run of small blocks)" if after else " (no rows)")
        render.console.print(f"{label}: {line}", highlight=False)
    render.console.print(f"Optimized in {summary.seconds:.1f} s", highlight=False)


@app.command(name="import")
@friendly
def import_(
    directory: Path = typer.Argument(..., help="The output folder of a finished 'dedupdb ray' job."),
    db: Optional[Path] = DbOption,
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Summary format."),
) -> None:
    """Load a scale-out job's output into a new database (made with the job's settings), so that query, report,
    pairs and clean work on it without sketching again.

    The database must be new or empty. An import cut short leaves a partial database: delete it and import again."""
    from dedupdb.scaleout.importer import import_job, open_for_import

    with open_for_import(_db_given(db), directory) as database:
        with render.progress_bar("Importing") as progress:
            summary = import_job(database, directory, progress)
    if fmt is ListFormat.json:
        render.write_json(summary.to_json())
    else:
        render.console.print(
            f"imported {summary.documents:,} documents ({summary.contents:,} distinct texts, {summary.pairs:,} pairs, "
            f"{summary.clusters:,} clusters) from {directory} into {database.path} in {summary.seconds:.1f} s",
            highlight=False, markup=False, soft_wrap=True,
        )


class ExportFormat(str, Enum):
    jsonl = "jsonl"
    csv = "csv"
    lines = "lines"


@app.command()
@friendly
def export(
    db: Optional[Path] = DbOption,
    unique: bool = typer.Option(False, "--unique", help="One document per duplicate cluster (and every unique one)."),
    keep: KeepFileRule = typer.Option(KeepFileRule.oldest, "--keep", help="Which member of a group --unique keeps (as report and clean keep it)."),
    fmt: ExportFormat = typer.Option(ExportFormat.jsonl, "--format", help="Output format."),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="Write here instead of standard output ('-' is standard output)."),
    templates: bool = TemplatesOption,
) -> None:
    """Write the stored documents' texts, read back from their sources, for the next step of a pipeline."""
    warn = lambda message: render.err_console.print(f"Warning: {message}", highlight=False)  # noqa: E731
    with _open(db) as database:
        records = database.export(unique=unique, keep=keep.value, warn=warn, templates=templates)
        if output is None or str(output) == "-":  # '-' as the other commands read it, never a file named '-'
            count = render.export_records(records, fmt.value)
        else:
            from dedupdb.ops.fileops import write_named_file

            target = output.expanduser().resolve()
            # A corpus deduplicated in place (export --unique -o corpus.jsonl, its store holding it alone) is written
            # over its source; a source of a store holding others would lose its own records among theirs.
            others = database.sources_beside(target)
            if others:
                raise DedupError(f"{render.one_line(str(output))} is one of the {others + 1} files this database holds "
                                 "documents of: written over, it would hold the others' too; export to another file")
            try:
                count = write_named_file(target, lambda out: render.export_records(records, fmt.value, out))
            except OSError as exc:
                raise DedupError(f"cannot write {render.one_line(str(output))}: {exc.strerror or exc}") from None
    render.err_console.print(f"exported {count} documents", highlight=False)


@app.command()
@friendly
def diff(
    a: str = typer.Argument(..., help="A stored document's key or path, or any file."),
    b: str = typer.Argument(..., help="The other one."),
    db: Optional[Path] = DbOption,
    unified: bool = typer.Option(False, "--unified", "-u", help="One text with deletions and insertions marked."),
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="table, or json for the opcodes."),
) -> None:
    """Show what differs between two documents: characters for Chinese, words otherwise."""
    from dedupdb.text.diff import diff_texts

    with _open(db) as database:
        label_a, text_a = database.document_text(a)
        label_b, text_b = database.document_text(b)
        jaccard = database.similarity(text_a, text_b)
    result = diff_texts(text_a, text_b)
    if fmt is ListFormat.json:
        render.write_json(render.diff_json(label_a, text_a, label_b, text_b, jaccard, result))
    else:
        render.diff_view(label_a, text_a, label_b, text_b, jaccard, result, unified)


@app.command()
@friendly
def clean(
    db: Optional[Path] = DbOption,
    keep: KeepFileRule = KeepOption,
    prefer: Optional[Path] = PreferOption,
    action: Action = typer.Option(Action.list, "--action", help="What happens to the other files."),
    to: Optional[Path] = typer.Option(None, "--to", help="For --action move: the folder to move them into."),
    cluster: Optional[int] = typer.Option(None, "--cluster", help="Only this cluster (ids as in 'report')."),
    min_similarity: Optional[float] = typer.Option(
        None, "--min-similarity", help="Leave files less similar than this to the kept one \\[default: the threshold]."
    ),
    exact_only: bool = typer.Option(False, "--exact-only", help="Only exact copies."),
    under: Optional[Path] = typer.Option(None, "--under", help="Only act on files under this folder."),
    plan_file: Optional[Path] = typer.Option(
        None, "--plan", help="Carry out a plan written before by 'clean --format json' (its action and files)."
    ),
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="json: the plan (and with --yes, the outcome)."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Carry the plan out (without this: a dry run, never a prompt)."),
    null: bool = typer.Option(False, "-0", "--null", help="With --action list: separate paths with NUL."),
    templates: bool = TemplatesOption,
) -> None:
    """Plan which file of each duplicate group to keep and what to do with the rest; a dry run unless --yes.

    A file is acted on only for its own likeness to the kept file (an exact copy, or at least the threshold
    similar), and only while it still holds the bytes the plan saw."""
    from dedupdb.ops.cleanup import Outcome, Plan, carry_out, make_plan

    with _open(db) as database:
        if plan_file is not None:
            plan = Plan.from_json(_read_json(plan_file))
            if plan.database and Path(plan.database).expanduser().resolve() != database.path.resolve():
                raise DedupError(f"the plan was made for {plan.database}, not {database.path}")
        else:
            floor = database.settings.threshold if min_similarity is None else min_similarity
            plan = make_plan(database, keep.value, prefer, action.value, cluster, floor, exact_only, under, to,
                             templates)
        chosen = Action.named(plan.action)
        acting = chosen.changes_files
        if chosen is Action.move and plan.to is None:
            raise DedupError("--action move needs --to DIR")
        if fmt is ListFormat.json and not (yes and acting):
            render.write_json(plan.to_json())
            return
        if not acting:
            render.plan_paths(plan, null)
            return
        if fmt is ListFormat.table:
            render.plan_table(plan)
        if not plan.steps:
            if fmt is ListFormat.json:  # a script reads one document whatever the plan holds
                render.write_json({"plan": plan.to_json(), "outcome": render.clean_outcome_json(Outcome())})
            return
        if not chosen.undoable:
            render.warn("on this system dedupdb cannot put back what it sends to the trash: 'dedupdb undo' will "
                        "not restore these files; restore them from the system trash, or use --action move")
        if not yes:
            render.console.print("Dry run: nothing was changed. Add --yes to carry out this plan.")
            return
        with render.progress_bar("Cleaning") as progress:
            outcome = carry_out(database, plan, progress)
    if fmt is ListFormat.json:
        render.write_json({"plan": plan.to_json(), "outcome": render.clean_outcome_json(outcome)})
    else:
        render.clean_outcome(outcome, plan.action, undoable=chosen.undoable)
    if outcome.failed or outcome.refused:
        raise typer.Exit(1)


def _read_json(path: Path):
    import json

    try:
        with open(path.expanduser(), encoding="utf-8") as f:
            return json.load(f)
    except OSError as exc:
        raise DedupError(f"cannot read {path}: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:  # RecursionError: nested deeper than the parser goes
        raise DedupError(f"{path} is not JSON: {exc}") from None


@app.command()
@friendly
def undo(
    batch: Optional[int] = typer.Argument(None, help="The journal batch to undo \\[default: the latest]."),
    db: Optional[Path] = DbOption,
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Output format."),
) -> None:
    """Put back what a cleanup batch did, and say plainly what cannot be put back."""
    from dedupdb.ops.cleanup import undo as undo_batch

    with _open(db) as database:
        outcome = undo_batch(database, batch)
    if fmt is ListFormat.json:
        render.write_json(render.undo_json(outcome))
    else:
        render.undo_outcome(outcome)
    if outcome.cannot:  # a script must not take a partial undo for a whole one
        raise typer.Exit(1)


@app.command()
@friendly
def journal(
    db: Optional[Path] = DbOption,
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Output format."),
) -> None:
    """List cleanup batches, newest first, with what became of their actions."""
    with _open(db) as database:
        batches = database.journal()
    if fmt is ListFormat.json:
        render.write_json(render.journal_json(batches))
    else:
        render.journal_table(batches)


@app.command()
@friendly
def rm(
    items: list[str] = typer.Argument(..., help="Document keys, files or folders to forget (files stay on disk)."),
    db: Optional[Path] = DbOption,
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Output format."),
) -> None:
    """Forget documents: they leave the index and their clusters; the files themselves are not touched.

    Exit status 1 when nothing given was in the database."""
    with _open(db) as database:
        forgotten, unmatched = database.forget(items)
    if fmt is ListFormat.json:
        render.write_json({"forgotten": forgotten, "unmatched": unmatched})
    else:
        for item in unmatched:
            render.err_console.print(f"not in the database: {item}", highlight=False, markup=False)
        render.console.print(f"forgot {forgotten} documents", highlight=False)
    if unmatched and not forgotten:
        raise typer.Exit(1)


@app.command()
@friendly
def review(
    db: Optional[Path] = DbOption,
    keep: KeepFileRule = KeepOption,
    prefer: Optional[Path] = PreferOption,
    related: bool = typer.Option(False, "--related", help="Whole connected components instead of groups."),
    to: Optional[Path] = typer.Option(None, "--to", help="Move acted-on files into this folder (else: the trash)."),
    read_only: bool = typer.Option(False, "--read-only", help="Open the database read-only: review, never act."),
) -> None:
    """Go through the duplicate groups on a full-screen terminal: compare, choose the copy to keep, mark, declare
    not duplicates, and act (as 'clean --plan' does, after a confirmation), with undo one key away."""
    from dedupdb.database import Database
    from dedupdb.ops.review import Review

    if not sys.stdout.isatty() or not sys.stdin.isatty():
        raise InputError("review needs a terminal; 'dedupdb report' and 'dedupdb clean' serve scripts")
    from dedupdb.cli.review_app import run_review

    with Database.open(_db_given(db), create=False, readonly=read_only) as database:
        session = Review(database, keep.value, prefer, related)
        run_review(session, "move" if to else "trash", str(to.expanduser().resolve()) if to else None)


@app.command()
@friendly
def ignore(
    keys: list[str] = typer.Argument(..., help="Two documents or more (keys or paths) that are not duplicates."),
    db: Optional[Path] = DbOption,
) -> None:
    """Declare documents not duplicates of each other: report, clean, export --unique, pairs and review leave
    every pair of them apart from now on ('dedupdb unignore' takes it back)."""
    with _open(db) as database:
        outcome = database.ignore(keys)
    render.ignore_outcome(outcome)


@app.command()
@friendly
def unignore(
    keys: list[str] = typer.Argument(..., help="Two documents or more (keys or paths) given to 'ignore' before."),
    db: Optional[Path] = DbOption,
) -> None:
    """Take back 'dedupdb ignore': the pairs of these documents are grouped again as their likeness says."""
    with _open(db) as database:
        forgotten = database.unignore(keys)
    render.console.print(f"{forgotten} pairs are no longer ignored", highlight=False)


@app.command()
@friendly
def ignored(
    db: Optional[Path] = DbOption,
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Output format."),
) -> None:
    """List the pairs of documents declared not duplicates."""
    with _open(db) as database:
        pairs = database.ignored()
    if fmt is ListFormat.json:
        render.write_json([render.ignored_json(p) for p in pairs])
    else:
        render.ignored_table(pairs)


@app.command()
@friendly
def prune(
    db: Optional[Path] = DbOption,
    fmt: ListFormat = typer.Option(ListFormat.table, "--format", help="Output format."),
) -> None:
    """Forget the files that are gone from disk."""
    with _open(db) as database:
        gone = database.prune()
    if fmt is ListFormat.json:
        render.write_json({"pruned": len(gone), "paths": gone})
        return
    for path in gone:
        render.console.print(f"forgot {render.one_line(path)}", highlight=False, markup=False)
    render.console.print(f"pruned {len(gone)} files", highlight=False)


class StreamFormat(str, Enum):
    lines = "lines"
    jsonl = "jsonl"
    csv = "csv"


@app.command(name="filter")
@friendly
def filter_(
    fmt: StreamFormat = typer.Option(StreamFormat.lines, "--format", help="Record format of input and output."),
    text_field: Optional[str] = typer.Option(None, "--text-field", help="JSONL key or CSV column with the text."),
    id_field: Optional[str] = typer.Option(None, "--id-field", help="JSONL key or CSV column with the record id."),
    capacity: int = typer.Option(10_000_000, "--capacity", help="Distinct records the Bloom filter is sized for."),
    error_rate: float = typer.Option(0.001, "--error-rate", help="Bloom filter false-positive rate at capacity."),
    near: bool = typer.Option(False, "--near", help="Also drop near-duplicates (MinHash LSH in memory)."),
    threshold: Optional[float] = typer.Option(None, help=f"Jaccard threshold for --near \\[default: {_DEFAULTS.threshold}]."),
    dropped: Optional[Path] = typer.Option(None, "--dropped", help="Write each dropped record, with what it duplicates."),
    db: Optional[Path] = typer.Option(None, "--db", help="Also drop records already in this database."),
) -> None:
    """Copy records from stdin to stdout, leaving out those seen before. Needs no database."""
    from dedupdb.database import Database
    from dedupdb.ingest.records import RecordOptions
    from dedupdb.ops.streamfilter import FilterOptions, run_filter

    options = FilterOptions(
        RecordOptions(fmt.value, text_field, id_field).resolved(fmt.value), capacity, error_rate, near, threshold
    )
    warn = lambda message: render.err_console.print(f"Warning: {message}", highlight=False)  # noqa: E731
    db = _db_given(db)
    database = Database.open(db, create=False) if db else None
    try:
        dropped_file = open(dropped, "w", encoding="utf-8") if dropped else None
    except OSError as exc:
        raise DedupError(f"cannot write {dropped}: {exc.strerror or exc}") from None
    try:
        report = run_filter(_stdin(), sys.stdout, options, dropped_file, database, warn)
    finally:
        if dropped_file:
            dropped_file.close()
        if database:
            database.close()
    render.filter_report(report)


# --- the process: signals and a closed output ------------------------------------------------------------

_STOP_SIGNALS = tuple(
    s for s in (signal.SIGINT, signal.SIGTERM, getattr(signal, "SIGHUP", None)) if s is not None
)
_stop_signal: int | None = None  # the first stop signal received


def _on_stop_signal(signum: int, frame) -> None:
    """The first SIGINT, SIGTERM or SIGHUP stops the command as Ctrl-C does (see friendly); a second one while
    it is stopping ends the process at once, by that signal: SQLite's journal keeps the store whole anyway."""
    global _stop_signal
    if _stop_signal is not None:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    _stop_signal = signum
    raise KeyboardInterrupt if signum == signal.SIGINT else Terminated(signum)


def _handle_stop_signals() -> None:
    for signum in _STOP_SIGNALS:
        try:
            if signal.getsignal(signum) is not signal.SIG_IGN:  # nohup: a hang-up is to be ignored, and is
                signal.signal(signum, _on_stop_signal)
        except (ValueError, OSError):  # not the main thread, or a platform without it
            pass


_output_gone = False  # standard output's reader went away


def _stdout_to_devnull() -> None:
    """After a broken pipe, point standard output at the null device, so that flushing what is still buffered
    at exit neither fails nor prints 'Exception ignored' (the recipe in Python's signal module docs)."""
    global _output_gone
    _output_gone = True
    render.console.quiet = True
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, AttributeError, ValueError):
        pass


def _console_broken_pipe(console) -> None:
    """rich's Console.on_broken_pipe, for this process: rich's own ends it with status 1. Standard output gone
    stops the command (a BrokenPipeError, which friendly and main turn into a quiet exit 0); standard error
    gone only silences it."""
    global _output_gone
    console.quiet = True
    if not console.stderr:
        _output_gone = True
        raise BrokenPipeError(errno.EPIPE, os.strerror(errno.EPIPE))
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stderr.fileno())
        os.close(devnull)
    except (OSError, AttributeError, ValueError):
        pass


class _ClosedOutput(io.TextIOBase):
    """Standard output of a process started with it closed ('dedupdb report >&-'): Python leaves sys.stdout None
    then, and rich drops what it prints. Writing fails instead, which main reports in one line."""

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        raise OSError(errno.EBADF, "standard output is closed")


def _check_stdout() -> None:
    if sys.stdout is not None:
        return
    sys.stdout = _ClosedOutput()
    try:  # the null device on descriptor 1, so that no file this process opens lands where output would go
        devnull = os.open(os.devnull, os.O_WRONLY)
        if devnull != 1:
            os.dup2(devnull, 1)
            os.close(devnull)
    except OSError:
        pass


def _as_sentences(doc: str) -> str:
    """A command's docstring as its help: the lines of each paragraph joined, so that a terminal of any width
    wraps whole sentences instead of breaking them where the source does."""
    paragraphs = inspect.cleandoc(doc).split("\n\n")
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs)


for _command in app.registered_commands:
    if _command.help is None and _command.callback is not None and _command.callback.__doc__:
        _command.help = _as_sentences(_command.callback.__doc__)


def _usage_error(exc: ClickException) -> None:
    if type(exc).__name__ == "NoArgsIsHelpError":  # 'dedupdb' alone: the help is the answer
        exc.show()
        return
    context = getattr(exc, "ctx", None)
    see = f" (see '{context.command_path} --help')" if context is not None else ""
    render.err_console.print(f"Error: {exc.format_message()}{see}", highlight=False, markup=False, soft_wrap=True)


def run() -> NoReturn:
    """The command line as a program (`dedupdb`, `python -m dedupdb`): main(), and then the process ends (_leave).
    main() itself ends in SystemExit, for a caller that goes on after it."""
    try:
        main()
    except SystemExit as exc:
        _leave(exc.code)
    _leave(0)


def _children_running() -> bool:
    multiprocessing = sys.modules.get("multiprocessing")
    return multiprocessing is not None and bool(multiprocessing.active_children())


def _leave(code) -> NoReturn:
    """End the process with a command's exit status. The interpreter's own exit then tears down every module
    and frees their objects one by one: 0.19 s after an add of 100,000 reviews, most of it for the compiled code
    numba loaded. With the command done and nothing else left running in this process, do what that exit would
    that anyone could see (the exit functions, the streams flushed) and end at once. Every store is closed by
    then: what this skips is only freeing memory the system takes back anyway."""
    if not (code is None or isinstance(code, int)):
        sys.exit(code)  # a message, which the interpreter prints
    if threading.active_count() > 1 or _children_running():
        sys.exit(code)  # the interpreter's exit waits for threads and workers
    if sys.getprofile() is not None or sys.gettrace() is not None:
        sys.exit(code)  # a profiler or a debugger that writes what it saw once the program is over
    atexit._run_exitfuncs()  # those of the standard library (logging, multiprocessing, temporary files) included
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a reader gone meanwhile: the interpreter's exit would drop it too
            pass
    os._exit(code or 0)


def main() -> None:
    import rich.console

    _handle_stop_signals()
    _check_stdout()
    compiled.run_alone()  # this process runs dedupdb's work alone: numba loads here without BLAS
    # Every console of the process, ours and those typer makes for help and usage errors.
    rich.console.Console.on_broken_pipe = _console_broken_pipe
    try:
        try:
            status = app(standalone_mode=False)
        except ClickException as exc:  # a usage error: one line, as every other error, and status 2
            status = exc.exit_code
            _usage_error(exc)
        except typer.Abort:
            status = 1
            render.err_console.print("Aborted.", highlight=False)
        finally:
            if sys.stdout is not None:
                sys.stdout.flush()  # here, not at exit, where a broken pipe could no longer be handled
        sys.exit(status if isinstance(status, int) else 0)
    except BrokenPipeError:
        _stdout_to_devnull()
        sys.exit(0)
    except SystemExit as exc:
        if exc.code and _output_gone:  # click's own answer to a broken pipe (after --help, say) is status 1
            _stdout_to_devnull()
            sys.exit(0)
        raise
    except OSError as exc:  # standard output on a full disk, say: still one line
        render.err_console.print(f"Error: {exc.strerror or exc}", highlight=False, markup=False, soft_wrap=True)
        sys.exit(1)
