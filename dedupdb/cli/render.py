"""Everything the user sees: rich tables, trees and progress bars; JSON, JSON Lines and CSV writers."""

from __future__ import annotations

import csv
import json
import math
import sys
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, fields
from datetime import datetime, timezone
from os.path import commonprefix
from typing import TYPE_CHECKING, TextIO

from rich.cells import cell_len, get_character_cell_size
from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # the database module brings numpy and the index: a command that fails early needs neither
    from dedupdb.database import Cluster, Pair, QueryHit, QueryResult
    from dedupdb.ingest.summary import AddSummary

# Piped or redirected output is read by programs, and by people in editors and pagers that wrap for themselves:
# as wide as any line, so that no path is ever wrapped or cut (rich would hard-wrap at 80 columns).
PIPED_WIDTH = 1 << 20


class _Console(Console):
    """A rich console that lays out for the terminal's width on a terminal, and without a width limit elsewhere."""

    @property
    def size(self) -> ConsoleDimensions:
        size = super().size
        if self.is_terminal:
            return size
        return ConsoleDimensions(PIPED_WIDTH, size.height)

    @size.setter
    def size(self, new_size) -> None:
        Console.size.fset(self, new_size)

    @property
    def layout_width(self) -> int:
        """The width of views that need one (diff side by side): the terminal's, or $COLUMNS or 80 when piped."""
        return super().size.width


console = _Console()
err_console = _Console(stderr=True)


def _first_cells(text: str, cells: int) -> str:
    """The longest start of text that fits in this many terminal cells (CJK characters take two)."""
    used = 0
    for i, char in enumerate(text):
        used += get_character_cell_size(char)
        if used > cells:
            return text[:i]
    return text


def _last_cells(text: str, cells: int) -> str:
    used = 0
    for i in range(len(text) - 1, -1, -1):
        used += get_character_cell_size(text[i])
        if used > cells:
            return text[i + 1 :]
    return text


