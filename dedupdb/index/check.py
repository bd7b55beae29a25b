"""dedupdb check: SQLite's integrity check, then the store's own invariants, all read in one snapshot.

The invariants, each a named check:

- integrity: PRAGMA integrity_check finds nothing wrong with the file's pages, B-trees and indexes.
- runs: the sorted runs that hold index and containment rows (runs.py) are whole: each run's fences name its
  blocks in order, every block is sorted, starts where its fence says and above the block before it, the
  entries add up to the run's count, and no block belongs to no run.
- signatures: every content's stored sketch, SimHash, MinHash signature and fingerprints match its checksum
  (checksums.py); for one stored before checksums existed, its sketch decodes whole and in order, and its
  signature and fingerprints have the sizes and order a store writes. A damaged content is left out of the two
  checks of rows below (which would only repeat it, or could not read it at all).
- index_rows: every content has exactly the index rows its stored signatures give (one per LSH band, or per pair
  of super-shingles with that preset, for a text with shingles, one per SimHash block pair for a text with a
  SimHash, as Indexer.rows_of computes them),
  and no row belongs to a content that does not exist.
- containment_rows: every content has exactly one containment row per fingerprint it stores (none for a content
  stored before fingerprints existed), and no row belongs to a content that does not exist.
- document_counts: each content's documents column equals the number of documents pointing at it.
- orphan_contents: no content is held by no document.
- document_links: every document points at an existing content and an existing file.
- pairs: every pair (a, b) has a < b, both contents exist, and its Jaccard is in [0, 1].
- clusters: each content's cluster is the smallest content id of its connected component over the pairs.

Memory stays bounded by a few arrays indexed by content id (tens of MB for a million contents) and the pairs'
two id columns: the index table is scanned once in chunks, the contents once in id ranges, and rows are compared
by a per-content count and an order-free 64-bit digest; only contents that differ are looked at row by row.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import numpy as np

from dedupdb.config import Settings
from dedupdb.errors import DatabaseError
from dedupdb.index.clusters import dense_components
from dedupdb.index.indexer import Indexer
from dedupdb.sketch.winnowing import rows_of
from dedupdb.storage import sketchpack
from dedupdb.storage.checksums import matches
from dedupdb.storage.entries import CONTENT_ID_BITS
from dedupdb.storage.store import Store
from dedupdb.text.hashing import distinct, distinct_counts, fmix64


class Checked(Protocol):
    """What the check reads of an open database (database.Database is one): the check sits below the library's
    front door, which calls it, and so never imports it."""

    store: Store
    settings: Settings
    indexer: Indexer

CHECKS = (
    "integrity", "runs", "signatures", "index_rows", "containment_rows", "document_counts", "orphan_contents",
    "document_links", "document_texts", "pairs", "clusters",
)
EXAMPLES = 5          # examples shown per failed check
INTEGRITY_LIMIT = 100  # messages asked of PRAGMA integrity_check

_MASK = (1 << CONTENT_ID_BITS) - 1


@dataclass(frozen=True)
class Problem:
    """One failed check: how many things are wrong, what they are, and a few of them."""

    check: str                    # one of CHECKS
    count: int | None             # None: the check could not finish (a damaged page in its way)
    what: str                     # what is counted, e.g. "contents with a wrong documents count"
    examples: tuple[str, ...] = ()


@dataclass(frozen=True)
class CheckReport:
    database: str
    documents: int | None  # None when the store could not be read that far
    contents: int | None
    pairs: int | None
    problems: tuple[Problem, ...] = ()
    checks: tuple[str, ...] = field(default=CHECKS)
    without_checksums: int = 0  # contents stored before checksums existed: checked only as far as their bytes allow

    @property
    def sound(self) -> bool:
        return not self.problems

    def failed(self) -> list[str]:
        """Names of the checks that failed, in the order of CHECKS."""
        return [p.check for p in self.problems]

    def problem(self, check: str) -> Problem | None:
        return next((p for p in self.problems if p.check == check), None)


def unopenable_report(target: Path) -> CheckReport | None:
    """The report on a database file too damaged to open: what SQLite's integrity check finds wrong with it, or
    None when it finds nothing (the failure to open was not damage: a lock, a newer schema)."""
    messages = Store.integrity_at(target, INTEGRITY_LIMIT)
    if not messages:
        return None
    return CheckReport(str(target), None, None, None, (_integrity_problem(messages),))


def check_database(database: Checked) -> CheckReport:
    store = database.store
    problems: list[Problem] = []
    totals: tuple[int, int, int, int] | None = None

    def run(name: str, check: Callable[[], list[Problem]]) -> None:
        try:
            problems.extend(check())
        except DatabaseError as exc:  # a damaged page met while reading: the check could not finish
            problems.append(Problem(name, None, f"could not be checked: {_reason(exc)}"))

    damaged: frozenset[int] = frozenset()
    without_checksums = 0

    def signatures() -> list[Problem]:
        nonlocal damaged, without_checksums
        found, damaged, without_checksums = _check_signatures(database)
        return found

    with store.snapshot():
        run("integrity", lambda: _check_integrity(store))
        run("runs", lambda: _check_runs(store))
        run("signatures", signatures)
        try:
            totals = store.check_totals()
            max_id = totals[3]
        except DatabaseError as exc:
            failure = _reason(exc)
            problems += [
                Problem(name, None, f"could not be checked: {failure}")
                for name in ("index_rows", "containment_rows", "clusters")
            ]
        else:
            run("index_rows", lambda: _check_index_rows(database, max_id, damaged))
            run("containment_rows", lambda: _check_containment_rows(database, max_id, damaged))
            run("clusters", lambda: _check_clusters(store, max_id))
        run("document_counts", lambda: _check_document_counts(store))
        run("document_links", lambda: _check_document_links(store))
        run("document_texts", lambda: _check_document_texts(store))
        run("pairs", lambda: _check_pairs(store))
    order = {name: i for i, name in enumerate(CHECKS)}
    problems.sort(key=lambda p: order[p.check])
    documents, contents, pairs = totals[:3] if totals is not None else (None, None, None)
    return CheckReport(str(store.path), documents, contents, pairs, tuple(problems),
                       without_checksums=without_checksums)


# --- the checks ----------------------------------------------------------------


def _reason(exc: DatabaseError) -> str:
    """SQLite's own words for an error met while checking (the store's message would send the user here)."""
    return getattr(exc, "sqlite_message", None) or str(exc)


def _integrity_problem(messages: list[str]) -> Problem:
    what = "problems found by SQLite's integrity check"
    if len(messages) >= INTEGRITY_LIMIT:
        what += f" (it stops at {INTEGRITY_LIMIT})"
    return Problem("integrity", len(messages), what, tuple(messages[:EXAMPLES]))


def _check_runs(store: Store) -> list[Problem]:
    faults = store.run_faults()
    return [Problem("runs", len(faults), "damaged runs of index rows", tuple(faults[:EXAMPLES]))] if faults else []


def _check_integrity(store: Store) -> list[Problem]:
    try:
        messages = store.integrity_messages(INTEGRITY_LIMIT)
    except DatabaseError as exc:  # damage it cannot even walk past
        return [Problem("integrity", None, f"SQLite's integrity check stopped: {_reason(exc)}")]
    return [_integrity_problem(messages)] if messages else []


def _check_signatures(database: Checked) -> tuple[list[Problem], frozenset[int], int]:
    """(problems, ids of the damaged contents, how many contents have no checksum)."""
    settings = database.settings
    damaged: list[int] = []
    examples: list[str] = []
    without = 0
    for rows in database.store.signature_batches():
        unsummed = []
        for row in rows:
            content_id, shingles, minhash, sketch, simhash, fingerprints, stored = row
            if stored is None:
                unsummed.append(row)
            elif not matches(stored, shingles, minhash, sketch, simhash, fingerprints):
                damaged.append(content_id)
                if len(examples) < EXAMPLES:
                    examples.append(f"content {content_id}: its stored signatures do not match their checksum")
        without += len(unsummed)
        for content_id, why in _unsummed_faults(unsummed, settings.num_perm, settings.sketch_size):
            damaged.append(content_id)
            if len(examples) < EXAMPLES:
                examples.append(f"content {content_id}: {why}")
    if not damaged:
        return [], frozenset(), without
    problem = Problem("signatures", len(damaged), "contents whose stored signatures are damaged", tuple(examples))
    return [problem], frozenset(damaged), without


def _unsummed_faults(rows: list[tuple], num_perm: int, sketch_size: int) -> Iterator[tuple[int, str]]:
    """(content id, what is wrong) of rows stored without a checksum, as far as their bytes tell: a sketch that
    is not whole, not in order or too long, a signature of the wrong size, fingerprints not whole or not in order."""
    try:  # all at once; one by one only when some sketch is not whole
        sketches = sketchpack.unpack_each([r[3] for r in rows])
    except ValueError:
        sketches = []
        for r in rows:
            try:
                sketches.append(sketchpack.unpack_each([r[3]])[0])
            except ValueError:
                sketches.append(None)
    for (content_id, shingles, minhash, _, _, fingerprints, _), values in zip(rows, sketches):
        if values is None:
            yield content_id, "its sketch is not whole"
        elif len(values) > sketch_size or (np.diff(values.astype(np.int64)) <= 0).any():
            yield content_id, "its sketch is out of order or too long"
        elif len(minhash) not in ((0, 2 * num_perm) if not shingles else
                                  (0,) if shingles == len(values) else (2 * num_perm,)):
            yield content_id, f"its MinHash signature is {len(minhash)} bytes"
        elif fingerprints is not None and (len(fingerprints) % 4 or (np.diff(np.frombuffer(
                fingerprints, "<u4").astype(np.int64)) <= 0).any()):
            yield content_id, "its fingerprints are not whole or out of order"


def _plural(count: int, noun: str) -> str:
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _digest(entries: np.ndarray) -> np.ndarray:
    """A 64-bit hash of each index row; their sum (mod 2**64) over a content's rows does not depend on order."""
    return fmix64(entries.astype(np.uint64))


