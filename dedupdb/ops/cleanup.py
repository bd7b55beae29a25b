"""Planning and carrying out a cleanup of duplicate files, journaled so that it can be undone.

A plan keeps one file of each group (see grouping.py: every other member is an exact copy of the kept file
or at least the threshold similar to it) and names what happens to the others, with the size and hash of
each file's bytes as they were when the plan was made. A plan can be written out as JSON, reviewed, and
carried out later: whatever changed since it was written is skipped.

Carrying it out writes every action to the journal before it happens and marks it done after. Just before
acting, each file is checked to still hold the bytes the plan saw, and the kept file too; the kept file is
never touched, so a group's last copy always stays. A hard link replaces a file with the kept file's bytes,
so it is made only between byte-identical files, compared again at the moment of linking. Records inside
record files are never cleaned: 'export --unique' serves them.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

from dedupdb.database import Database, Member
from dedupdb.errors import InputError, OptionError
from dedupdb.index.grouping import DEFAULT_KEEP
from dedupdb.index.grouping import under as _under
from dedupdb.ops.actions import CHANGED, NEVER, Action, Entry, NotIdentical, holds
from dedupdb.ingest.records import MAIL_FORMATS
from dedupdb.ops.fileops import discard_partial
from dedupdb.ops.trash import TrashLookup

PLAN_FORMAT = 1


@dataclass(frozen=True)
class FileState:
    """A file as the plan saw it: acting on it later is safe only while it still holds these bytes."""

    path: str
    size: int
    mtime_ns: int
    digest: str  # hashing.bytes_hash of its bytes


@dataclass(frozen=True)
class Step:
    cluster: int
    group: int
    keep: FileState
    remove: FileState
    similarity: float  # Jaccard of the file acted on to the kept one
    exact: bool        # the same text as the kept file, after normalization
    reason: str        # why it may go: its likeness to the kept file


@dataclass
class Plan:
    action: str
    to: str | None = None
    keep_rule: str = DEFAULT_KEEP
    database: str = ""
    steps: list[Step] = field(default_factory=list)
    passed_over: list[tuple[str, str]] = field(default_factory=list)  # (path, why it is left alone)
    templates: bool = False  # made with template pairs counted as duplicates (--include-templates)

    @property
    def reclaimable_bytes(self) -> int:
        return sum(step.remove.size for step in self.steps)

    def to_json(self) -> dict:
        return {
            "format": PLAN_FORMAT,
            "database": self.database,
            "action": self.action,
            "to": self.to,
            "keep_rule": self.keep_rule,
            "include_templates": self.templates,
            "reclaimable_bytes": self.reclaimable_bytes,
            "steps": [
                {"cluster": s.cluster, "group": s.group, "keep": asdict(s.keep), "act_on": asdict(s.remove),
                 "similarity": s.similarity, "exact": s.exact, "bytes": s.remove.size, "reason": s.reason}
                for s in self.steps
            ],
            "passed_over": [{"path": p, "reason": r} for p, r in self.passed_over],
        }

    @classmethod
    def from_json(cls, data: object) -> "Plan":
        """A plan written by to_json; anything else is refused with the reason."""
        try:
            if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
                raise ValueError(f"not a dedupdb plan of format {PLAN_FORMAT}")
            steps = [
                Step(int(s["cluster"]), int(s.get("group", 1)), _state(s["keep"]), _state(s["act_on"]),
                     float(s["similarity"]), bool(s["exact"]), str(s.get("reason", "")))
                for s in data["steps"]
            ]
            passed = [(str(p["path"]), str(p["reason"])) for p in data.get("passed_over", [])]
            action = data["action"]
            Action.named(action)  # one of the actions, by its name
            to = data.get("to")
            if to is not None and not (isinstance(to, str) and os.path.isabs(to)):
                raise ValueError(f"'to' must be an absolute folder path, not {to!r}")
            return cls(action, to, str(data.get("keep_rule", DEFAULT_KEEP)),
                       str(data.get("database", "")), steps, passed, bool(data.get("include_templates", False)))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"the plan cannot be read: {exc}") from None


def _state(item: dict) -> FileState:
    path = item["path"]
    if not (isinstance(path, str) and os.path.isabs(path)):  # as a plan writes them: what a step names is certain
        raise ValueError(f"a file's path must be absolute, not {path!r}")
    return FileState(path, int(item["size"]), int(item["mtime_ns"]), str(item["digest"]))


@dataclass
class Outcome:
    batch: int | None = None
    done: list[str] = field(default_factory=list)
    skipped: list[tuple[str, str]] = field(default_factory=list)  # changed or gone since the plan: left alone
    failed: list[tuple[str, str]] = field(default_factory=list)
    refused: list[tuple[str, str]] = field(default_factory=list)  # a step the database does not allow


def make_plan(
    db: Database,
    keep: str = DEFAULT_KEEP,
    prefer: Path | None = None,
    action: str = "list",
    cluster: int | None = None,
    min_similarity: float = 0.0,
    exact_only: bool = False,
    under: Path | None = None,
    to: Path | None = None,
    templates: bool = False,
) -> Plan:
    """What a cleanup would do: for every group of duplicate files (the same groups 'report' shows for the
    same keep rule), keep its first file and act on the others that pass the filters. Template pairs (texts
    differing only in numbers or one slot: text/templates.py) group files only with templates."""
    try:
        chosen = Action.named(action)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if not 0.0 <= min_similarity <= 1.0:  # NaN too, which every comparison would let through
        raise OptionError(f"the least similarity must be in [0, 1], got {min_similarity}")
    under = under.expanduser().resolve() if under else None
    groups = db.clusters(keep=keep, prefer=prefer, files_only=True, templates=templates)
    if cluster is not None:
        groups = [g for g in groups if g.id == cluster]
        if not groups:
            raise InputError(f"no duplicate cluster {cluster}; 'dedupdb report' lists them")
    plan = Plan(action, str(to.expanduser().resolve()) if to else None, keep, str(db.path.resolve()),
                templates=templates)
    if cluster is None:
        parts = db.parts_in_groups()
        mail_files = {path for path in {path for _, path in parts} if _is_mail(db, path)}  # one lookup a file
        plan.passed_over += [(key, _PART_OF_A_FILE) for key, path in parts if path in mail_files]
    threshold = db.settings.threshold
    for group in groups:
        keeper = group.representative
        kept = state_of(db, keeper)
        if kept is None:
            continue
        for m in group.members[1:]:
            state = state_of(db, m)
            if state is None:
                continue
            same_bytes = state.digest == kept.digest
            reason = None
            if m.linked_to is not None:
                reason = f"already a hard link of {m.linked_to}: removing it frees no space"
            elif under is not None and not _under(m.path, under):
                reason = "outside --under"
            elif exact_only and not m.exact:
                reason = "not an exact copy (--exact-only)"
            elif chosen is Action.hardlink and not same_bytes:
                reason = ("the same text but not the same bytes as the kept file: a hard link would replace them"
                          if m.exact else "not an exact copy (hard links need identical bytes)")
            elif m.similarity < min_similarity:
                reason = f"similarity {m.similarity:.2f} below --min-similarity"
            if reason:
                plan.passed_over.append((m.path, reason))
                continue
            if same_bytes:
                why = "the same bytes as the kept file"
            elif m.exact:
                why = "the same text as the kept file once normalized (case, spaces, encoding)"
            else:
                why = f"{m.similarity:.2f} similar to the kept file (threshold {threshold})"
            plan.steps.append(Step(group.id, group.group, kept, state, m.similarity, m.exact, why))
    return plan


def state_of(db: Database, member: Member) -> FileState | None:
    """The file of a member as the database has it, or None when it is not an indexed file."""
    row = db.store.file_by_path(member.path)
    if row is None or row.status != "indexed":
        return None
    return FileState(row.path, row.size, row.mtime_ns, row.digest)


def _changed(state: FileState) -> str | None:
    """Why a file may not be touched now, or None when it still holds exactly the bytes the plan saw."""
    try:
        # The size first: a file of another size is changed without reading it.
        if os.stat(state.path).st_size != state.size or not holds(Path(state.path), state.digest):
            return "changed since it was indexed (or since the plan was made)"
    except OSError:
        return "missing"
    return None


@dataclass(frozen=True)
class _Stored:
    """A file as the database has it, with the one text it holds."""

    state: FileState
    content_id: int


_PART_OF_A_FILE = "a message in a mail file (or its attachment): only whole files are cleaned"


def _is_mail(db: Database, path: str) -> bool:
    row = db.store.file_by_path(path)
    return row is not None and _not_whole(row.options) == _PART_OF_A_FILE


def _not_whole(options: str | None) -> str:
    """Why the documents of a file that holds several (or a part of one) are never acted on."""
    if options and json.loads(options).get("format") in MAIL_FORMATS:
        return _PART_OF_A_FILE
    return "a record file: its records are never cleaned"


class _Checker:
    """Checks each step of a plan against the database at the moment of acting, whatever the plan file says:
    a plan is meant to be reviewed and edited, so it is a request, not an authority."""

    def __init__(self, db: Database, action: Action, templates: bool = False) -> None:
        self.db = db
        self.action = action
        self.templates = templates  # the plan counts template pairs as duplicates
        self.threshold = db.settings.threshold
        self._stored: dict[str, _Stored | str] = {}
        self._now: dict[str, str | None] = {}
        self.kept: set[str] = set()   # files some accepted step keeps: never acted on
        self.acted: set[str] = set()  # files some accepted step acts on: never kept
        self.ignored = db.store.ignored_content_pairs()  # pairs declared not duplicates

    def stored(self, path: str) -> _Stored | str:
        """The file as stored, or why it is not a file the database holds whole."""
        if path not in self._stored:
            row = self.db.store.file_by_path(path)
            documents = self.db.store.documents_of_file(row.id) if row is not None else []
            if row is None or row.status != "indexed" or not documents:
                self._stored[path] = "not a file in the database"
            elif row.kind != "file" or len(documents) != 1:
                self._stored[path] = _not_whole(row.options)
            else:
                self._stored[path] = _Stored(FileState(row.path, row.size, row.mtime_ns, row.digest), documents[0][1])
        return self._stored[path]

    def current(self, stored: FileState) -> str | None:
        """Why the file's bytes now are not those it was indexed with (read once per file and plan)."""
        if stored.path not in self._now:
            self._now[stored.path] = _changed(stored)
        return self._now[stored.path]

    def refusal(self, step: Step) -> str | None:
        """Why the database does not allow this step, whatever changed on disk; None when it does."""
        keep, remove = step.keep.path, step.remove.path
        if os.path.normpath(keep) == os.path.normpath(remove):
            return "the file to act on is the copy to keep"
        if remove in self.kept:
            return "it is the copy another step of the plan keeps"
        if keep in self.acted:
            return f"the copy to keep, {keep}, is acted on by another step of the plan"
        if remove in self.acted:
            return "another step of the plan acts on it already"
        kept, acted = self.stored(keep), self.stored(remove)
        if isinstance(kept, str):
            return f"the copy to keep, {keep}, is {kept}"
        if isinstance(acted, str):
            return acted
        if kept.content_id == acted.content_id:
            similarity = 1.0
        else:
            a, b = sorted((kept.content_id, acted.content_id))
            if (a, b) in self.ignored:
                return "declared not a duplicate of the copy to keep ('dedupdb unignore' takes that back)"
            if not self.templates and (a, b) in self.db.store.template_pairs([a, b]):
                return ("a template of the copy to keep (only numbers or one slot differ): a plan made with "
                        "--include-templates may act on it")
            score = self.db.store.pair_scores([a, b]).get((a, b))
            similarity = score[0] if score is not None else 0.0
            if step.exact:
                return "not the same text as the copy to keep, as the plan says"
        if similarity < self.threshold:
            return (f"not a duplicate of the copy to keep: {similarity:.2f} similar, below the threshold "
                    f"{self.threshold}")
        if similarity + _TOLERANCE < step.similarity:
            return f"{similarity:.2f} similar to the copy to keep, not {step.similarity:.2f} as the plan says"
        return None

    def skip(self, step: Step) -> str | None:
        """Why this allowed step cannot be carried out now (its files changed); None when it can."""
        kept, acted = self.stored(step.keep.path), self.stored(step.remove.path)
        assert not isinstance(kept, str) and not isinstance(acted, str)
        if step.keep.digest != kept.state.digest:
            return f"the copy to keep, {step.keep.path}, changed since the plan was made"
        if step.remove.digest != acted.state.digest:
            return "changed since the plan was made"
        why = self.current(kept.state)
        if why:
            return f"the copy to keep, {step.keep.path}, is {why}"
        why = self.current(acted.state)
        if why:
            return why
        return self.action.handler.check(acted.state.digest, kept.state.digest, Path(step.remove.path),
                                         Path(step.keep.path))

    def accept(self, step: Step) -> None:
        self.kept.add(step.keep.path)
        self.acted.add(step.remove.path)


