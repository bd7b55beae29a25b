"""Everything the user sees: rich tables, trees and progress bars; JSON, JSON Lines and CSV writers."""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import asdict
from datetime import datetime
from typing import TextIO

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text
from rich.tree import Tree

from .database import Cluster, Pair, QueryHit
from .pipeline import AddSummary

console = Console()
err_console = Console(stderr=True)


def human_bytes(n: int) -> str:
    value = float(n)
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if value < 1024 or unit == "TB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    return f"{n} B"


def _when(mtime_ns: int) -> str:
    return datetime.fromtimestamp(mtime_ns / 1e9).strftime("%Y-%m-%d %H:%M")


def write_json(data, out: TextIO | None = None) -> None:
    out = out or sys.stdout
    json.dump(data, out, ensure_ascii=False, indent=2)
    out.write("\n")


@contextmanager
def progress_bar(description: str):
    """A callback (done, total) that draws a bar on a terminal and does nothing when output is piped."""
    if not err_console.is_terminal:
        yield None
        return
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn())
    with Progress(*columns, console=err_console, transient=True) as bar:
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


def add_summary(summary: AddSummary, verbose: bool = False) -> None:
    for path, reason in summary.failed:
        err_console.print(f"[red]failed[/red] {escape(path)}: {escape(reason)}", highlight=False)
    for where, reason in summary.bad_records[:50]:
        err_console.print(f"[yellow]bad record[/yellow] {escape(where)}: {escape(reason)}", highlight=False)
    if summary.bad_record_count > 50:
        err_console.print(f"... and {summary.bad_record_count - 50} more bad records (see --format json)")
    if verbose:
        for path, reason in summary.skipped:
            console.print(f"[dim]skipped[/dim] {escape(path)}: {escape(reason)}", highlight=False)
        for path, message in summary.warnings:
            console.print(f"[yellow]warning[/yellow] {escape(path)}: {escape(message)}", highlight=False)
    for path in summary.missing:
        console.print(f"[yellow]missing[/yellow] {escape(path)}", highlight=False)
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
                "mtime": datetime.fromtimestamp(m.mtime_ns / 1e9).isoformat(timespec="seconds"),
                "similarity": m.similarity,
                "exact": m.exact,
                "keep": i == 0,
                "representative": i == 0,
                "hard_link_of": m.linked_to,
            }
            for i, m in enumerate(cluster.members)
        ],
    }


def report_table(clusters: list[Cluster], related: bool = False) -> None:
    if not clusters:
        console.print("No duplicates found.")
        return
    for cluster in clusters:
        rep = cluster.representative
        name = f"cluster {cluster.id}" if related else f"cluster {cluster.id}.{cluster.group}"
        title = (
            f"[bold]{cluster.kind} {name}[/bold] · {len(cluster.members)} documents · "
            f"{human_bytes(cluster.reclaimable_bytes)} reclaimable"
        )
        tree = Tree(title, highlight=False)
        first = "first" if related else "keep"
        tree.add(f"[green]{first}[/green] {escape(rep.key)}  [dim]{human_bytes(rep.bytes)} · {_when(rep.mtime_ns)}[/dim]")
        for m in cluster.members[1:]:
            label = "exact" if m.exact else f"{m.similarity:.2f}"
            link = f" · hard link of {escape(m.linked_to)}" if m.linked_to else ""
            tree.add(
                f"[cyan]{label:>5}[/cyan] {escape(m.key)}  [dim]{human_bytes(m.bytes)} · {_when(m.mtime_ns)}{link}[/dim]"
            )
        console.print(tree)
    total = sum(c.reclaimable_bytes for c in clusters)
    what = ("related cluster" if related else "group") + ("" if len(clusters) == 1 else "s")
    console.print(f"{len(clusters)} {what}, {human_bytes(total)} reclaimable", highlight=False)


def report_csv(clusters: list[Cluster], out: TextIO | None = None) -> None:
    writer = csv.writer(out or sys.stdout)
    writer.writerow(
        ["cluster", "group", "kind", "representative", "key", "path", "bytes", "mtime", "similarity", "exact",
         "hard_link_of"]
    )
    for cluster in clusters:
        for i, m in enumerate(cluster.members):
            when = datetime.fromtimestamp(m.mtime_ns / 1e9).isoformat(timespec="seconds")
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
    # The key tells rows apart: it keeps its width, and the snippet gives way (its width is set, or rich would
    # squeeze the score columns to nothing on a narrow terminal). 3 characters of border and padding a column.
    fixed = sum(len(name) for name in scores) + 3 * 5 + 1
    key_width = min(max(len(h.key) for h in hits), max(20, console.width - fixed - 8))
    table.add_column("key", no_wrap=True, min_width=key_width, max_width=key_width)
    table.add_column("snippet", no_wrap=True, overflow="ellipsis", max_width=max(8, console.width - fixed - key_width))
    for h in hits:
        table.add_row(
            "exact" if h.exact else f"{h.jaccard:.3f}",
            "" if h.containment is None else f"{h.containment:.3f}",
            "" if h.hamming is None else str(h.hamming),
            Text(h.key),
            Text(h.snippet[:80]),
        )
    console.print(table)


def query_json(hits: list[QueryHit]) -> list[dict]:
    return [asdict(h) for h in hits]


def pairs_jsonl(pairs: Iterable[Pair], out: TextIO | None = None) -> None:
    out = out or sys.stdout
    for p in pairs:
        out.write(json.dumps(asdict(p), ensure_ascii=False) + "\n")


PAIR_FIELDS = ("a", "b", "jaccard", "hamming", "exact", "containment")  # jsonl keys and csv columns alike


