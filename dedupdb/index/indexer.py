"""Keeps the store's indexes, pairs and clusters right as documents arrive, change and vanish.

Every method here runs inside the caller's transaction: a batch is applied
whole or not at all.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import numpy as np

from dedupdb import compiled
from dedupdb.config import SNIPPET_CHARS, Settings
from dedupdb.index.clusters import components, dense_components
from dedupdb.index.containment import ContainmentIndex
from dedupdb.index.lsh import BAND_MULT, BAND_OFFSET, KEY_HOLDERS_COMPARED, Banding, Candidates, candidate_keys
from dedupdb.sketch.fingerprint import Fingerprint, Fingerprinter, Sketch, kept_signatures
from dedupdb.sketch.simhash import block_key_matrix, block_masks
from dedupdb.sketch.verify import PairJudge, Signature, SketchTable
from dedupdb.sketch.winnowing import Side
from dedupdb.storage import decoding
from dedupdb.storage.entries import INDEX_KEY_BITS
from dedupdb.storage.rows import ContentRow
from dedupdb.storage.store import Store
from dedupdb.text.hashing import (
    column_slot_hash,
    distinct,
    distinct_counts,
    distinct_of_sorted,
    ranges,
    run_starts,
    slot_mixes,
    spans,
    to_unsigned64,
)
from dedupdb.text.templates import Frame, frame_of, frames_are_templates, text_tokens


def template_pairs(store: Store, pairs: list[tuple[int, int]], snippets: dict[int, str],
                   frames: dict[int, Frame] | None = None) -> list[tuple[int, int]]:
    """Those of these pairs of contents that are template pairs (text/templates.py): only texts held whole by
    their snippets (shorter than SNIPPET_CHARS) are compared; snippets gives those the store does not hold yet.
    frames keeps what was made of each text, for the next call (a stored text meets new ones batch after batch)."""
    frames = {} if frames is None else frames
    if len(frames) > _FRAMES_KEPT:
        frames.clear()
    short = {cid: text for cid, text in snippets.items() if len(text) < SNIPPET_CHARS}
    # Both texts of a template pair are short: a long new text settles its pairs without reading the store.
    pairs = [(a, b) for a, b in pairs if (a in short or a not in snippets) and (b in short or b not in snippets)]
    wanted = sorted({c for pair in pairs for c in pair if c not in snippets and c not in frames})
    if not pairs:
        return []
    short.update(store.short_snippets(wanted, SNIPPET_CHARS))
    out = []
    for a, b in pairs:
        if (a in short or a in frames) and (b in short or b in frames):
            for c in (a, b):
                if c not in frames:
                    frames[c] = frame_of(text_tokens(short[c]))
            if frames_are_templates(frames[a], frames[b]):
                out.append((a, b))
    return out


# Texts whose template frames an indexer keeps between batches (three tuples of a text's interned tokens: a few
# hundred bytes to a few KB each).
_FRAMES_KEPT = 10_000


# Not frozen: made by the hundred thousand in an add, and a frozen dataclass's __init__ costs six times as much.
@dataclass(slots=True)
class NewDocument:
    key: str
    file_id: int
    record: str | None
    content_hash: bytes  # of the normalized text (fingerprint.content_hash)
    bytes: int
    mtime_ns: int
    snippet: str


@dataclass(frozen=True)
class Match:
    content_id: int
    jaccard: float
    hamming: int | None
    exact: bool


# Slot numbers of the SimHash block pairs: above every LSH band (bands <= permutations <= 1024).
SIMHASH_SLOTS = 1024
# Candidate pairs verified at once (with the stored sketches they need in memory).
VERIFY_PAIRS_AT_ONCE = 1 << 16
# Ids the texts of a batch of queries take beside stored contents' (content ids fit in 30 bits, store.py).
_QUERY_IDS = 1 << 40


@dataclass(frozen=True)
class NearCandidates:
    """What a batch of queries' lookup of the index found (Indexer.candidates_many): each query's stored text of
    the same text (None for none), and the (query, stored text) pairs to verify, ordered by query."""

    exact: list[int | None]
    queries: np.ndarray
    candidates: np.ndarray

    def part(self, start: int, stop: int) -> NearCandidates:
        """Those of the queries start to stop, numbered from 0 as a batch of their own."""
        first, end = np.searchsorted(self.queries, [start, stop]).tolist()
        return NearCandidates(self.exact[start:stop], self.queries[first:end] - start, self.candidates[first:end])


class Indexer:
    def __init__(self, store: Store, settings: Settings, banding: Candidates, fingerprinter: Fingerprinter) -> None:
        self.store = store
        self.settings = settings
        self.banding = banding
        self.fingerprinter = fingerprinter
        self.containment = ContainmentIndex(store, settings)
        self.judge = PairJudge(settings.threshold, settings.sketch_size)
        self._frames: dict[int, Frame] = {}  # template frames of short texts, by content id (template_pairs)
        self._query_judges: dict[float, PairJudge] = {}  # by threshold: each learns when to turn to compiled code

    def load_compiled(self) -> None:
        """Load the compiled verifying and block decoding from numba's cache now (about a second), where numba is
        loaded already: a large add calls it in a thread while its workers warm up, so that its first batch does
        not wait for it."""
        if compiled.at_hand():
            with compiled.blas_held_back():
                PairJudge.load_compiled()
                decoding.decoder()

    # --- index keys ---------------------------------------------------------------

    def rows_of(self, fingerprints: dict[int, Fingerprint]) -> tuple[np.ndarray, np.ndarray]:
        return index_rows(self.settings, self.banding, fingerprints)

    def stored_fingerprints(self, rows: dict[int, ContentRow]) -> dict[int, Fingerprint]:
        """Stored contents in the shape the index-row helpers take (their hash is not needed there), with the
        MinHash signatures a store leaves out (those its sketches give whole, store.py) computed again."""
        derived = [cid for cid, row in rows.items() if len(row.minhash) == 0 and len(row.sketch)]
        signatures = dict(zip(derived, kept_signatures(self.settings, [rows[c].sketch for c in derived])))
        return {
            cid: Fingerprint(b"", row.chars, row.shingles, signatures.get(cid, row.minhash), row.sketch,
                             _unsigned(row.simhash), row.fingerprints)
            for cid, row in rows.items()
        }

    # --- adding ------------------------------------------------------------------

    def add_documents(
        self, documents: list[NewDocument], sketches: dict[bytes, Sketch], columns: dict[bytes, tuple] | None = None
    ) -> int:
        """Store documents; sketches (by content hash) must hold every text the store does not know yet, columns
        (by content hash) what storage's stored_columns gives for those a worker made it for. Returns how many
        new contents."""
        if not documents:
            return 0
        hashes = [d.content_hash for d in documents]
        held = Counter(hashes)  # documents of each text in this batch
        known = self.store.content_ids_by_hash(list(held))
        fresh = [h for h in held if h not in known]
        fingerprints = self.fingerprinter.batch([sketches[h] for h in fresh])
        content_ids = self.store.next_content_ids(len(fingerprints))
        new_ids: dict[int, Fingerprint] = dict(zip(content_ids, fingerprints))
        # Linked before their rows are written, so a new content is written into the cluster it joins: only
        # clusters stored before are relabelled (a batch of near-duplicates onto a large store meets 100,000).
        first_snippets = {d.content_hash: d.snippet for d in reversed(documents)}  # the first document's, as the store's
        snippets = {cid: first_snippets[fp.content_hash] for cid, fp in new_ids.items()}
        clusters = self._index_and_link(new_ids, stored=False, snippets=snippets)
        made = [columns.get(h) for h in fresh] if columns else None
        self.store.insert_contents(fingerprints, content_ids, clusters, [held[h] for h in fresh], made)
        self.containment.add({cid: fp.fingerprints for cid, fp in new_ids.items()})
        self.store.change_document_counts({known[h]: held[h] for h in held if h in known})  # before fresh join known
        for fp, content_id in zip(fingerprints, content_ids):
            known[fp.content_hash] = content_id
        self.store.insert_documents(
            [(d.key, d.file_id, d.record, known[h], d.bytes, d.mtime_ns, d.snippet) for h, d in zip(hashes, documents)]
        )
        return len(new_ids)

    def _index_and_link(self, new: dict[int, Fingerprint], stored: bool = True,
                        snippets: dict[int, str] | None = None) -> dict[int, int]:
        """Add the index rows of new contents, verify the candidates they meet, store the pairs (marking the
        template pairs: snippets gives new contents' snippets where the store does not hold them yet) and merge
        their clusters. With stored false, the new contents have no rows yet: the cluster each joins is returned
        ({content id: cluster}, for those not in their own) for their rows to be written with."""
        ids, keys = self.rows_of(new)
        (keys, ids), before = self.store.index_and_match(ids, keys)
        candidates = _shared_keys(keys, ids, *before)
        return self._verify_and_link(candidates, new, snippets, None if stored else list(new))

    def _verify_and_link(self, candidates: np.ndarray, new: dict[int, Fingerprint],
                         snippets: dict[int, str] | None = None, unstored: list[int] | None = None) -> dict[int, int]:
        """Verify candidate pairs ((n, 2), in order; new: fingerprints at hand, among them those of the texts the
        store does not hold yet), store those that pass and merge their clusters (see _index_and_link)."""
        if not len(candidates):
            return {}
        new_ids = np.fromiter(new, np.int64, len(new))
        pairs = []
        # A part of the candidates at a time, with the stored sketches it needs: a batch onto a large store meets
        # hundreds of thousands of stored texts, whose sketches at once would be hundreds of MB. Candidates come
        # ordered by their smaller id, so a stored text's pairs are mostly in one part and its sketch read once.
        for start in range(0, len(candidates), VERIFY_PAIRS_AT_ONCE):
            part = candidates[start : start + VERIFY_PAIRS_AT_ONCE]
            wanted = distinct(part.ravel())
            at_hand = np.isin(wanted, new_ids, assume_unique=True)
            # Sketches of the new texts this part names only: most of a batch of distinct texts meets none.
            mine = SketchTable.of({cid: Signature(new[cid].sketch, new[cid].simhash)
                                   for cid in wanted[at_hand].tolist()})
            theirs = SketchTable(*self.store.sketch_columns(wanted[~at_hand].tolist()))
            pairs += self.judge.pairs(SketchTable.joined([theirs, mine]), part)  # stored ids come first
        self.store.insert_pairs(pairs)
        self.store.mark_templates(template_pairs(self.store, [(a, b) for a, b, _, _ in pairs], snippets or {},
                                                 self._frames))
        return self._merge_clusters([(a, b) for a, b, _, _ in pairs], unstored)

    def _stored_sketches(self, content_ids: np.ndarray, sides: dict[int, Side]) -> SketchTable:
        """The sketches of these stored contents: those sides holds taken from there, the others read. A batch
        query's near-duplicate candidates are mostly among its containment candidates, whose sides are read first:
        87% of them for the bench's records against 50,000, 62% for Chinese reviews against a million."""
        if not sides:
            return SketchTable(*self.store.sketch_columns(content_ids.tolist()))
        ids = content_ids.tolist()
        held = np.fromiter((cid in sides for cid in ids), bool, len(ids))
        read = SketchTable(*self.store.sketch_columns(content_ids[~held].tolist()))
        taken = SketchTable.of({cid: Signature(sides[cid].sketch, sides[cid].simhash)
                                for cid in content_ids[held].tolist()})
        return SketchTable.joined([read, taken])

    def _merge_clusters(self, edges: list[tuple[int, int]], unstored: list[int] | None = None) -> dict[int, int]:
        """Join the clusters that new pairs connect, each under the smallest cluster id among them (the labels
        components() would give: a batch onto a large store joins a hundred thousand, so on arrays). Contents
        not stored yet (unstored) are each their own cluster: their new cluster is returned, not written."""
        if not edges:
            return {}
        ends = np.array(edges, np.int64).reshape(-1, 2)
        members = distinct(ends.ravel())
        fresh = np.isin(members, np.asarray(unstored or [], np.int64))
        clusters = members.copy()
        cluster_of = self.store.clusters_of(members[~fresh].tolist())
        clusters[~fresh] = np.fromiter((cluster_of[m] for m in members[~fresh].tolist()), np.int64, int((~fresh).sum()))
        labels = distinct(clusters)
        node = np.searchsorted(labels, clusters)
        roots = dense_components(len(labels), node[np.searchsorted(members, ends[:, 0])],
                                 node[np.searchsorted(members, ends[:, 1])])
        moved = np.flatnonzero(roots != np.arange(len(labels)))
        olds, news = labels[moved], labels[roots[moved]]
        # An unstored content is its own cluster and the only member of it: its label is its id.
        mine = np.isin(olds, members[fresh])
        self.store.relabel_clusters(dict(zip(olds[~mine].tolist(), news[~mine].tolist())))
        return dict(zip(olds[mine].tolist(), news[mine].tolist()))

    # --- removing ----------------------------------------------------------------

    def remove_documents(self, documents: list[tuple[int, int]]) -> None:
        """Forget (document id, content id) pairs; a content no document holds leaves the index,
        and the cluster it belonged to is split into what is still connected."""
        if not documents:
            return
        self.store.delete_documents([d for d, _ in documents])
        orphans = self.store.change_document_counts(_negative_counts(documents))
        if not orphans:
            return
        self._frames.clear()  # a content id may be given again
        rows = self.store.contents(orphans)
        affected = {row.cluster for row in rows.values()}
        gone_ids, gone_keys = self.rows_of(self.stored_fingerprints(rows))
        self.store.delete_index(gone_ids, gone_keys)
        self.containment.remove({cid: row.fingerprints for cid, row in rows.items()})
        for content_id in orphans:
            self.store.delete_content(content_id)
        for cluster in affected:
            members = self.store.cluster_members(cluster)
            if members:
                labels = components(members, self.store.pairs_among(members))
                self.store.set_clusters({m: c for m, c in labels.items() if c != cluster})
        # Under a key held by more than the compared first texts, those after the removed ones move up: they are
        # compared now with the texts after them, as a store that never held the removed ones would have.
        self._verify_and_link(self._moved_up_pairs(gone_keys, gone_ids), {})

    def _moved_up_pairs(self, gone_keys: np.ndarray, gone_ids: np.ndarray) -> np.ndarray:
        """Candidate pairs, (n, 2) in order, that removing these index rows lets in: under each of their keys, the
        texts now among its first KEY_HOLDERS_COMPARED that were not before, each with every text after it."""
        limit = KEY_HOLDERS_COMPARED
        order = np.lexsort((gone_ids, gone_keys))
        gone_keys, gone_ids = gone_keys[order], gone_ids[order].astype(np.int64)
        keys, counts = distinct_counts(gone_keys)
        stored_keys, stored_ids = self.store.match_index(keys)  # the rows left, in key order, each key's ids ascending
        lows = np.searchsorted(stored_keys, keys, "left")
        held = np.searchsorted(stored_keys, keys, "right") - lows
        more = held > limit - counts  # keys that held more than the compared first before the removal
        firsts, seconds = [np.empty(0, np.int64)], [np.empty(0, np.int64)]
        for key, low, left in zip(keys[more].tolist(), lows[more].tolist(), held[more].tolist()):
            holders = stored_ids[low : low + left].astype(np.int64)
            removed = gone_ids[np.searchsorted(gone_keys, key, "left") : np.searchsorted(gone_keys, key, "right")]
            before = np.arange(min(left, limit)) + np.searchsorted(removed, holders[:limit])  # ranks before the removal
            moved = np.flatnonzero(before >= limit)
            after = left - moved - 1  # the texts after each one moved up
            firsts.append(np.repeat(holders[moved], after))
            seconds.append(holders[ranges(moved + 1, after)])
        return _pairs_of_codes(_pair_codes(np.concatenate(firsts), np.concatenate(seconds)))

    # --- rebuilding --------------------------------------------------------------

    def rebuild(self, progress=None) -> None:
        """Recompute index rows, pairs and clusters from the stored signatures (after a banding change)."""
        self.store.clear_index()
        ids = self.store.all_content_ids()
        for start in range(0, len(ids), 2000):
            new = self.stored_fingerprints(self.store.contents(ids[start : start + 2000]))
            self.containment.add({cid: fp.fingerprints for cid, fp in new.items()})
            self._index_and_link(new)
            if progress:
                progress(min(start + 2000, len(ids)), len(ids))
        # Every content was just read whole: those stored before checksums existed get theirs.
        self.store.fill_checksums()

    # --- searching ---------------------------------------------------------------

    def search(self, fp: Fingerprint, threshold: float | None = None) -> list[Match]:
        """Stored contents that are near-duplicates of a fingerprint, best first: search_many() of one, whose
        candidates are verified together (compiled, once this process has earned it) rather than one by one."""
        return self.search_many([fp], threshold)[0]

    def search_many(self, fps: list[Fingerprint], threshold: float | None = None) -> list[list[Match]]:
        """search() of many fingerprints at once, with the same answers: one lookup of the index for all their keys,
        one read of the stored sketches their candidates need, their pairs verified together."""
        return self.verified_many(fps, self.candidates_many(fps), threshold)

    def candidates_many(self, fps: list[Fingerprint]) -> NearCandidates:
        """What search_many verifies: each fingerprint's stored text of the same text, and its candidates, from one
        lookup of the index for all their keys."""
        hashes = [fp.content_hash for fp in fps]
        known = self.store.content_ids_by_hash(list(set(hashes)))
        exact = [known.get(h) for h in hashes]
        queries = candidates = np.empty(0, np.int64)
        ids, keys = self.rows_of(dict(enumerate(fps)))
        if len(keys):
            stored_keys, stored_ids = self.store.match_index(keys)
            order = np.argsort(stored_keys, kind="stable")
            stored_keys, stored_ids = stored_keys[order], stored_ids[order].astype(np.int64)
            lows, counts = spans(stored_keys, keys)
            # Each key's first holders only (KEY_HOLDERS_COMPARED), as an add compares a new text with.
            counts = np.minimum(counts, KEY_HOLDERS_COMPARED)
            codes = distinct((np.repeat(ids, counts) << 32) | stored_ids[ranges(lows, counts)])
            queries, candidates = codes >> 32, codes & 0xFFFFFFFF
            not_exact = candidates != np.array([e or -1 for e in exact], np.int64)[queries]
            queries, candidates = queries[not_exact], candidates[not_exact]
        return NearCandidates(exact, queries, candidates)

    def verified_many(self, fps: list[Fingerprint], found: NearCandidates, threshold: float | None = None,
                      sides: dict[int, Side] | None = None) -> list[list[Match]]:
        """What search_many gives, from what candidates_many found for these fingerprints. sides: stored texts read
        already (a batch query's containment candidates), whose sketches are not read again."""
        limit = self.settings.threshold if threshold is None else threshold
        exact, queries, candidates = found.exact, found.queries, found.candidates
        out = [[Match(e, 1.0, 0 if fp.simhash is not None else None, True)] if e else [] for e, fp in zip(exact, fps)]
        if len(queries):
            judge = self._query_judges.get(limit)
            if judge is None:
                judge = self._query_judges[limit] = PairJudge(limit, self.settings.sketch_size)
            for start in range(0, len(queries), VERIFY_PAIRS_AT_ONCE):
                part_q, part_c = queries[start : start + VERIFY_PAIRS_AT_ONCE], candidates[start : start + VERIFY_PAIRS_AT_ONCE]
                theirs = self._stored_sketches(distinct(part_c), sides or {})
                present = np.isin(part_c, theirs.ids)  # a text gone meanwhile has no sketch
                part_q, part_c = part_q[present], part_c[present]
                mine = SketchTable.of({_QUERY_IDS + q: Signature(fps[q].sketch, fps[q].simhash)
                                       for q in distinct(part_q).tolist()})
                pairs = np.column_stack((part_c, part_q + _QUERY_IDS))
                for cid, query, jaccard, distance in judge.pairs(SketchTable.joined([theirs, mine]), pairs):
                    out[query - _QUERY_IDS].append(Match(cid, jaccard, distance, False))
        # A stored text was compared, when it was added and by the texts added after it, with more than a query meets
        # under a key held by many (the texts after it too, where it is among the first): its stored pairs count.
        stored: dict[int, list[int]] = {}  # content id: the queries of its text
        for q, e in enumerate(exact):
            if e:
                stored.setdefault(e, []).append(q)
        if stored:
            listed = {q: {m.content_id for m in out[q]} for qs in stored.values() for q in qs}
            for a, b, jaccard, hamming in self.store.pairs_with(list(stored)):
                if jaccard < limit:
                    continue
                for mine, theirs in ((a, b), (b, a)):
                    for q in stored.get(mine, ()):
                        if theirs not in listed[q]:
                            listed[q].add(theirs)
                            out[q].append(Match(theirs, jaccard, hamming, False))
        for matches in out:
            matches.sort(key=lambda m: (-m.jaccard, m.hamming if m.hamming is not None else 65, m.content_id))
        return out


def index_rows(settings: Settings, scheme: Candidates, fingerprints: dict[int, Fingerprint]) -> tuple[np.ndarray, np.ndarray]:
    """(content ids, keys) of the index rows of many contents: one per LSH band (or, with the super-shingles
    preset, one per pair of super-shingles) for a text with shingles, one per SimHash block pair for a text
    with a SimHash; each key hashes its slot with the value in it. Two contents are candidates when they share
    a key: in a store (Indexer) or in a scale-out job's shuffle alike."""
    with_shingles = [cid for cid, fp in fingerprints.items() if fp.shingles]
    with_simhash = [cid for cid, fp in fingerprints.items() if fp.simhash is not None]
    # np.array of the rows rather than np.stack: a quarter of the time for a batch's thousands (stack reshapes each
    # row first); rows of unequal length are refused alike.
    signatures = np.array([fingerprints[c].minhash for c in with_shingles]) if with_shingles else None
    simhashes = np.array([fingerprints[c].simhash for c in with_simhash], dtype=np.uint64)
    fast = compiled.loaded("dedupdb.sketch.fastsketch")  # index keys alone are not worth loading numba for
    if fast is not None and isinstance(scheme, Banding) and (signatures is None or signatures.dtype == np.uint16):
        masks = block_masks(settings.simhash_distance)
        if signatures is None:
            signatures = np.empty((0, scheme.bands * scheme.rows), np.uint16)
        keys = fast.index_keys(signatures, scheme.rows, BAND_OFFSET, BAND_MULT, slot_mixes(0, scheme.bands), simhashes,
                               masks, slot_mixes(SIMHASH_SLOTS, len(masks)), INDEX_KEY_BITS)
        ids = np.concatenate((np.repeat(np.asarray(with_shingles, np.int64), scheme.bands),
                              np.repeat(np.asarray(with_simhash, np.int64), len(masks))))
        return ids, keys
    ids, keys = [np.empty(0, np.int64)], [np.empty(0, np.uint64)]
    if signatures is not None:
        matrix = candidate_keys(signatures, scheme).view(np.uint64)
        ids.append(np.repeat(np.asarray(with_shingles, np.int64), matrix.shape[1]))
        keys.append(column_slot_hash(matrix, 0, INDEX_KEY_BITS).ravel())
    if with_simhash:
        matrix = block_key_matrix(simhashes, settings.simhash_distance)
        ids.append(np.repeat(np.asarray(with_simhash, np.int64), matrix.shape[1]))
        keys.append(column_slot_hash(matrix, SIMHASH_SLOTS, INDEX_KEY_BITS).ravel())
    return np.concatenate(ids), np.concatenate(keys)


def _unsigned(value: int | None) -> int | None:
    return None if value is None else to_unsigned64(value)


def _shared_keys(
    keys: np.ndarray, ids: np.ndarray, stored_keys: np.ndarray, stored_ids: np.ndarray,
    limit: int | None = None,
) -> np.ndarray:
    """Candidate pairs, (n, 2) content ids (a < b) in order: new rows (keys, ids) sharing a key with a stored row
    (stored_keys, stored_ids) or with each other, one of the two among the key's first `limit` holders (the stored
    ones, then the new; KEY_HOLDERS_COMPARED). Both come in key order and each key's ids in ascending order, as
    Store.index_and_match gives them. A batch onto ten million documents meets millions of stored rows, so every
    array over them costs tens of MB: a stored row that meets one new row (most do) is paired without expanding
    ranges, and each part's pairs are made distinct in place before the parts are joined (a near-duplicate pair
    shares many keys)."""
    limit = KEY_HOLDERS_COMPARED if limit is None else limit
    held = np.searchsorted(stored_keys, keys, "right") - np.searchsorted(stored_keys, keys, "left")
    stored_keys, stored_ids = _first_of_each_key(stored_keys, stored_ids, limit)
    lows = np.searchsorted(keys, stored_keys, "left")
    meeting = np.searchsorted(keys, stored_keys, "right") - lows
    one, many = meeting == 1, meeting > 1
    parts = [_pair_codes(ids[lows[one]], stored_ids[one])]
    if many.any():
        parts.append(_pair_codes(ids[ranges(lows[many], meeting[many])], np.repeat(stored_ids[many], meeting[many])))
    del lows, meeting, one, many
    # Two new rows of one key: each row with the rows before it in its run of equal keys, as far as the key's first
    # `limit` holders go.
    first = run_starts(keys)
    before = np.minimum(np.arange(len(keys)) - first, np.maximum(limit - held, 0))
    parts.append(_pair_codes(ids[np.repeat(np.arange(len(keys)), before)], ids[ranges(first, before)]))
    return _pairs_of_codes(distinct(np.concatenate(parts)))


def _first_of_each_key(keys: np.ndarray, ids: np.ndarray, limit: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows (keys in order) among the first `limit` of their key."""
    if len(keys) <= limit:
        return keys, ids
    keep = np.arange(len(keys)) - run_starts(keys) < limit  # each row's rank under its key
    return (keys, ids) if keep.all() else (keys[keep], ids[keep])


def _pair_codes(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The distinct (low << 32) | high of the pairs (a[i], b[i]) with a[i] != b[i], sorted (content ids fit in 30
    bits, store.py). a and b must be arrays of the caller's own: they are overwritten."""
    a, b = a.astype(np.int64, copy=False), b.astype(np.int64, copy=False)
    low = np.minimum(a, b)
    high = np.maximum(a, b, out=a)
    del b
    keep = low != high
    low <<= 32
    low |= high
    del a, high
    codes = low if keep.all() else low[keep]
    del low, keep
    codes.sort()
    return distinct_of_sorted(codes)


def _pairs_of_codes(codes: np.ndarray) -> np.ndarray:
    """(n, 2) pairs (low, high) of codes made by _pair_codes."""
    pairs = np.empty((len(codes), 2), np.int64)
    np.right_shift(codes, 32, out=pairs[:, 0])
    np.bitwise_and(codes, 0xFFFFFFFF, out=pairs[:, 1])
    return pairs


def _negative_counts(documents: list[tuple[int, int]]) -> dict[int, int]:
    counts: dict[int, int] = {}
    for _, content_id in documents:
        counts[content_id] = counts.get(content_id, 0) - 1
    return counts