_TOLERANCE = 0.005  # the plan's similarity is printed and may be rounded by whoever edits it
_FLUSH_FILES = 512  # journal updates and index removals are written this many files at a time
_FLUSH_SECONDS = 1.0


def carry_out(db: Database, plan: Plan, progress: Callable[[int, int], None] | None = None) -> Outcome:
    """Do what the plan says, journaled. Every step is checked against the database first (see _Checker): a
    step it does not allow is refused with the reason, one whose files changed since is skipped, and no file
    a step keeps is ever acted on, so every group keeps a copy whatever the plan file says."""
    try:
        action = Action.named(plan.action)
    except ValueError as exc:
        raise InputError(str(exc)) from None
    if not action.changes_files:
        raise InputError("only " + ", ".join(a.value for a in Action if a.changes_files) + " change files")
    handler = action.handler
    to = Path(plan.to).expanduser().resolve() if plan.to else None
    if action is Action.move:
        if to is None:
            raise InputError("--action move needs --to DIR")
        if plan.steps:
            # Inside the folders being cleaned, moved copies would be indexed again by the next add and could
            # end up kept while the original is moved away.
            common = Path(os.path.commonpath([s.remove.path for s in plan.steps] + [s.keep.path for s in plan.steps]))
            if to == common or to.is_relative_to(common):
                raise InputError(f"--to must lie outside {common}, where the files being cleaned are")
    outcome = Outcome()
    checker = _Checker(db, action, plan.templates)
    checked: list[tuple[FileState, Path | None]] = []
    for step in plan.steps:
        refused = checker.refusal(step)
        if refused:
            outcome.refused.append((step.remove.path, refused))
            continue
        why = checker.skip(step)
        if why:
            outcome.skipped.append((step.remove.path, why))
            continue
        checker.accept(step)
        acted = checker.stored(step.remove.path)
        assert not isinstance(acted, str)
        checked.append((acted.state, handler.destination(Path(step.remove.path), Path(step.keep.path), to)))
    if not checked:
        return outcome
    entries = [(s.path, str(d) if d else None, s.size, s.mtime_ns, s.digest) for s, d in checked]
    with db.store.transaction():
        outcome.batch = db.store.create_batch(action.value, str(to) if to else None, entries)
    journal = db.store.journal_entries(outcome.batch)
    # Each file is acted on after its journal entry is committed as planned; marking it done and dropping it
    # from the index are written in groups, as a commit and an index removal per file cost 20 ms each. An
    # entry left 'planned' by an interruption is undone from what is on disk (see _undo_entry).
    finished: list[tuple[int, str, str | None, str | None]] = []
    gone: list[str] = []
    last_flush = time.monotonic()

    def flush() -> None:
        nonlocal last_flush
        if finished:
            with db.store.transaction():
                db.store.finish_entries(finished)
                if gone:
                    db.forget_files(gone, status="missing")
            finished.clear()
            gone.clear()
        last_flush = time.monotonic()

    try:
        for done, ((state, destination), entry) in enumerate(zip(checked, journal), 1):
            entry_id, source = entry[0], Path(entry[1])
            try:
                destination = handler.do(source, destination)
            except NotIdentical as exc:
                finished.append(("skipped", str(exc), None, entry_id))
                outcome.skipped.append((str(source), str(exc)))
                continue
            except OSError as exc:
                finished.append(("failed", exc.strerror or str(exc), None, entry_id))
                outcome.failed.append((str(source), exc.strerror or str(exc)))
                continue
            finished.append(("done", None, str(destination) if destination else None, entry_id))
            if handler.removes_from_index:
                gone.append(str(source))
            outcome.done.append(str(source))
            if progress:
                progress(done, len(checked))
            if len(finished) >= _FLUSH_FILES or time.monotonic() - last_flush >= _FLUSH_SECONDS:
                flush()
    finally:
        flush()
    return outcome