def pairs_csv(pairs: Iterable[Pair], out: TextIO | None = None) -> None:
    writer = csv.writer(out or sys.stdout)
    writer.writerow(PAIR_FIELDS)
    for p in pairs:
        writer.writerow([p.a, p.b, p.jaccard, "" if p.hamming is None else p.hamming, "true" if p.exact else "false",
                         "" if p.containment is None else p.containment])


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


def diff_view(label_a: str, text_a: str, label_b: str, text_b: str, jaccard: float, result, unified: bool) -> None:
    console.print(
        f"jaccard {jaccard:.3f} · {result.unit}-level ratio {result.ratio:.3f} · "
        f"{human_bytes(len(text_a.encode()))} vs {human_bytes(len(text_b.encode()))} · {len(result.changes)} changes",
        highlight=False,
    )
    if unified:
        merged = Text()
        for o in result.opcodes:
            if o.op == "equal":
                merged.append(o.a_text)
            else:
                merged.append(o.a_text, style="bold red strike")
                merged.append(o.b_text, style="bold green")
        console.print(f"--- {label_a}\n+++ {label_b}", highlight=False, markup=False)
        console.print(merged)
        return
    left, right = Text(), Text()
    for o in result.opcodes:
        left.append(o.a_text, style=None if o.op == "equal" else "bold red")
        right.append(o.b_text, style=None if o.op == "equal" else "bold green")
    table = Table(expand=True, highlight=False)
    table.add_column(Text(label_a), ratio=1)
    table.add_column(Text(label_b), ratio=1)
    table.add_row(left, right)
    console.print(table)


# --- cleanup -------------------------------------------------------------------


def plan_paths(plan, null: bool) -> None:
    separator = "\0" if null else "\n"
    sys.stdout.write("".join(step.remove.path + separator for step in plan.steps))


def plan_table(plan) -> None:
    if not plan.steps:
        console.print("Nothing to clean.")
        return
    table = Table("cluster", "keep", plan.action, "similarity", "size", highlight=False)
    for column in table.columns[1:3]:
        column.overflow = "fold"  # every character of a path matters when files are about to move
    for step in plan.steps:
        table.add_row(
            f"{step.cluster}.{step.group}", Text(step.keep.path), Text(step.remove.path),
            "exact" if step.exact else f"{step.similarity:.2f}", human_bytes(step.remove.size),
        )
    console.print(table)
    where = f" into {plan.to}" if plan.to else ""
    console.print(
        f"{len(plan.steps)} files to {plan.action}{where}, {human_bytes(plan.reclaimable_bytes)} reclaimed; "
        f"{len(plan.passed_over)} left alone",
        highlight=False,
    )


def clean_outcome_json(outcome) -> dict:
    return {
        "batch": outcome.batch,
        "done": outcome.done,
        "skipped": [{"path": p, "reason": r} for p, r in outcome.skipped],
        "failed": [{"path": p, "reason": r} for p, r in outcome.failed],
    }


def clean_outcome(outcome, action: str) -> None:
    for path, why in outcome.skipped:
        err_console.print(f"[yellow]skipped[/yellow] {escape(path)}: {escape(why)}", highlight=False)
    for path, why in outcome.failed:
        err_console.print(f"[red]failed[/red] {escape(path)}: {escape(why)}", highlight=False)
    batch = f" (journal batch {outcome.batch}; 'dedupdb undo {outcome.batch}' puts it back)" if outcome.batch else ""
    console.print(
        f"{action}: {len(outcome.done)} done, {len(outcome.skipped)} skipped, {len(outcome.failed)} failed{batch}",
        highlight=False,
    )


def undo_outcome(outcome) -> None:
    for path, why in outcome.cannot:
        err_console.print(f"[yellow]cannot restore[/yellow] {escape(path)}: {escape(why)}", highlight=False)
    for path in outcome.changed:
        err_console.print(f"[yellow]restored, edited since the cleanup[/yellow] {escape(path)}", highlight=False)
    console.print(
        f"batch {outcome.batch}: {len(outcome.restored)} restored, {len(outcome.cannot)} cannot be restored",
        highlight=False,
    )


def journal_json(batches) -> list[dict]:
    return [
        {
            "batch": b[0],
            "created": datetime.fromtimestamp(b[1]).isoformat(timespec="seconds"),
            "action": b[2],
            "target": b[3],
            "undone": None if b[4] is None else datetime.fromtimestamp(b[4]).isoformat(timespec="seconds"),
            "entries": b[5],
        }
        for b in batches
    ]


def journal_table(batches) -> None:
    if not batches:
        console.print("The journal is empty.")
        return
    table = Table("batch", "created", "action", "target", "entries", "undone", highlight=False)
    for item in journal_json(batches):
        entries = ", ".join(f"{k} {v}" for k, v in sorted(item["entries"].items()))
        table.add_row(str(item["batch"]), item["created"], item["action"], Text(item["target"] or ""), entries,
                      item["undone"] or "")
    console.print(table)


# --- check -------------------------------------------------------------------

_CHECK_HINTS = {
    "integrity": "the file itself is damaged: restore it from a backup, or add the files again into a new database",
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
        "problems": [
            {"check": p.check, "count": p.count, "what": p.what, "examples": list(p.examples)} for p in report.problems
        ],
    }


def check_report(report) -> None:
    """One line when the store is sound; else one line per failed check, then a verdict with what to do."""
    say = lambda line: console.print(line, highlight=False, markup=False, soft_wrap=True)  # noqa: E731
    totals = f"{report.documents} documents, {report.contents} contents, {report.pairs} pairs"
    if report.sound:
        say(f"sound: {totals}")
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