def _check_index_rows(database: Checked, max_id: int, damaged: frozenset[int]) -> list[Problem]:
    store, indexer = database.store, database.indexer
    return _check_rows(
        "index_rows", "index rows", max_id, store.index_entry_chunks(), store.stored_entries,
        lambda rows: indexer.rows_of(indexer.stored_fingerprints(rows)), store, damaged,
    )


def _check_containment_rows(database: Checked, max_id: int, damaged: frozenset[int]) -> list[Problem]:
    store = database.store
    return _check_rows(
        "containment_rows", "containment rows", max_id, store.containment_entry_chunks(),
        store.stored_containment_entries, lambda rows: rows_of({cid: r.fingerprints for cid, r in rows.items()}), store,
        damaged,
    )


def _check_rows(
    check: str, noun: str, max_id: int, chunks: Iterator[np.ndarray], stored_entries: Callable[[np.ndarray], np.ndarray],
    expected_rows: Callable[[dict], tuple[np.ndarray, np.ndarray]], store: Store, damaged: frozenset[int],
) -> list[Problem]:
    """Rows packed as (key << 30) | content id against those each content's stored signatures give; the rows of
    damaged contents (whose signatures cannot say which rows they should have) are not looked at."""
    size = max_id + 1
    # One scan of the table: per content id, how many rows and the sum of their digests.
    stored_count = np.zeros(size, np.int64)
    stored_digest = np.zeros(size, np.uint64)
    beyond: Counter[int] = Counter()  # rows of content ids above every stored content
    for entries in chunks:
        owners = entries & _MASK
        inside = owners <= max_id
        np.add.at(stored_count, owners[inside], 1)
        np.add.at(stored_digest, owners[inside], _digest(entries[inside]))
        if not inside.all():
            ids, counts = distinct_counts(owners[~inside])
            beyond.update(dict(zip(ids.tolist(), counts.tolist())))

    # One pass over the contents: the rows their signatures give, compared by count and digest.
    exists = np.zeros(size, bool)
    exists[list(damaged)] = True  # their rows are not strays
    missing_total = extra_total = wrong_contents = 0
    examples: list[str] = []
    for rows in store.content_batches(leave_out=damaged):
        if not rows:
            continue
        ids = np.fromiter(rows, dtype=np.int64, count=len(rows))  # ascending: the batch is in id order
        exists[ids] = True
        row_ids, keys = expected_rows(rows)
        expected = distinct((keys.astype(np.int64) << CONTENT_ID_BITS) | row_ids)
        position = np.searchsorted(ids, expected & _MASK)
        want_count = np.bincount(position, minlength=len(ids))
        want_digest = np.zeros(len(ids), np.uint64)
        np.add.at(want_digest, position, _digest(expected))
        wrong = (want_count != stored_count[ids]) | (want_digest != stored_digest[ids])
        if not wrong.any():
            continue
        # Row by row for the contents that differ: which expected rows are absent; the rest of what the
        # index holds for them is extra.
        looked_at = expected[wrong[position]]
        absent = np.setdiff1d(looked_at, stored_entries(looked_at), assume_unique=True)
        missing = np.bincount(np.searchsorted(ids, absent & _MASK), minlength=len(ids))
        for i in np.flatnonzero(wrong).tolist():
            content_id = int(ids[i])
            extra = int(stored_count[content_id] - (want_count[i] - missing[i]))
            missing_total += int(missing[i])
            extra_total += extra
            wrong_contents += 1
            if len(examples) < EXAMPLES:
                parts = [f"{int(missing[i])} of {int(want_count[i])} missing"] if missing[i] else []
                parts += [f"{extra} extra"] if extra else []
                examples.append(f"content {content_id}: " + ", ".join(parts or ["rows differ"]))

    strays = {int(i): int(stored_count[i]) for i in np.flatnonzero(~exists & (stored_count > 0)).tolist()}
    strays.update(beyond)
    stray_total = sum(strays.values())
    for content_id, count in sorted(strays.items())[: max(0, EXAMPLES - len(examples))]:
        examples.append(f"content {content_id} (no such content): {_plural(count, 'row')}")
    total = missing_total + extra_total + stray_total
    if not total and not wrong_contents:
        return []
    parts = []
    if wrong_contents:
        parts.append(f"{missing_total} missing and {extra_total} extra, in {_plural(wrong_contents, 'content')}")
    if stray_total:
        parts.append(f"{stray_total} of contents that do not exist")
    what = f"wrong {noun} ({'; '.join(parts)})"
    return [Problem(check, max(total, 1), what, tuple(examples))]