@dataclass
class UndoOutcome:
    batch: int
    restored: list[str] = field(default_factory=list)
    cannot: list[tuple[str, str]] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)  # restored, but edited while away: not the bytes it had


def undo(db: Database, batch_id: int | None = None) -> UndoOutcome:
    """Put back what a batch did (the latest one not yet undone by default), newest action first. Every file
    comes back with the bytes it had, or is named with the reason it cannot. Folders a move made, left empty,
    are removed."""
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
    action, target = Action.named(batch[2]), batch[3]
    outcome = UndoOutcome(batch_id)
    lookup = TrashLookup()
    for entry_id, source, destination, size, mtime_ns, digest, status, _ in reversed(db.store.journal_entries(batch_id)):
        if status not in ("done", "planned"):
            continue
        away = Path(destination) if destination else None
        try:
            discard_partial(Path(source))  # a copy back that an earlier undo did not finish
            entry = Entry(Path(source), away, mtime_ns, digest, status, Path(target) if target else None)
            message = action.handler.undo(entry, lookup)
        except OSError as exc:
            message = exc.strerror or str(exc)
        with db.store.transaction():
            if message is None or message == CHANGED:
                db.store.set_entry_status(entry_id, "undone")
            elif status == "planned":
                db.store.set_entry_status(entry_id, "skipped", message)
        if message is None or message == CHANGED:
            outcome.restored.append(source)
            if message == CHANGED:
                outcome.changed.append(source)
        elif not message.startswith(NEVER):
            outcome.cannot.append((source, message))
    # Index again every file of the batch that is back, also those an interrupted undo put back before: the
    # batch is marked undone only once they are.
    back = [e[1] for e in db.store.journal_entries(batch_id) if e[6] == "undone" and os.path.exists(e[1])]
    if back and not db.outdated:  # an outdated store takes them in with 'reindex --from-sources'
        db.add(back)
    with db.store.transaction():
        db.store.mark_batch_undone(batch_id)
    return outcome
