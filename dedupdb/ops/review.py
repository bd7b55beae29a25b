"""A review of the duplicate groups, decision by decision, before anything is done to a file.

The state of `dedupdb review` without its screen: the groups of `report` listed a few clusters at a time, the
member each group keeps, the members marked to act on, and the plan those marks make, carried out by the
code of `clean --plan` (cleanup.carry_out: checked against the database, bytes verified just before acting,
journaled, undoable). "Not duplicates" goes to the database (Database.ignore), so it outlives the review.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from dedupdb.database import Cluster, Database, Member, group_order
from dedupdb.errors import InputError
from dedupdb.index.grouping import DEFAULT_KEEP
from dedupdb.ops.actions import Action
from dedupdb.ops.cleanup import Outcome, Plan, Step, UndoOutcome, carry_out, state_of, undo

CLUSTERS_A_READ = 32  # stored clusters grouped at a time while the list is scrolled


class GroupPages:
    """The groups of Database.clusters(), in its order, reading only the clusters that may come next.

    Stored clusters are taken by their bound (group_bounds: no group of a cluster frees more than it), largest
    first; a group read is listed once it frees more than every cluster not read yet may, so the first screen
    of a store of a million documents reads a few dozen clusters, not all of them."""

    def __init__(self, db: Database, keep: str = DEFAULT_KEEP, prefer: Path | None = None, related: bool = False,
                 matching: str | None = None) -> None:
        self.db, self.keep, self.prefer, self.related = db, keep, prefer, related
        self.matching = matching.strip().lower() if matching and matching.strip() else None
        self._bounds = db.group_bounds(self.matching)
        self._read = 0  # clusters read so far (those of _bounds before this index)
        self._waiting: list[tuple[tuple, int, Cluster]] = []  # read, not listed yet: a heap in clusters()' order
        self._tie = itertools.count()
        self.listed: list[Cluster] = []

    @property
    def clusters_read(self) -> int:
        return self._read

    @property
    def complete(self) -> bool:
        return self._read >= len(self._bounds) and not self._waiting

    def upto(self, count: int) -> list[Cluster]:
        """The first `count` groups (fewer when there are no more)."""
        while len(self.listed) < count and not self.complete:
            while not self._ready():
                self._read_more()
            self.listed.append(heapq.heappop(self._waiting)[2])
        return self.listed[:count]

    def all(self) -> list[Cluster]:
        return self.upto(len(self._bounds) * 1_000_000 + 1)

    def _ready(self) -> bool:
        if not self._waiting:
            return self._read >= len(self._bounds)
        if self._read >= len(self._bounds):
            return True
        return self._waiting[0][2].reclaimable_bytes > self._bounds[self._read][1]

    def _read_more(self) -> None:
        chunk = [c for c, _ in self._bounds[self._read : self._read + CLUSTERS_A_READ]]
        self._read += len(chunk)
        for group in self.db.groups_of(chunk, keep=self.keep, prefer=self.prefer, related=self.related):
            if self.matching is None or any(_matches(m, self.matching) for m in group.members):
                heapq.heappush(self._waiting, (group_order(group), next(self._tie), group))


def _matches(member: Member, text: str) -> bool:
    return text in member.key.lower() or text in member.snippet.lower()


@dataclass(frozen=True)
class Row:
    """A member of a group as the review shows it: against the member it keeps now."""

    member: Member
    keeper: bool
    similarity: float | None  # to the keeper: 1.0 for the same text; None when no verified pair joins them
    exact: bool
    marked: bool
    why_not: str | None  # why it cannot be acted on (then it cannot be marked), or None


@dataclass
class Decisions:
    """What the reviewer chose for one group: the member kept and the members marked to act on (by key)."""

    keeper: str
    marked: set[str] = field(default_factory=set)


def group_id(group: Cluster) -> tuple[int, str]:
    """A group's name across re-reads: its cluster and the member its keep rule keeps."""
    return group.id, group.representative.key


