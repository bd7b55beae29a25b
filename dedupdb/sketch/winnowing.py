"""Containment: how much of one text lies inside another (a truncated copy, an excerpt, texts merged into one).

Jaccard misses these: a passage of 40 words inside a review of 400 has a Jaccard near 0.1. Each text is therefore
also winnowed (Schleimer, Wilkerson & Aiken, SIGMOD 2003): every run of `containment_ngram` tokens is hashed, and
of every `winnow_window` consecutive run hashes the smallest is kept. Any run of window + ngram - 1 tokens two
texts share (12 at the defaults) holds a window whose minimum both keep, so it gives them a common fingerprint;
and because the choice is local, a text keeps, inside the part it shares with another, the fingerprints the other
keeps there. About 2 / (window + 1) of the positions are kept (46 distinct values for a median IMDB review).

Runs of four tokens rather than the two of the Jaccard shingles: the minimum of a window favours whatever hashes
low, and a frequent bigram ("of the", "我们") that does is kept by nearly every text holding it; on 100,000 IMDB
reviews 46% of winnowed bigrams sit in keys shared by over 100 texts, of 4-grams 2%.

Each fingerprint is a row of `containment_keys`, packed like the LSH rows: (hash << 30) | content id, so the
texts holding a fingerprint are one rowid range. Each content also keeps its own fingerprints (a blob), which is
how its rows are found again when it goes, and how two texts are compared.

Containment of A in B (the share of A's shingles B holds) is computed from what the store keeps: exactly from the
two bottom-k sketches when both texts have at most sketch_size shingles; otherwise from A's sketched shingles in
the hash range B's sketch covers, or as the share of A's fingerprints B also has, whichever rests on more of A.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from dedupdb.sketch.minhash import sketch_jaccard
from dedupdb.sketch.simhash import hamming
from dedupdb.text.hashing import distinct, ranges
from dedupdb.text.tokens import TokenBatch, shingle_hashes

_S32 = np.uint64(32)
_LOW32 = np.uint64(0xFFFFFFFF)
_EMPTY = np.empty(0, np.uint32)

# A fingerprint held by more texts than this is common phrasing ("one of the best", a signature line): it
# finds no candidates (each would meet hundreds of unrelated texts) but still counts in every ratio.
COMMON_POSTINGS = 200
# A query made only of common fingerprints looks them up anyway, up to this many texts each.
QUERY_COMMON_POSTINGS = 20_000
# Candidates of one query scored, those sharing the most fingerprints with it first.
QUERY_CANDIDATES = 500
# A candidate pair is scored when it shares at least this share of floor x the smaller text's fingerprints. Copied
# runs keep them, but texts alike bigram by bigram rather than run by run (a template filled in differently) share
# few: on Reuters 0.25 keeps 3,863 of the 3,866 pairs at containment 0.8 that scoring every candidate finds, at a
# third of the time (0.5 keeps 3,820).
CANDIDATE_SHARE = 0.25


def winnowed(batch: TokenBatch, ngram: int, window: int) -> list[np.ndarray]:
    """The winnowed fingerprints of each text of a batch: distinct, sorted (uint32). A text with fewer runs than a
    window keeps its smallest run hash (a text shorter than one run is one run of all its tokens)."""
    texts = len(batch.bounds) - 1
    out = [_EMPTY] * texts
    counts = np.diff(batch.bounds)
    runs = counts - ngram + 1  # run hashes of each text; run p covers tokens p .. p + ngram - 1 of the batch
    full = np.flatnonzero(runs >= window)
    if len(full):
        grams = shingle_hashes(batch.hashes, ngram)  # runs of the whole batch, those across two texts unused
        width = len(grams) - window + 1
        minima = grams[:width].copy()
        for j in range(1, window):  # minimum of the window starting at each position
            np.minimum(minima, grams[j : j + width], out=minima)
        spans = runs[full] - window + 1  # windows lying inside each text
        owner = np.repeat(full, spans)
        starts = ranges(batch.bounds[full], spans)
        keys = distinct((owner.astype(np.uint64) << _S32) | minima[starts].astype(np.uint64))
        split = np.searchsorted(keys >> _S32, np.arange(texts + 1, dtype=np.uint64)).tolist()
        low = (keys & _LOW32).astype(np.uint32)
        for i in full.tolist():
            out[i] = low[split[i] : split[i + 1]]
    for i in np.flatnonzero((counts > 0) & (runs < window)).tolist():
        out[i] = shingle_hashes(batch.hashes[batch.bounds[i] : batch.bounds[i + 1]], ngram).min(keepdims=True)
    return out


def run_hashes(batch: TokenBatch, i: int, ngram: int) -> np.ndarray:
    """Every distinct run hash of text i of a batch (what a query shorter than a window looks up)."""
    return distinct(shingle_hashes(batch.hashes[batch.bounds[i] : batch.bounds[i + 1]], ngram))


# --- estimating ----------------------------------------------------------------


# Not frozen: a batch query reads a dozen a text, and a frozen dataclass's __init__ costs several times as much.
@dataclass(slots=True)
class Side:
    """What comparing one content needs."""

    shingles: int                    # distinct shingles
    sketch: np.ndarray               # bottom-k shingle hashes, sorted
    fingerprints: np.ndarray | None  # winnowed, sorted; None when stored before they existed
    simhash: int | None = None       # unsigned


def containment(a: Side, b: Side, sketch_size: int) -> float | None:
    """The share of a's shingles that b holds (None when nothing tells: a has no shingles); of their token n-grams
    alone (even hashes), since a long text has no character view for a short one's to be found in (tokens.py)."""
    if len(a.sketch) == 0:
        return None
    b_whole = b.shingles <= sketch_size
    # Every shingle of b hashing at or below its sketch's largest value is in its sketch: a's sketched shingles in
    # that range are a sample of a, each known to be in b or not.
    sample = a.sketch if b_whole or len(b.sketch) == 0 else a.sketch[: np.searchsorted(a.sketch, b.sketch[-1], "right")]
    sample = sample[(sample & np.uint32(1)) == 0]
    exact = a.shingles <= sketch_size and b_whole
    # Otherwise whichever rests on more of a: the sample, or its fingerprints (a passage in a long text, whose
    # sketch covers few of the passage's shingles, keeps every one of its fingerprints there).
    prints = 0 if a.fingerprints is None or b.fingerprints is None else len(a.fingerprints)
    if exact or len(sample) >= prints:
        return _shared(sample, b.sketch) / len(sample) if len(sample) else None
    return _shared(a.fingerprints, b.fingerprints) / prints