def _check_document_counts(store: Store) -> list[Problem]:
    counts, orphans = [], []
    wrong_counts = orphan_total = 0
    for content_id, column, actual in store.document_count_mismatches():
        if column != actual:
            wrong_counts += 1
            if len(counts) < EXAMPLES:
                counts.append(f"content {content_id}: documents = {column}, {actual} point at it")
        if actual == 0:
            orphan_total += 1
            if len(orphans) < EXAMPLES:
                orphans.append(f"content {content_id}")
    problems = []
    if wrong_counts:
        problems.append(Problem("document_counts", wrong_counts, "contents with a wrong documents count", tuple(counts)))
    if orphan_total:
        problems.append(Problem("orphan_contents", orphan_total, "contents that no document holds", tuple(orphans)))
    return problems


def _check_document_links(store: Store) -> list[Problem]:
    examples, total = [], 0
    for doc_id, key, content_id, file_id, no_content, no_file in store.dangling_documents():
        total += 1
        if len(examples) < EXAMPLES:
            lacks = [f"content {content_id}"] if no_content else []
            lacks += [f"file {file_id}"] if no_file else []
            examples.append(f"document {doc_id} ({key}): no {' and no '.join(lacks)}")
    if not total:
        return []
    return [Problem("document_links", total, "documents pointing at a missing content or file", tuple(examples))]


