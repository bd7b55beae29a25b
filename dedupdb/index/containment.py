"""The containment index: which stored texts hold a share of a query's shingles (winnowed runs, see
sketch/winnowing.py), kept in the store's containment runs."""

from __future__ import annotations

from collections.abc import Iterable
from itertools import pairwise

import numpy as np

from dedupdb import compiled
from dedupdb.config import Settings
from dedupdb.sketch.verify import compiled_verifying
from dedupdb.sketch.winnowing import (
    CANDIDATE_SHARE,
    COMMON_POSTINGS,
    QUERY_CANDIDATES,
    QUERY_COMMON_POSTINGS,
    Side,
    candidates_by_share,
    containment,
    rows_of,
    smaller_first,
)
from dedupdb.storage.entries import CONTENT_ID_BITS, CONTENT_ID_MASK
from dedupdb.storage.store import Store
from dedupdb.text.hashing import distinct, distinct_counts, ranges, spans, to_unsigned64


def shared_counts(
    ids: np.ndarray, keys: np.ndarray, posting_keys: np.ndarray, posting_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(a, b, fingerprints shared) for every content a of (ids, keys) and content b != a of the postings that share
    a key: one row per pair."""
    if len(keys) == 0 or len(posting_keys) == 0:
        empty = np.empty(0, np.int64)
        return empty, empty, empty
    order = np.argsort(posting_keys, kind="stable")
    posting_keys, posting_ids = posting_keys[order], posting_ids[order]
    lows, sizes = spans(posting_keys, keys)
    mine = np.repeat(ids, sizes)
    at = ranges(lows, sizes)
    theirs = posting_ids[at]
    keep = mine != theirs
    packed, counts = distinct_counts((mine[keep] << CONTENT_ID_BITS) | theirs[keep])
    return packed >> CONTENT_ID_BITS, packed & CONTENT_ID_MASK, counts


class ContainmentIndex:
    """Adds, removes and searches the containment rows of a store (inside the caller's transaction)."""

    def __init__(self, store: Store, settings: Settings) -> None:
        self.store = store
        self.settings = settings

    @property
    def min_shingles(self) -> int:
        """Texts with fewer shingles than one winnowing window spans are never called contained: a phrase of a few
        words lies in countless texts."""
        return self.settings.winnow_window + self.settings.containment_ngram - 2

    def add(self, fingerprints: dict[int, np.ndarray | None]) -> None:
        self.store.insert_containment(*rows_of(fingerprints))

    def remove(self, fingerprints: dict[int, np.ndarray | None]) -> None:
        self.store.delete_containment(*rows_of(fingerprints))

    def sides(self, content_ids: Iterable[int]) -> dict[int, Side]:
        return {
            cid: Side(shingles, sketch, fps, None if simhash is None else to_unsigned64(simhash))
            for cid, (shingles, sketch, fps, simhash) in self.store.containment_sides(content_ids).items()
        }

    def read_sides(self, content_ids: Iterable[int], sides: dict[int, Side]) -> None:
        """Read into sides those of these contents it does not hold yet (a content gone meanwhile is left out)."""
        sides.update(self.sides({cid for cid in content_ids if cid not in sides}))

    def search(self, query: Side, probe: np.ndarray, floor: float, sides: dict[int, Side] | None = None) -> dict[int, float]:
        """Stored contents holding at least `floor` of the query's shingles: content id -> that share. Candidates
        share a fingerprint with the query (probe: the hashes looked up); those sharing the most are scored. Their
        sides are read into sides, when given (the query's near-duplicates are mostly among them)."""
        _, ids, common = self.store.containment_postings(probe, COMMON_POSTINGS)
        if len(ids) == 0 and len(common):  # nothing but common phrasing: look it up anyway, further
            _, ids, common = self.store.containment_postings(common, QUERY_COMMON_POSTINGS)
        content_ids, counts = distinct_counts(ids)
        # As for pairs: a text sharing too few fingerprints cannot hold floor of the query (common keys aside).
        enough = counts + len(common) >= CANDIDATE_SHARE * floor * len(query.fingerprints if query.fingerprints is not None else ())
        content_ids, counts = content_ids[enough], counts[enough]
        best = candidates_by_share(content_ids.tolist(), counts.tolist(), QUERY_CANDIDATES)
        sides = {} if sides is None else sides
        self.read_sides(best, sides)
        best = [cid for cid in best if cid in sides]
        # Scored together (shares_in: containment()'s numbers with a few array operations for them all).
        shares = shares_in(query, [sides[cid] for cid in best], self.settings.sketch_size)
        return {cid: round(share, 4) for cid, share in zip(best, shares) if share is not None and share >= floor}

    def candidates_many(self, queries: list[Side], probes: list[np.ndarray], floor: float) -> list[list[int]]:
        """The candidates search() would score for each of many queries, most shared first: their probes looked up
        together (whether a key is common depends on the key alone). scored_many() scores them: the two give what
        search() gives each query."""
        probes = [np.asarray(p, np.uint64) for p in probes]  # fingerprints and runs alike are distinct already
        owners = np.repeat(np.arange(len(probes), dtype=np.int64), [len(p) for p in probes])
        wanted = np.concatenate(probes) if probes else np.empty(0, np.uint64)
        keys, ids, common = self.store.containment_postings(distinct(wanted), COMMON_POSTINGS)
        found_q, found_c = _rows_under(owners, wanted, keys, ids)
        commons = np.isin(wanted, common)
        common_counts = np.bincount(owners[commons], minlength=len(probes))
        # As search(): a query with nothing but common phrasing looks those keys up anyway, further.
        bare = np.setdiff1d(owners[commons], found_q)
        if len(bare):
            again = np.isin(owners, bare) & commons
            keys, ids, common = self.store.containment_postings(distinct(wanted[again]), QUERY_COMMON_POSTINGS)
            more_q, more_c = _rows_under(owners[again], wanted[again], keys, ids)
            found_q, found_c = np.concatenate((found_q, more_q)), np.concatenate((found_c, more_c))
            still = again & np.isin(wanted, common)
            common_counts[bare] = np.bincount(owners[still], minlength=len(probes))[bare]
        codes, counts = distinct_counts((found_q << CONTENT_ID_BITS) | found_c)
        found_q, found_c = codes >> CONTENT_ID_BITS, codes & CONTENT_ID_MASK
        prints = np.fromiter((0 if query.fingerprints is None else len(query.fingerprints) for query in queries),
                             np.int64, len(queries))
        enough = counts + common_counts[found_q] >= CANDIDATE_SHARE * floor * prints[found_q]
        found_q, found_c, counts = found_q[enough], found_c[enough], counts[enough]
        # candidates_by_share() of every query at once: by query, then most shared first, then by id.
        order = np.lexsort((found_c, -counts, found_q))
        found_q, found_c = found_q[order], found_c[order]
        starts = np.searchsorted(found_q, np.arange(len(queries) + 1))
        chosen = np.arange(len(found_q)) - starts[found_q] < QUERY_CANDIDATES
        found_q, found_c = found_q[chosen], found_c[chosen]
        bounds = np.searchsorted(found_q, np.arange(len(queries) + 1)).tolist()
        listed = found_c.tolist()
        return [listed[a:b] for a, b in pairwise(bounds)]

    def scored_many(self, queries: list[Side], best: list[list[int]], floor: float,
                    sides: dict[int, Side] | None = None) -> list[dict[int, float]]:
        """What search() gives each query, from its candidates (candidates_many): their sides read in one go (into
        sides, when given, which may hold some already), and each query's share in each counted."""
        sides = {} if sides is None else sides
        self.read_sides((cid for chosen in best for cid in chosen), sides)
        best = [[cid for cid in chosen if cid in sides] for chosen in best]
        shares = shares_of([(query, [sides[cid] for cid in chosen]) for query, chosen in zip(queries, best)],
                           self.settings.sketch_size)
        return [{cid: round(share, 4) for cid, share in zip(chosen, scored) if share is not None and share >= floor}
                for chosen, scored in zip(best, shares)]

    def pairs_from(self, sides: dict[int, Side], floor: float) -> list[tuple[int, int]]:
        """Pairs (a, b), a among these contents and b > a any stored content, in which the smaller text holds at least
        `floor` of its shingles in the larger, found through a fingerprint they share."""
        ids, keys = rows_of({cid: side.fingerprints for cid, side in sides.items()})
        posting_keys, posting_ids, common = self.store.containment_postings(distinct(keys), COMMON_POSTINGS)
        mine, theirs, shared = shared_counts(ids, keys, posting_keys, posting_ids)
        later = theirs > mine
        mine, theirs, shared = mine[later], theirs[later], shared[later]
        # Most candidates share a fingerprint or two by chance: their sizes rule them out before a sketch is read.
        sizes = {cid: (side.shingles, 0 if side.fingerprints is None else len(side.fingerprints))
                 for cid, side in sides.items()}
        sizes.update(self.store.containment_sizes(np.setdiff1d(theirs, list(sides)).tolist()))
        known = np.array(sorted(sizes), np.int64)
        table = np.array([sizes[c] for c in known.tolist()], np.int64).reshape(-1, 2)  # (shingles, fingerprints)
        present = np.isin(theirs, known)  # a text gone meanwhile has none
        mine, theirs, shared = mine[present], theirs[present], shared[present]
        size_a, size_b = table[np.searchsorted(known, mine)], table[np.searchsorted(known, theirs)]
        smaller = np.where((size_a[:, 0] <= size_b[:, 0])[:, None], size_a, size_b)
        # Fingerprints under common keys were not counted: a's number of them bounds how many more a pair shares.
        owners, counts = distinct_counts(ids[np.isin(keys, common)])
        uncounted = np.zeros(len(mine), np.int64)
        if len(owners):
            at = np.minimum(np.searchsorted(owners, mine), len(owners) - 1)
            uncounted = np.where(owners[at] == mine, counts[at], 0)
        plausible = (smaller[:, 0] >= self.min_shingles) & (shared + uncounted >= CANDIDATE_SHARE * floor * smaller[:, 1])
        keep = list(zip(mine[plausible].tolist(), theirs[plausible].tolist()))
        others = self.sides({b for _, b in keep} - set(sides))
        out = []
        for a, b in keep:
            side_a, side_b = sides[a], sides.get(b) or others.get(b)
            if side_b is None:
                continue
            inner, outer = (side_a, side_b) if smaller_first(side_a, side_b) else (side_b, side_a)
            share = containment(inner, outer, self.settings.sketch_size)
            if share is not None and share >= floor:
                out.append((a, b))
        return out


def _rows_under(owners: np.ndarray, wanted: np.ndarray, keys: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(query, content id) of every posting (keys, ids) under a key a query looks up (owners[i] looks up wanted[i])."""
    order = np.argsort(keys, kind="stable")
    keys, ids = keys[order], ids[order].astype(np.int64)
    lows, sizes = spans(keys, wanted)
    return np.repeat(owners, sizes), ids[ranges(lows, sizes)]


def shares_in(query: Side, others: list[Side], sketch_size: int) -> list[float | None]:
    """containment(query, other) for each of others, the same numbers, with a few array operations for them all
    rather than several for each. The shingles of a sample of the query's sketch found in another's sketch are all
    those of the whole sketch found there (the sample is the part at or below the other's largest value), so one
    lookup of every other's values in the query's sketch counts them."""
    if len(query.sketch) == 0 or not others:
        return [None] * len(others)
    # Token n-grams alone (even hashes), as containment() counts them: a long text has no character view.
    mine = query.sketch[(query.sketch & np.uint32(1)) == 0]
    theirs = [side.sketch for side in others]
    lengths = np.fromiter((len(t) for t in theirs), np.int64, len(theirs))
    shared = _found_in(mine, np.concatenate(theirs), lengths).tolist()
    lasts = np.fromiter((t[-1] if len(t) else 0 for t in theirs), np.uint64, len(theirs))
    below = np.searchsorted(mine.astype(np.uint64), lasts, "right").tolist()
    return [_share(query, side, len(mine), n, s, c, sketch_size)
            for side, n, s, c in zip(others, lengths.tolist(), shared, below)]


def shares_of(asked: list[tuple[Side, list[Side]]], sketch_size: int) -> list[list[float | None]]:
    """shares_in() of many queries, each against its own others: a batch query scores a dozen candidates a text,
    thousands of texts a batch. In a process that has numba loaded (a batch query's workers), both sketches of
    every pair are walked in one compiled call for them all; elsewhere shares_in() of each query."""
    fast = compiled_verifying() if compiled.at_hand() else None
    if fast is None:
        return [shares_in(query, others, sketch_size) for query, others in asked]
    out: list[list[float | None]] = [[None] * len(others) for _, others in asked]
    scored = [q for q, (query, others) in enumerate(asked) if len(query.sketch) and others]
    if not scored:
        return out
    queries = [asked[q][0] for q in scored]
    others = [side for q in scored for side in asked[q][1]]
    sketches = [query.sketch for query in queries] + [side.sketch for side in others]
    lengths = np.fromiter((len(s) for s in sketches), np.int64, len(sketches))
    starts = np.concatenate(([0], np.cumsum(lengths)[:-1]))
    owner = np.repeat(np.arange(len(scored)), [len(asked[q][1]) for q in scored])
    shared, below = fast.held(np.concatenate(sketches).astype(np.uint32, copy=False), starts, lengths, owner,
                             np.arange(len(queries), len(sketches)))
    # _share() of every pair at once; a pair whose sample is smaller than the query's fingerprints is left to it.
    values = np.concatenate(sketches[: len(queries)])
    evens = np.concatenate(([0], np.cumsum((values & np.uint32(1)) == 0)))
    ends = np.cumsum(lengths[: len(queries)])
    mine = (evens[ends] - evens[ends - lengths[: len(queries)]])[owner]
    query_shingles = np.fromiter((query.shingles for query in queries), np.int64, len(queries))[owner]
    query_prints = np.fromiter((-1 if query.fingerprints is None else len(query.fingerprints) for query in queries),
                               np.int64, len(queries))[owner]
    whole = np.fromiter((side.shingles <= sketch_size for side in others), bool, len(others))
    printed = np.fromiter((side.fingerprints is not None for side in others), bool, len(others))
    length = lengths[len(queries):]
    sample = np.where(whole | (length == 0), mine, below)
    prints = np.where(printed & (query_prints >= 0), query_prints, 0)
    direct = ((query_shingles <= sketch_size) & whole) | (sample >= prints)
    shares: list[float | None] = np.divide(shared, sample, out=np.zeros(len(others)), where=sample > 0).tolist()
    for p in np.flatnonzero(direct & (sample == 0)).tolist():
        shares[p] = None
    for p in np.flatnonzero(~direct).tolist():
        query, side = queries[owner[p]], others[p]
        shares[p] = _share(query, side, int(mine[p]), int(length[p]), int(shared[p]), int(below[p]), sketch_size)
    bounds = np.concatenate(([0], np.cumsum([len(asked[q][1]) for q in scored]))).tolist()
    for q, (a, b) in zip(scored, pairwise(bounds)):
        out[q] = shares[a:b]
    return out


def _share(query: Side, other: Side, mine: int, length: int, shared: int, below: int, sketch_size: int) -> float | None:
    """containment(query, other) from the counts of the query's token n-grams (mine) found in the other's sketch
    (of length values), shared, and of those at or below its largest value, below."""
    whole = other.shingles <= sketch_size
    sample = mine if whole or length == 0 else below
    exact = query.shingles <= sketch_size and whole
    prints = 0 if query.fingerprints is None or other.fingerprints is None else len(query.fingerprints)
    if exact or sample >= prints:
        return shared / sample if sample else None
    # A sample smaller than the query's fingerprints tells less than they do: they decide.
    found = _found_in(other.fingerprints, query.fingerprints, np.array([len(query.fingerprints)]))
    return int(found[0]) / prints


def _found_in(sorted_set: np.ndarray, values: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """For each run of values (lengths, in order): how many of its values are in sorted_set."""
    if len(sorted_set) == 0 or len(values) == 0:
        return np.zeros(len(lengths), np.int64)
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    totals = np.concatenate(([0], np.cumsum(sorted_set[at] == values)))
    ends = np.cumsum(lengths)
    return totals[ends] - totals[ends - lengths]
