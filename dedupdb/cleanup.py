"""Planning and carrying out a cleanup of duplicate files, journaled so that it can be undone.

A plan keeps one file of each cluster by a rule and names what happens to the
others. Carrying it out writes every action to the journal before it happens
and marks it done after; each file is checked to still hold what was indexed,
and the kept file is never touched, so a cluster's last copy always stays.
Records inside record files are never cleaned: 'export --unique' serves them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from .database import Cluster, Database, Member
from .errors import InputError
from .fileops import mirrored, replace_with_copy, replace_with_link, safe_move
from .hashing import bytes_hash
from .minhash import sketch_jaccard

KEEP_RULES = ("newest", "oldest", "longest", "shortest", "largest", "smallest")
ACTIONS = ("list", "move", "trash", "hardlink")


@dataclass(frozen=True)
class Step:
    cluster: int
    keep: Member
    remove: Member
    similarity: float  # Jaccard of the file acted on to the kept one
    exact: bool


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    passed_over: list[tuple[str, str]] = field(default_factory=list)  # (path, why it is left alone)

    @property
    def reclaimable_bytes(self) -> int:
        return sum(step.remove.bytes for step in self.steps)


@dataclass
class Outcome:
    batch: int | None = None
    done: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)
    failed: list[tuple[str, str]] = field(default_factory=list)


def _under(path: str, folder: Path | None) -> bool:
    return folder is not None and Path(path).is_relative_to(folder)


def _keep_key(rule: str, prefer: Path | None, chars: dict[int, int]) -> Callable[[Member], tuple]:
    measures = {
        "newest": lambda m: -m.mtime_ns,
        "oldest": lambda m: m.mtime_ns,
        "longest": lambda m: -chars[m.content_id],
        "shortest": lambda m: chars[m.content_id],
        "largest": lambda m: -m.bytes,
        "smallest": lambda m: m.bytes,
    }
    if rule not in measures:
        raise InputError(f"unknown keep rule {rule!r}; use one of {', '.join(KEEP_RULES)}")
    measure = measures[rule]
    # Ties are broken by path so the same store always gives the same plan.
    return lambda m: (prefer is not None and not _under(m.path, prefer), measure(m), m.path)


def make_plan(
    db: Database,
    keep: str = "newest",
    prefer: Path | None = None,
    action: str = "list",
    cluster: int | None = None,
    min_similarity: float = 0.0,
    exact_only: bool = False,
    under: Path | None = None,
) -> Plan:
    if action not in ACTIONS:
        raise InputError(f"unknown action {action!r}; use one of {', '.join(ACTIONS)}")
    prefer = prefer.expanduser().resolve() if prefer else None
    under = under.expanduser().resolve() if under else None
    clusters: list[Cluster] = db.clusters()
    if cluster is not None:
        clusters = [c for c in clusters if c.id == cluster]
        if not clusters:
            raise InputError(f"no duplicate cluster {cluster}; 'dedupdb report' lists them")
    plan = Plan()
    for c in clusters:
        files = [m for m in c.members if m.record is None]
        for m in c.members:
            if m.record is not None:
                plan.passed_over.append((m.key, "a record inside a record file (use 'export --unique')"))
        if len(files) < 2:
            continue
        rows = db.store.contents({m.content_id for m in files})
        chars = {cid: row.chars for cid, row in rows.items()}
        keeper = min(files, key=_keep_key(keep, prefer, chars))
        for m in sorted(files, key=lambda m: m.path):
            if m is keeper:
                continue
            exact = m.content_id == keeper.content_id
            similarity = 1.0 if exact else round(
                sketch_jaccard(rows[keeper.content_id].sketch, rows[m.content_id].sketch, db.settings.sketch_size), 4
            )
            reason = None
            if under is not None and not _under(m.path, under):
                reason = "outside --under"
            elif exact_only and not exact:
                reason = "not an exact copy (--exact-only)"
            elif action == "hardlink" and not exact:
                reason = "not an exact copy (hard links need identical text)"
            elif similarity < min_similarity:
                reason = f"similarity {similarity:.2f} below --min-similarity"
            if reason:
                plan.passed_over.append((m.path, reason))
            else:
                plan.steps.append(Step(c.id, keeper, m, similarity, exact))
    return plan


def _still_as_indexed(db: Database, path: str) -> str | None:
    """Why a file may not be touched now, or None when it still holds exactly what was indexed."""
    row = db.store.file_by_path(path)
    if row is None or row.status != "indexed":
        return "no longer indexed"
    try:
        st = os.stat(path)
        if st.st_size != row.size:
            return "changed since it was indexed"
        with open(path, "rb") as f:
            if bytes_hash(f.read()) != row.digest:
                return "changed since it was indexed"
    except OSError:
        return "missing"
    return None


def carry_out(
    db: Database, plan: Plan, action: str, to: Path | None = None, progress: Callable[[int, int], None] | None = None
) -> Outcome:
    """Do what the plan says, journaled; a changed or missing file is skipped and reported."""
    if action not in ("move", "trash", "hardlink"):
        raise InputError("only move, trash and hardlink change files")
    if action == "move":
        if to is None:
            raise InputError("--action move needs --to DIR")
        to = to.expanduser().resolve()
        if plan.steps:
            # Inside the folders being cleaned, moved copies would be indexed again by the next add and could
            # end up kept while the original is moved away.
            common = Path(os.path.commonpath([s.remove.path for s in plan.steps] + [s.keep.path for s in plan.steps]))
            if to == common or to.is_relative_to(common):
                raise InputError(f"--to must lie outside {common}, where the files being cleaned are")
    outcome = Outcome()
    checked: list[tuple[Step, Path | None]] = []
    keepers_ok: dict[str, str | None] = {}
    for step in plan.steps:
        keeper = step.keep.path
        if keeper not in keepers_ok:
            keepers_ok[keeper] = _still_as_indexed(db, keeper)
        why = (f"the copy to keep, {keeper}, is {keepers_ok[keeper]}" if keepers_ok[keeper]
               else _still_as_indexed(db, step.remove.path))
        if not why and action == "hardlink" and os.path.samefile(keeper, step.remove.path):
            why = "already a hard link to the copy kept"
        if why:
            outcome.skipped.append((step.remove.path, why))
            continue
        destination = mirrored(Path(step.remove.path), to) if action == "move" else Path(keeper)
        checked.append((step, destination))
    if not checked:
        return outcome
    entries = []
    for step, destination in checked:
        row = db.store.file_by_path(step.remove.path)
        entries.append((step.remove.path, str(destination) if action != "trash" else None, row.size, row.mtime_ns,
                        row.digest))
    with db.store.transaction():
        outcome.batch = db.store.create_batch(action, str(to) if to else None, entries)
    journal = db.store.journal_entries(outcome.batch)
    for done, ((step, destination), entry) in enumerate(zip(checked, journal), 1):
        entry_id, source = entry[0], Path(entry[1])
        try:
            if action == "move":
                safe_move(source, destination)
            elif action == "trash":
                from send2trash import send2trash

                send2trash(str(source))
            else:
                replace_with_link(source, destination)
        except OSError as exc:
            with db.store.transaction():
                db.store.set_entry_status(entry_id, "failed", exc.strerror or str(exc))
            outcome.failed.append((str(source), exc.strerror or str(exc)))
            continue
        with db.store.transaction():
            db.store.set_entry_status(entry_id, "done")
            if action != "hardlink":  # a hard link keeps the same text at the same path: still indexed
                db.forget_file(str(source), status="missing")
        outcome.done.append(str(source))
        if progress:
            progress(done, len(checked))
    return outcome


@dataclass
class UndoOutcome:
    batch: int
    restored: list[str] = field(default_factory=list)
    cannot: list[tuple[str, str]] = field(default_factory=list)


def undo(db: Database, batch_id: int | None = None) -> UndoOutcome:
    """Put back what a batch did (the latest one not yet undone by default), newest action first."""
    batches = db.store.journal_batches()
    if batch_id is None:
        pending = [b for b in batches if b[4] is None]
        if not pending:
            raise InputError("nothing to undo: the journal has no batch that is not undone")
        batch_id = pending[0][0]
    batch = db.store.batch(batch_id)
    if batch is None:
        raise InputError(f"no journal batch {batch_id}; 'dedupdb journal' lists them")
    if batch[4] is not None:
        raise InputError(f"batch {batch_id} was undone already")
    action = batch[2]
    outcome = UndoOutcome(batch_id)
    for entry_id, source, destination, size, mtime_ns, digest, status, _ in reversed(db.store.journal_entries(batch_id)):
        if status not in ("done", "planned"):
            continue
        src = Path(source)
        try:
            message = _undo_entry(action, src, Path(destination) if destination else None, size, mtime_ns, status)
        except OSError as exc:
            message = exc.strerror or str(exc)
        with db.store.transaction():
            if message is None:
                db.store.set_entry_status(entry_id, "undone")
            elif status == "planned":
                db.store.set_entry_status(entry_id, "skipped", message)
        if message is None:
            outcome.restored.append(source)
        elif not message.startswith(("never", "was never")):
            outcome.cannot.append((source, message))
    with db.store.transaction():
        db.store.mark_batch_undone(batch_id)
    restored = [p for p in outcome.restored if os.path.exists(p)]
    if restored:
        db.add(restored)  # index them again where they are back
    return outcome


def _undo_entry(action: str, source: Path, destination: Path | None, size: int, mtime_ns: int, status: str) -> str | None:
    """Undo one journal entry; None when done, else why it cannot be."""
    if action == "trash":
        if status == "planned" and source.exists():
            return "was never moved to the trash"
        return "in the system trash: restore it from there"
    if action == "move":
        if source.exists():
            # A planned entry whose file never left: nothing to do; else something now stands in the way.
            return "never moved" if status == "planned" else "something else is at the original place now"
        if destination is None or not destination.exists():
            return f"not found at {destination}"
        safe_move(destination, source)
        os.utime(source, ns=(mtime_ns, mtime_ns))
        return None
    # hardlink: give the path its own copy of the text back
    if not source.exists() or destination is None or not destination.exists():
        return "the file or the copy it was linked to is gone"
    if status == "planned" and not os.path.samefile(source, destination):
        return "never linked"
    replace_with_copy(source, destination, mtime_ns)
    return None