def _shared(values: np.ndarray, sorted_set: np.ndarray) -> int:
    """How many of values (distinct) are in sorted_set."""
    if len(values) == 0 or len(sorted_set) == 0:
        return 0
    at = np.minimum(np.searchsorted(sorted_set, values), len(sorted_set) - 1)
    return int(np.count_nonzero(sorted_set[at] == values))


def smaller_first(a: Side, b: Side) -> bool:
    """Whether a is the smaller text of the two (fewer token n-grams), the one whose containment in the other
    counts. Token n-grams, not all shingles: a short text's character view can give a truncated copy more
    shingles than the whole article it was cut from (tokens.py)."""
    return token_shingles(a) <= token_shingles(b)


def token_shingles(side: Side) -> float:
    """How many token n-grams (even hashes) a content has: told by its sketch when it holds them all, estimated
    from the sketch's share of them otherwise (a text long enough for that has no character view, or little)."""
    odd = int(np.count_nonzero(side.sketch & np.uint32(1)))
    if odd == 0 or len(side.sketch) == 0:
        return side.shingles
    even = len(side.sketch) - odd
    return even if len(side.sketch) >= side.shingles else side.shingles * even / len(side.sketch)


def pair_similarity(a: Side, b: Side, sketch_size: int) -> tuple[float, int | None]:
    """(Jaccard, SimHash distance) of two contents."""
    jaccard = round(sketch_jaccard(a.sketch, b.sketch, sketch_size), 4)
    return jaccard, hamming(a.simhash, b.simhash) if a.simhash is not None and b.simhash is not None else None


def pair_scores(a: Side, b: Side, sketch_size: int) -> tuple[float, int | None, float | None]:
    """(Jaccard, SimHash distance, containment of the smaller in the larger) of two contents."""
    jaccard, distance = pair_similarity(a, b, sketch_size)
    inner, outer = (a, b) if smaller_first(a, b) else (b, a)
    found = containment(inner, outer, sketch_size)
    return jaccard, distance, None if found is None else round(found, 4)


# --- finding candidates ---------------------------------------------------------


def rows_of(fingerprints: dict[int, np.ndarray | None]) -> tuple[np.ndarray, np.ndarray]:
    """(content ids, keys) of the containment rows of contents (none for a content without fingerprints)."""
    have = [(cid, fp) for cid, fp in fingerprints.items() if fp is not None and len(fp)]
    if not have:
        return np.empty(0, np.int64), np.empty(0, np.uint64)
    ids = np.repeat(np.fromiter((cid for cid, _ in have), np.int64, len(have)),
                    np.fromiter((len(fp) for _, fp in have), np.int64, len(have)))
    keys = np.concatenate([fp for _, fp in have]).astype(np.uint64)
    return ids, keys


def candidates_by_share(a: Iterable[int], counts: Iterable[int], limit: int) -> list[int]:
    """The `limit` contents sharing the most fingerprints, most first (then by id)."""
    ranked = sorted(zip(counts, a), key=lambda t: (-t[0], t[1]))
    return [cid for _, cid in ranked[:limit]]


# --- the store's containment rows ---------------------------------------------------