class Review:
    """One review of a database: groups listed as needed, decisions by group, the plan they make."""

    def __init__(self, db: Database, keep: str = DEFAULT_KEEP, prefer: Path | None = None,
                 related: bool = False) -> None:
        self.db, self.keep, self.prefer, self.related = db, keep, prefer, related
        self.decisions: dict[tuple[int, str], Decisions] = {}
        self.matching: str | None = None
        self.pages = GroupPages(db, keep, prefer, related)

    @property
    def readonly(self) -> bool:
        return self.db.store.readonly

    def filter(self, text: str | None) -> None:
        """List only the groups with a member whose key or text holds this (any case); None or '' for all."""
        self.matching = text or None
        self.pages = GroupPages(self.db, self.keep, self.prefer, self.related, self.matching)

    def refresh(self) -> None:
        """Read the groups again (after files were acted on or pairs ignored): decisions stay where their group
        still keeps its members."""
        self.pages = GroupPages(self.db, self.keep, self.prefer, self.related, self.matching)
        shown = {group_id(g): {m.key for m in g.members} for g in self.pages.upto(max(len(self.decisions), 1))}
        for gid, decision in list(self.decisions.items()):
            members = shown.get(gid)
            if members is None and gid[1]:
                members = {m.key for g in self.db.groups_of([gid[0]], keep=self.keep, prefer=self.prefer,
                                                              related=self.related)
                           if group_id(g) == gid for m in g.members}
            if not members or decision.keeper not in members:
                del self.decisions[gid]
            else:
                decision.marked &= members

    # --- one group ---------------------------------------------------------

    def decision(self, group: Cluster) -> Decisions:
        return self.decisions.setdefault(group_id(group), Decisions(group.representative.key))

    def rows(self, group: Cluster) -> list[Row]:
        """The members, the one kept first, each scored against it."""
        decision = self.decision(group)
        keeper = next(m for m in group.members if m.key == decision.keeper)
        similar = self._similarities(group, keeper)
        threshold = self.db.settings.threshold
        rows = []
        for m in [keeper, *(m for m in group.members if m.key != keeper.key)]:
            if m.key == keeper.key:
                rows.append(Row(m, True, 1.0, True, False, "the copy kept"))
                continue
            similarity, exact = similar.get(m.key, (None, False))
            why = None
            if m.record is not None:
                why = "a record inside a record file: 'export --unique' serves records"
            elif m.linked_to is not None:
                why = f"a hard link of {m.linked_to}: removing it frees no space"
            elif not exact and (similarity is None or similarity < threshold):
                why = ("not a duplicate of the copy kept" if similarity is None else
                       f"{similarity:.2f} similar to the copy kept, below the threshold {threshold}")
            rows.append(Row(m, False, similarity, exact, m.key in decision.marked and why is None, why))
        return rows

    def _similarities(self, group: Cluster, keeper: Member) -> dict[str, tuple[float | None, bool]]:
        if keeper.key == group.representative.key:
            return {m.key: (m.similarity, m.exact) for m in group.members}
        ids = sorted({m.content_id for m in group.members})
        scores = self.db.store.pair_scores(ids)
        ignored = self.db.store.ignored_content_pairs()
        out: dict[str, tuple[float | None, bool]] = {}
        for m in group.members:
            if m.content_id == keeper.content_id:
                out[m.key] = (1.0, True)
                continue
            pair = (min(m.content_id, keeper.content_id), max(m.content_id, keeper.content_id))
            found = scores.get(pair) if pair not in ignored else None
            out[m.key] = (None if found is None else round(found[0], 4), False)
        return out

    def keep_member(self, group: Cluster, key: str) -> None:
        """Keep this member instead: marks it can no longer justify are dropped."""
        decision = self.decision(group)
        decision.keeper = key
        decision.marked.discard(key)
        allowed = {r.member.key for r in self.rows(group) if r.why_not is None}
        decision.marked &= allowed

    def toggle_mark(self, group: Cluster, key: str) -> str | None:
        """Mark or unmark a member; returns why it cannot be marked, or None."""
        decision = self.decision(group)
        if key in decision.marked:
            decision.marked.discard(key)
            return None
        row = next(r for r in self.rows(group) if r.member.key == key)
        if row.why_not:
            return row.why_not
        decision.marked.add(key)
        return None

    def mark_group(self, group: Cluster, marked: bool = True) -> int:
        """Mark (or unmark) every member that can be acted on; returns how many are marked now."""
        decision = self.decision(group)
        decision.marked = {r.member.key for r in self.rows(group) if r.why_not is None} if marked else set()
        return len(decision.marked)

    def mark_folder(self, folder: str) -> int:
        """In every group, mark each member under this folder that can be acted on (the idea of --prefer, the
        other way round): returns how many members are marked."""
        folder_path = Path(folder)
        count = 0
        for group in GroupPages(self.db, self.keep, self.prefer, self.related, folder).all():
            decision = self.decision(group)
            for row in self.rows(group):
                if row.why_not is None and Path(row.member.path).is_relative_to(folder_path):
                    decision.marked.add(row.member.key)
                    count += 1
        return count

    def marked_count(self) -> int:
        return sum(len(d.marked) for d in self.decisions.values())

    # --- not duplicates ----------------------------------------------------

    def not_duplicates(self, keys: list[str]) -> int:
        """Declare these members not duplicates of each other (in the database), then read the groups again;
        returns the pairs remembered."""
        self._require_writable()
        outcome = self.db.ignore(keys)
        self.refresh()
        return outcome.added

    # --- acting ------------------------------------------------------------

    def plan(self, action: str, to: str | Path | None = None) -> Plan:
        """The plan the marks make, for `clean --plan`'s carry_out: a step for each marked member, against the
        member its group keeps now."""
        try:
            chosen = Action.named(action)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        threshold = self.db.settings.threshold
        plan = Plan(action, str(Path(to).expanduser().resolve()) if to else None, self.keep, str(self.db.path.resolve()))
        for gid, decision in self.decisions.items():
            if not decision.marked:
                continue
            groups = [g for g in self.db.groups_of([gid[0]], keep=self.keep, prefer=self.prefer, related=self.related)
                      if group_id(g) == gid]
            if not groups:
                plan.passed_over += [(key, "its group changed since it was marked") for key in sorted(decision.marked)]
                continue
            group = groups[0]
            rows = {r.member.key: r for r in self.rows(group)}
            keeper = rows[decision.keeper].member
            kept = state_of(self.db, keeper)
            for key in sorted(decision.marked):
                row = rows.get(key)
                state = state_of(self.db, row.member) if row else None
                if row is None or row.why_not or kept is None or state is None:
                    why = row.why_not if row and row.why_not else "not an indexed file now"
                    plan.passed_over.append((row.member.path if row else key, why))
                    continue
                same_bytes = state.digest == kept.digest
                if chosen is Action.hardlink and not same_bytes:
                    plan.passed_over.append((state.path, "not the same bytes as the kept file (hard links need them)"))
                    continue
                if same_bytes:
                    why = "the same bytes as the kept file"
                elif row.exact:
                    why = "the same text as the kept file once normalized (case, spaces, encoding)"
                else:
                    why = f"{row.similarity:.2f} similar to the kept file (threshold {threshold})"
                plan.steps.append(Step(group.id, group.group, kept, state, float(row.similarity or 0.0), row.exact,
                                       why))
        return plan

    def act(self, plan: Plan, progress: Callable[[int, int], None] | None = None) -> Outcome:
        """Carry the plan out as `clean --plan` does; the marks acted on are dropped and the groups read again."""
        self._require_writable()
        outcome = carry_out(self.db, plan, progress)
        for decision in self.decisions.values():
            decision.marked -= {k for k in decision.marked if k in set(outcome.done)}
        self.refresh()
        return outcome

    def undo(self) -> UndoOutcome:
        """Put back the latest batch (the journal's undo), then read the groups again."""
        self._require_writable()
        outcome = undo(self.db)
        self.refresh()
        return outcome

    def journal(self) -> list[tuple]:
        return self.db.journal()

    def _require_writable(self) -> None:
        if self.readonly:
            raise InputError(f"{self.db.path} is open read-only: this review can look but not act")