def _check_document_texts(store: Store) -> list[Problem]:
    examples, total = [], 0
    for doc_id, column in store.unreadable_documents():
        total += 1
        if len(examples) < EXAMPLES:
            examples.append(f"document {doc_id}: its {column} is not text")
    if not total:
        return []
    return [Problem("document_texts", total, "documents whose key, record id or snippet is damaged (not valid UTF-8)",
                    tuple(examples))]


def _check_pairs(store: Store) -> list[Problem]:
    examples, total = [], 0
    for a, b, jaccard, a_exists, b_exists in store.bad_pairs():
        total += 1
        if len(examples) < EXAMPLES:
            why = []
            if not (isinstance(a, int) and isinstance(b, int) and a < b):
                why.append("not a < b")
            why += [f"no content {a}"] if not a_exists else []
            why += [f"no content {b}"] if not b_exists and b != a else []
            if not isinstance(jaccard, (int, float)) or not 0.0 <= jaccard <= 1.0:
                why.append(f"jaccard {jaccard!r} outside [0, 1]")
            examples.append(f"pair ({a}, {b}): {', '.join(why)}")
    if not total:
        return []
    return [Problem("pairs", total, "invalid pairs", tuple(examples))]


def _check_clusters(store: Store, max_id: int) -> list[Problem]:
    size = max_id + 1
    exists = np.zeros(size, bool)
    stored = np.zeros(size, np.int64)
    for ids, clusters in store.cluster_label_chunks():
        exists[ids] = True
        stored[ids] = clusters
    # Edges between existing contents only: a pair with a missing side is the pairs check's to report.
    sides_a, sides_b = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
    for a, b in store.pair_chunks():
        keep = (a >= 0) & (b >= 0) & (a <= max_id) & (b <= max_id)
        a, b = a[keep], b[keep]
        keep = exists[a] & exists[b]
        sides_a.append(a[keep])
        sides_b.append(b[keep])
    expected = dense_components(size, np.concatenate(sides_a), np.concatenate(sides_b))
    wrong = np.flatnonzero(exists & (stored != expected))
    if len(wrong) == 0:
        return []
    examples = tuple(
        f"content {int(c)}: cluster {int(stored[c])}, should be {int(expected[c])}" for c in wrong[:EXAMPLES]
    )
    return [Problem("clusters", len(wrong), "contents with a wrong cluster label", examples)]