def shorten(text: str, width: int, head: int = 0) -> str:
    """text cut to width cells in its middle: its start, '…' and its end, which holds what tells paths apart (the
    file name, and a record's id after '#'). The end gets the larger share, as the start is often a common folder,
    unless head asks for at least that many cells of the start (where two names part)."""
    if cell_len(text) <= width:
        return text
    if width < 2:
        return "…"[:width]
    room = width - 1
    name = cell_len(text.rsplit("/", 1)[-1])
    share = (room - name) // 3 if name < room else 0
    kept = min(max(share, head), room - min(name, room // 2))
    return _first_cells(text, kept) + "…" + _last_cells(text, room - kept)


def distinct_labels(a: str, b: str, width: int) -> tuple[str, str]:
    """Two names cut to width each, both keeping where they part: a long common start is left out first."""
    if cell_len(a) <= width and cell_len(b) <= width:
        return a, b
    common = len(commonprefix([a, b]))
    # Left out: as little of the common start as lets both fit, and at most up to the folder where they part
    # (or up to a few characters before the first difference, in a long name).
    limit = max(a.rfind("/", 0, common) + 1, common - 12)
    cuts = [i + 1 for i, char in enumerate(a[:limit]) if char == "/"] + [limit]
    fits = lambda cut: cell_len(a) - cut < width and cell_len(b) - cut < width  # noqa: E731
    cut = next((c for c in cuts if c > 1 and fits(c)), limit)
    if cut > 1:
        a, b, common = "…" + a[cut:], "…" + b[cut:], common - cut + 1
    parting = cell_len(a[: common + 1]) + 3  # the first different character and a few after it
    return shorten(a, width, parting), shorten(b, width, parting)


# Control characters written escaped in a line of text output (a tab or a newline in a record's id or a file's
# name would otherwise part the line where no field ends); --format json gives them as they are.
_ESCAPED_CONTROLS = {code: {9: "\\t", 10: "\\n", 13: "\\r"}.get(code, f"\\x{code:02x}")
                     for code in [*range(32), *range(127, 160)]}
_ESCAPED_CONTROLS.update({code: f"\\u{code:04x}" for code in (0x2028, 0x2029)})  # lines part there too, for some
_ESCAPED = {**_ESCAPED_CONTROLS, ord("\\"): "\\\\"}  # a backslash too: a name holding "\\n" is no other's


def controls_escaped(text: str) -> str:
    """text with its control characters escaped (\\t, \\n, \\x00...): a message that stays one line whatever a
    name or a damaged store's bytes in it hold."""
    return text.translate(_ESCAPED_CONTROLS) if not text.isprintable() else text


def one_line(text: str) -> str:
    """text with its control characters escaped (\\t, \\n, \\x00...) and its backslashes doubled: one field of
    one line, which no two names share (a name holding a backslash and an n reads apart from one holding a
    newline)."""
    return text.translate(_ESCAPED) if not text.isprintable() or "\\" in text else text


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _when(mtime_ns: int) -> str:
    return datetime.fromtimestamp(mtime_ns / 1e9).strftime("%Y-%m-%d %H:%M")


def utc_time(seconds: float) -> str:
    """A time for programs: ISO 8601 in UTC with its Z, as the SQL views (migrations/0006_views.sql) write it:
    SQLite's strftime takes the nearest millisecond, then cuts it to whole seconds."""
    whole = math.floor(seconds * 1000 + 0.5) // 1000
    return datetime.fromtimestamp(whole, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _local_time(seconds: float) -> str:
    return datetime.fromtimestamp(seconds).isoformat(timespec="seconds")


def write_json(data, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    json.dump(data, out, ensure_ascii=False, indent=2)
    out.write("\n")


_PROGRESS_NAMES = (
    "BarColumn", "DownloadColumn", "MofNCompleteColumn", "Progress", "TextColumn", "TimeRemainingColumn",
    "TransferSpeedColumn",
)


def _progress_names() -> dict:
    """This module's globals, with rich.progress's names in them: loaded for the first bar drawn, as piped
    output draws none (one set before, as a test's stand-in, stays)."""
    if any(name not in globals() for name in _PROGRESS_NAMES):
        import rich.progress

        for name in _PROGRESS_NAMES:
            globals().setdefault(name, getattr(rich.progress, name))
    return globals()


def __getattr__(name: str):
    if name in _PROGRESS_NAMES:
        return _progress_names()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


@contextmanager
def progress_bar(description: str, in_bytes: bool = False):
    """A callback (done, total) that draws a bar on a terminal and does nothing when output is piped; in_bytes
    shows the amounts as sizes, with the rate."""
    if not err_console.is_terminal:
        yield None
        return
    bars = _progress_names()
    amounts = (bars["DownloadColumn"](), bars["TransferSpeedColumn"]()) if in_bytes else (bars["MofNCompleteColumn"](),)
    columns = (bars["TextColumn"]("{task.description}"), bars["BarColumn"](), *amounts, bars["TimeRemainingColumn"]())
    with bars["Progress"](*columns, console=err_console, transient=True) as bar:
        task = bar.add_task(description, total=None)

        def update(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        yield update


# --- add ---------------------------------------------------------------------


def add_summary_json(summary: AddSummary) -> dict:
    return {
        **summary.counts(),
        "records": summary.records,
        "bad_record_count": summary.bad_record_count,
        "bad_records": [{"where": w, "reason": r} for w, r in summary.bad_records],
        "new_texts": summary.new_contents,
        "seconds": round(summary.seconds, 3),
        "bytes_read": summary.bytes_read,
        "missing_paths": summary.missing,
        "skipped_paths": [{"path": p, "reason": r} for p, r in summary.skipped],
        "failed_paths": [{"path": p, "reason": r} for p, r in summary.failed],
        "warnings": [{"path": p, "message": m} for p, m in summary.warnings],
    }


def job_stage(stage: str, seconds: float, rows: int) -> None:
    """One line a stage of a scale-out job, on stderr as it ends."""
    err_console.print(f"{stage}: {rows:,} rows in {seconds:.1f} s", highlight=False, soft_wrap=True)


def job_json(manifest, out_dir: str) -> dict:
    """A job's summary under add's names where they mean the same (bad_record_count, failed, failed_paths)."""
    counts = manifest.counts
    return {
        "out": out_dir, "records": counts["records"], "bad_record_count": counts["bad_records"],
        "bad_records": manifest.bad_records, "failed": counts["failed_inputs"], "failed_paths": manifest.failed_inputs,
        **{k: counts[k] for k in ("texts", "candidate_pairs", "verified_pairs", "clustered_documents", "document_pairs")},
        "unique_records": counts.get("unique_records"), "stages": manifest.stages,
    }


def job_summary(manifest, out_dir: str) -> None:
    counts = manifest.counts
    line = (f"{counts['records']:,} records ({counts['texts']:,} distinct texts), {counts['verified_pairs']:,} "
            f"near-duplicate pairs of texts, {counts['document_pairs']:,} pairs of documents, "
            f"{counts['clustered_documents']:,} documents in clusters")
    if "unique_records" in counts:
        line += f", {counts['unique_records']:,} records kept"
    if counts.get("bad_records"):
        line += f", {counts['bad_records']:,} bad records"
    if counts.get("failed_inputs"):
        line += f", {counts['failed_inputs']:,} inputs failed"
    console.print(f"{line}; written to {out_dir}", highlight=False, soft_wrap=True)
    for failed in manifest.failed_inputs:
        err_console.print(f"failed {one_line(failed['path'])}: {one_line(failed['reason'])}", highlight=False,
                          markup=False, soft_wrap=True)


def add_summary(summary: AddSummary, verbose: bool = False) -> None:
    for path, reason in summary.failed:
        err_console.print(f"[red]failed[/red] {escape(one_line(path))}: {escape(reason)}", highlight=False)
    for where, reason in summary.bad_records[:50]:
        err_console.print(f"[yellow]bad record[/yellow] {escape(one_line(where))}: {escape(reason)}", highlight=False)
    if summary.bad_record_count > 50:
        err_console.print(f"... and {summary.bad_record_count - 50} more bad records (see --format json)")
    if verbose:
        for path, reason in summary.skipped:
            console.print(f"[dim]skipped[/dim] {escape(one_line(path))}: {escape(reason)}", highlight=False)
        for path, message in summary.warnings:
            console.print(f"[yellow]warning[/yellow] {escape(one_line(path))}: {escape(message)}", highlight=False)
    for path in summary.missing:
        console.print(f"[yellow]missing[/yellow] {escape(one_line(path))}", highlight=False)
    counts = summary.counts()
    parts = [f"{name} {count}" for name, count in counts.items()]
    if summary.records or summary.bad_record_count:
        parts.append(f"records {summary.records}, bad records {summary.bad_record_count}")
    if summary.warnings:
        parts.append(f"warnings {len(summary.warnings)}" + ("" if verbose else " (-v lists them)"))
    console.print(", ".join(parts) + f" in {summary.seconds:.1f}s", highlight=False)


# --- report ------------------------------------------------------------------


def cluster_json(cluster: Cluster) -> dict:
    return {
        "cluster": cluster.id,
        "group": cluster.group,
        "kind": cluster.kind,
        "documents": len(cluster.members),
        "total_bytes": cluster.total_bytes,
        "reclaimable_bytes": cluster.reclaimable_bytes,
        "members": [
            {
                "key": m.key,
                "path": m.path,
                "record": m.record,
                "bytes": m.bytes,
                "mtime": utc_time(m.mtime_ns / 1e9),
                "similarity": m.similarity,
                "exact": m.exact,
                "keep": i == 0,
                "representative": i == 0,
                "hard_link_of": m.linked_to,
            }
            for i, m in enumerate(cluster.members)
        ],
    }


class _LineWriter:
    """Writes a report line by line as each is ready, straight to the console's file: laying out every line with
    rich costs several times what computing the report does. A line is a list of parts, each a string or a
    (string, style) pair; on a colour terminal a style becomes the escape codes rich writes for it."""

    def __init__(self, target: Console) -> None:
        self.console = target
        self.styled = target.is_terminal and target.color_system is not None
        self._codes: dict[str, tuple[str, str]] = {}

    def _wrap(self, style: str) -> tuple[str, str]:
        if style not in self._codes:
            with self.console.capture() as captured:
                self.console.print(Text("\0", style=style), end="", soft_wrap=True)
            before, _, after = captured.get().partition("\0")
            self._codes[style] = (before, after)
        return self._codes[style]

    def line(self, *parts: str | tuple[str, str]) -> None:
        if self.console.quiet:  # standard output went away
            return
        out = []
        for part in parts:
            if isinstance(part, str):
                out.append(part)
            elif self.styled:
                before, after = self._wrap(part[1])
                out += (before, part[0], after)
            else:
                out.append(part[0])
        out.append("\n")
        self.console.file.write("".join(out))


def _member_line(out: _LineWriter, guide: str, label: tuple[str, str], m, width: int | None) -> None:
    """'├── exact KEY  SIZE · TIME', the key shortened in its middle when the line would not fit the terminal."""
    link = f" · hard link of {one_line(m.linked_to)}" if m.linked_to else ""
    meta = f"{human_bytes(m.bytes)} · {_when(m.mtime_ns)}{link}"
    key = one_line(m.key)
    if width is not None:
        key = shorten(key, max(20, width - cell_len(guide) - cell_len(label[0]) - 3 - cell_len(meta)))
    out.line(guide, label, " ", key, "  ", (meta, "dim"))


def report_table(clusters: Iterable[Cluster], related: bool = False, templates_apart: int = 0) -> None:
    """A tree per group, written as each is laid out; then the count and the bytes reclaimable, and how many
    template pairs were left apart."""
    out = _LineWriter(console)
    width = console.width if console.is_terminal else None
    first = "first" if related else "keep"
    count = total = 0
    for cluster in clusters:
        count += 1
        total += cluster.reclaimable_bytes
        name = f"cluster {cluster.id}" if related else f"cluster {cluster.id}.{cluster.group}"
        out.line((
            f"{cluster.kind} {name} · {len(cluster.members)} documents · "
            f"{human_bytes(cluster.reclaimable_bytes)} reclaimable",
            "bold",
        ))
        last = len(cluster.members) - 1
        for i, m in enumerate(cluster.members):
            guide = "└── " if i == last else "├── "
            label = (first, "green") if i == 0 else (f"{'exact' if m.exact else f'{m.similarity:.2f}':>5}", "cyan")
            _member_line(out, guide, label, m, width)
    if not count:
        out.line("No duplicates found.")
    else:
        what = ("related cluster" if related else "group") + ("" if count == 1 else "s")
        out.line(f"{count} {what}, {human_bytes(total)} reclaimable")
    if templates_apart:
        out.line(f"{templates_apart} template pair{'' if templates_apart == 1 else 's'} (only numbers or one slot "
                 "of a frame differ) left apart: --include-templates groups them")


def report_csv(clusters: list[Cluster], out: TextIO | None = None) -> None:
    writer = csv.writer(out or sys.stdout)
    writer.writerow(
        ["cluster", "group", "kind", "representative", "key", "path", "bytes", "mtime", "similarity", "exact",
         "hard_link_of"]
    )
    for cluster in clusters:
        for i, m in enumerate(cluster.members):
            when = utc_time(m.mtime_ns / 1e9)
            writer.writerow([cluster.id, cluster.group, cluster.kind, int(i == 0), m.key, m.path, m.bytes, when,
                             m.similarity, int(m.exact), m.linked_to or ""])


# --- query and pairs -----------------------------------------------------------


def query_table(hits: list[QueryHit]) -> None:
    if not hits:
        console.print("No near-duplicates found.")
        return
    table = Table(highlight=False)
    scores = ("jaccard", "contained", "hamming")
    for name in scores:
        table.add_column(name, no_wrap=True, min_width=len(name))
    # The key tells rows apart: it keeps its width (shortened in its middle, keeping the file name and record id,
    # when the terminal is too narrow), and the snippet gives way (its width is set, or rich would squeeze the
    # score columns to nothing on a narrow terminal). 3 characters of border and padding a column.
    fixed = sum(len(name) for name in scores) + 3 * 5 + 1
    key_width = min(max(cell_len(one_line(h.key)) for h in hits), max(20, console.width - fixed - 8))
    table.add_column("key", no_wrap=True, min_width=key_width, max_width=key_width)
    table.add_column("snippet", no_wrap=True, overflow="ellipsis", max_width=max(8, console.width - fixed - key_width))
    for h in hits:
        table.add_row(
            "exact" if h.exact else f"{h.jaccard:.3f}",
            "" if h.containment is None else f"{h.containment:.3f}",
            "" if h.hamming is None else str(h.hamming),
            Text(shorten(one_line(h.key), key_width)),
            Text(h.snippet[:80]),
        )
    console.print(table)


def query_json(hits: list[QueryHit]) -> list[dict]:
    return [asdict(h) for h in hits]


def known_total(update):
    """A progress bar's update for amounts whose total may not be known (0): the bar then shows only the amount."""
    if update is None:
        return None
    return lambda done, total: update(done, total or None)


@dataclass
class QueryTally:
    records: int = 0
    matched: int = 0
    bad: int = 0
    seconds: float = 0.0


def query_result_json(result: QueryResult) -> dict:
    """One record's line of 'query --records --format json': its id, line and matches."""
    return {
        "id": result.id,
        "line": result.line,
        "matches": [{"key": h.key, "jaccard": h.jaccard, "containment": h.containment, "exact": h.exact}
                    for h in result.hits],
    }


def query_results(results: Iterable[QueryResult], source: str, as_json: bool, out: TextIO | None = None) -> QueryTally:
    """Each record's matches as it is answered: a JSON line a record, or a line a match of those with any; bad
    records one line each on standard error."""
    import time

    out = out or sys.stdout
    tally = QueryTally()
    started = time.perf_counter()
    for result in results:
        if result.error is not None:
            tally.bad += 1
            where = f"{source}:{result.line}" if result.line is not None else f"{source}#{result.id}"
            err_console.print(f"[yellow]bad record[/yellow] {escape(where)}: {escape(result.error)}", highlight=False,
                              soft_wrap=True)
            continue
        tally.records += 1
        tally.matched += bool(result.hits)
        if as_json:
            out.write(json.dumps(query_result_json(result), ensure_ascii=False) + "\n")
            continue
        for h in result.hits:
            score = "exact" if h.exact else f"jaccard {h.jaccard:.3f}"
            if h.containment is not None and not h.exact:
                score += f", contained {h.containment:.3f}"
            out.write(f"{one_line(result.id)}\t{one_line(h.key)}\t{score}\n")
    tally.seconds = time.perf_counter() - started
    return tally


def query_results_summary(tally: QueryTally) -> None:
    rate = tally.records / tally.seconds if tally.seconds > 0 else 0.0
    bad = f", {tally.bad:,} bad records" if tally.bad else ""
    err_console.print(f"Queried {tally.records:,} records: {tally.matched:,} with matches{bad} in {tally.seconds:.1f}s "
                      f"({rate:,.0f} records/s)", highlight=False, soft_wrap=True)


def pairs_jsonl(pairs: Iterable[Pair], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for p in pairs:
        out.write(json.dumps(asdict(p), ensure_ascii=False) + "\n")


PAIR_FIELDS = ("a", "b", "jaccard", "hamming", "exact", "containment", "kind")  # jsonl keys and csv columns alike


def pairs_csv(pairs: Iterable[Pair], out: TextIO | None = None) -> None:
    writer = csv.writer(out or sys.stdout)
    writer.writerow(PAIR_FIELDS)
    for p in pairs:
        writer.writerow([p.a, p.b, p.jaccard, "" if p.hamming is None else p.hamming, "true" if p.exact else "false",
                         "" if p.containment is None else p.containment, p.kind])


# --- stats -------------------------------------------------------------------


def stats_table(stats: dict) -> None:
    table = Table("", "", show_header=False, highlight=False)
    for name, value in stats.items():
        if name.endswith("bytes"):
            value = f"{human_bytes(value)} ({value})"
        elif isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items())
        table.add_row(name.replace("_", " "), Text(str(value)))
    console.print(table)
    kept, current = stats["settings"]["algorithm"], stats["current_algorithm"]
    if kept < current:
        console.print(f"This store was made by algorithm {kept}, which this version still adds to; 'dedupdb reindex "
                      f"--from-sources' moves it to {current} (Chinese text sketched several times quicker).",
                      highlight=False)


def init_json(database) -> dict:
    return {
        "database": str(database.path),
        "settings": {f.name: getattr(database.settings, f.name) for f in fields(database.settings)},
        "candidate_curves": database.candidate_curves(),
    }


def candidate_curves(curves: list[dict], threshold: float) -> None:
    """The S-curves of Database.candidate_curves side by side, this store's scheme marked, and what a pair at the
    threshold can expect under it."""
    table = Table("Jaccard", *(f"{c['preset']}{' (this store)' if c['this_store'] else ''}\n{c['scheme']}"
                               for c in curves), title="Chance that a pair becomes a candidate", highlight=False)
    for j in curves[0]["probability"]:
        table.add_row(j, *(f"{c['probability'][j]:.3g}" for c in curves))
    console.print(table)
    mine = next(c for c in curves if c["this_store"])
    console.print(
        f"A pair at the threshold {threshold} becomes a candidate with probability {mine['at_threshold']:.3g} "
        f"({mine['preset']}); candidates are then verified by their Jaccard similarity.",
        highlight=False,
    )


# --- filter ------------------------------------------------------------------


def filter_report(report) -> None:
    """The filter's tally on stderr, so stdout carries only records."""
    for line, reason in report.bad_records[:20]:
        err_console.print(f"[yellow]bad record[/yellow] line {line}: {escape(reason)}", highlight=False)
    err_console.print(
        f"read {report.read}, kept {report.kept}, exact duplicates {report.exact_duplicates}, "
        f"near duplicates {report.near_duplicates}, already stored {report.stored_duplicates}, "
        f"bad records {report.bad_record_count}; Bloom filter {report.bloom_bits} bits, {report.bloom_hashes} hashes, "
        f"estimated false-positive rate {report.false_positive_rate:.2e}",
        highlight=False,
    )


# --- export ------------------------------------------------------------------


def export_records(records, fmt: str, out: TextIO | None = None) -> int:
    """Write exported records: JSON Lines (JSONL sources verbatim), CSV of key and text, or one text a line."""
    out = out or sys.stdout
    writer = csv.writer(out) if fmt == "csv" else None
    if writer:
        writer.writerow(["key", "text"])
    count = 0
    for r in records:
        if fmt == "jsonl":
            out.write((r.raw if r.source == "jsonl" else json.dumps({"key": r.key, "text": r.text}, ensure_ascii=False)))
            out.write("\n")
        elif writer:
            writer.writerow([r.key, r.text])
        else:
            out.write(" ".join(r.text.split()) + "\n")
        count += 1
    return count


# --- diff ----------------------------------------------------------------------


def diff_json(label_a: str, text_a: str, label_b: str, text_b: str, jaccard: float, result) -> dict:
    return {
        "a": label_a,
        "b": label_b,
        "unit": result.unit,
        "jaccard": jaccard,
        "ratio": result.ratio,
        "bytes": {"a": len(text_a.encode("utf-8")), "b": len(text_b.encode("utf-8"))},
        "opcodes": [
            {"op": o.op, "a": [o.a_start, o.a_end], "b": [o.b_start, o.b_end], "a_text": o.a_text, "b_text": o.b_text}
            for o in result.opcodes
        ],
    }


def diff_sides(result) -> tuple[Text, Text]:
    """The two texts of a diff, each to be shown in a column of its own: removals in red on the left, additions in
    green on the right, long unchanged runs shortened (diff.shown_equal)."""
    from dedupdb.text.diff import shown_equal

    left, right = Text(overflow="fold"), Text(overflow="fold")
    for o in result.opcodes:
        if o.op == "equal":
            left.append(shown_equal(o.a_text))
            right.append(shown_equal(o.b_text))
        else:
            left.append(o.a_text, style="bold red")
            right.append(o.b_text, style="bold green")
    return left, right


def diff_view(label_a: str, text_a: str, label_b: str, text_b: str, jaccard: float, result, unified: bool) -> None:
    label_a, label_b = one_line(label_a), one_line(label_b)  # a newline in a name would make up a header or a hunk
    plain = unified and (not console.is_terminal or console.color_system is None or console.no_color)
    # Without colour, standard output is what 'diff -u' writes, and the summary goes beside it, to standard error.
    (err_console if plain else console).print(
        f"jaccard {jaccard:.3f} · {result.unit}-level ratio {result.ratio:.3f} · "
        f"{human_bytes(len(text_a.encode()))} vs {human_bytes(len(text_b.encode()))} · {len(result.changes)} change{'' if len(result.changes) == 1 else 's'}",
        highlight=False,
    )
    if plain:
        # Without colour a change would not show: lines marked '-' and '+' as 'diff -u' marks them.
        from dedupdb.text.diff import unified_lines

        for line in unified_lines(text_a, text_b, label_a, label_b):
            console.print(line, highlight=False, markup=False, soft_wrap=True)
        return
    from dedupdb.text.diff import shown_equal

    if unified:
        merged = Text()
        for o in result.opcodes:
            if o.op == "equal":
                merged.append(shown_equal(o.a_text))
            else:
                merged.append(o.a_text, style="bold red strike")
                merged.append(o.b_text, style="bold green")
        console.print(f"--- {label_a}\n+++ {label_b}", highlight=False, markup=False)
        console.print(merged)
        return
    left, right = diff_sides(result)
    # Laid out for the terminal (or $COLUMNS, or 80 columns when piped); long lines, Chinese ones with no space
    # to break at included, fold within their column instead of being cut.
    width = console.layout_width
    head_a, head_b = distinct_labels(label_a, label_b, max(8, (width - 7) // 2 - 3))
    table = Table(expand=True, highlight=False)
    table.add_column(Text(f"a: {head_a}", overflow="fold"), ratio=1, overflow="fold")
    table.add_column(Text(f"b: {head_b}", overflow="fold"), ratio=1, overflow="fold")
    table.add_row(left, right)
    console.print(table, width=width)


# --- cleanup -------------------------------------------------------------------


def warn(message: str) -> None:
    err_console.print(f"[yellow]warning[/yellow]: {escape(message)}", highlight=False)


def plan_paths(plan, null: bool) -> None:
    """The paths a plan would act on, one a line, or NUL-separated (null). A name holding a newline would part a
    line into two paths, the second perhaps a kept file's; written escaped, it could read as another file's real
    name (one holding a backslash and an n). So piped, a line never holds such a name: it is left out, and said;
    on a terminal it is shown escaped. NUL-separated paths are all there, as they are."""
    if null:
        sys.stdout.write("".join(step.remove.path + "\0" for step in plan.steps))
        return
    paths = [step.remove.path for step in plan.steps]
    if console.is_terminal:
        sys.stdout.write("".join(one_line(path) + "\n" for path in paths))
        return
    plain = [path for path in paths if controls_escaped(path) == path]  # what a line can carry as it is
    sys.stdout.write("".join(path + "\n" for path in plain))
    if len(plain) < len(paths):
        warn(f"{len(paths) - len(plain)} paths left out of the list: they hold control characters (a newline, a "
             "tab), which one path a line cannot carry; --null (-0) lists every path as it is")


def plan_table(plan) -> None:
    if not plan.steps:
        console.print("Nothing to clean.")
        return
    table = Table("cluster", "keep", plan.action, "similarity", "size", highlight=False)
    for column in table.columns[1:3]:
        column.overflow = "fold"  # every character of a path matters when files are about to move
    for step in plan.steps:
        table.add_row(
            f"{step.cluster}.{step.group}", Text(one_line(step.keep.path)), Text(one_line(step.remove.path)),
            "exact" if step.exact else f"{step.similarity:.2f}", human_bytes(step.remove.size),
        )
    console.print(table)
    where = f" into {plan.to}" if plan.to else ""
    console.print(
        f"{len(plan.steps)} files to {plan.action}{where}, {human_bytes(plan.reclaimable_bytes)} reclaimed; "
        f"{len(plan.passed_over)} left alone",
        highlight=False,
    )


def _with_reasons(items: list[tuple[str, str]]) -> list[dict]:
    return [{"path": path, "reason": reason} for path, reason in items]


def clean_outcome_json(outcome) -> dict:
    return {
        "batch": outcome.batch,
        "done": outcome.done,
        "skipped": _with_reasons(outcome.skipped),
        "failed": _with_reasons(outcome.failed),
        "refused": _with_reasons(outcome.refused),
    }


def clean_outcome(outcome, action: str, undoable: bool = True) -> None:
    for label, items in (("[red]refused[/red]", outcome.refused), ("[yellow]skipped[/yellow]", outcome.skipped),
                         ("[red]failed[/red]", outcome.failed)):
        for path, why in items:
            err_console.print(f"{label} {escape(one_line(path))}: {escape(why)}", highlight=False)
    batch = ""
    if outcome.batch:
        back = f"'dedupdb undo {outcome.batch}' puts it back" if undoable else "restore from the system trash"
        batch = f" (journal batch {outcome.batch}; {back})"
    refused = f", {len(outcome.refused)} refused" if outcome.refused else ""
    console.print(
        f"{action}: {len(outcome.done)} done, {len(outcome.skipped)} skipped, {len(outcome.failed)} failed"
        f"{refused}{batch}",
        highlight=False,
    )


def undo_json(outcome) -> dict:
    return {
        "batch": outcome.batch,
        "restored": outcome.restored,
        "edited_since": outcome.changed,
        "cannot_restore": _with_reasons(outcome.cannot),
    }


def undo_outcome(outcome) -> None:
    for path, why in outcome.cannot:
        err_console.print(f"[yellow]cannot restore[/yellow] {escape(one_line(path))}: {escape(why)}", highlight=False)
    for path in outcome.changed:
        err_console.print(f"[yellow]restored, edited since the cleanup[/yellow] {escape(one_line(path))}",
                          highlight=False)
    console.print(
        f"batch {outcome.batch}: {len(outcome.restored)} restored, {len(outcome.cannot)} cannot be restored",
        highlight=False,
    )


def journal_json(batches) -> list[dict]:
    return [
        {
            "batch": b[0],
            "created": utc_time(b[1]),
            "action": b[2],
            "target": b[3],
            "undone": None if b[4] is None else utc_time(b[4]),
            "entries": b[5],
        }
        for b in batches
    ]


def journal_table(batches) -> None:
    if not batches:
        console.print("The journal is empty.")
        return
    table = Table("batch", "created", "action", "target", "entries", "undone", highlight=False)
    for b, item in zip(batches, journal_json(batches)):  # people read the local time
        entries = ", ".join(f"{k} {v}" for k, v in sorted(item["entries"].items()))
        table.add_row(str(item["batch"]), _local_time(b[1]), item["action"], Text(item["target"] or ""), entries,
                      "" if b[4] is None else _local_time(b[4]))
    console.print(table)


# --- not duplicates ----------------------------------------------------------

def ignore_outcome(outcome) -> None:
    console.print(f"{outcome.added} pairs declared not duplicates ({outcome.already} already were)", highlight=False)
    for a, b in outcome.same_text:
        err_console.print(f"left grouped: {one_line(a)} and {one_line(b)} hold the same text", highlight=False,
                          markup=False)


def ignored_json(pair) -> dict:
    return {"a": pair.a, "b": pair.b, "created_at": utc_time(pair.created_at), "in_store": pair.in_store}


def ignored_table(pairs) -> None:
    if not pairs:
        console.print("No pairs are declared not duplicates.")
        return
    table = Table("document", "not a duplicate of", "since", "stored", highlight=False)
    for p in pairs:
        table.add_row(Text(one_line(p.a)), Text(one_line(p.b)), _local_time(p.created_at), "yes" if p.in_store else "no")
    console.print(table)


# --- check -------------------------------------------------------------------

_CHECK_HINTS = {
    "integrity": "the file itself is damaged: restore it from a backup, or add the files again into a new database",
    "signatures": "'dedupdb reindex --from-sources' reads the files again and stores every text's signatures anew",
    "index_rows": "'dedupdb reindex' rebuilds index rows, pairs and clusters from the stored signatures",
    "containment_rows": "'dedupdb reindex' rebuilds containment rows from the fingerprints each text keeps",
    "pairs": "'dedupdb reindex' rebuilds index rows, pairs and clusters from the stored signatures",
    "clusters": "'dedupdb reindex' rebuilds index rows, pairs and clusters from the stored signatures",
}


def check_json(report) -> dict:
    return {
        "database": report.database,
        "sound": report.sound,
        "documents": report.documents,
        "contents": report.contents,
        "pairs": report.pairs,
        "checks": list(report.checks),
        "failed": report.failed(),
        "without_checksums": report.without_checksums,
        "problems": [
            {"check": p.check, "count": p.count, "what": p.what, "examples": list(p.examples)} for p in report.problems
        ],
    }


def check_report(report) -> None:
    """One line when the store is sound; else one line per failed check, then a verdict with what to do."""
    say = lambda line: console.print(line, highlight=False, markup=False, soft_wrap=True)  # noqa: E731
    totals = f"{report.documents} documents, {report.contents} contents, {report.pairs} pairs"
    if report.sound:
        say(f"sound: {totals}" + (
            f" ({report.without_checksums} contents stored before checksums, checked as far as their bytes allow; "
            "'dedupdb reindex' adds theirs)" if report.without_checksums else ""))
        return
    for p in report.problems:
        counted = p.what if p.count is None else f"{p.count} {p.what}"
        say(f"{p.check}: {counted}" + (f"; e.g. {'; '.join(p.examples)}" if p.examples else ""))
    failed = report.failed()
    # A damaged file comes first: reindexing one would only meet the damage again.
    hints = [_CHECK_HINTS["integrity"]] if "integrity" in failed else [_CHECK_HINTS[c] for c in failed if c in _CHECK_HINTS]
    say(
        f"not sound: {len(failed)} of {len(report.checks)} checks failed"
        + (f" ({totals})" if report.documents is not None else "")
        + "".join(f"; {h}" for h in dict.fromkeys(hints))
    )
