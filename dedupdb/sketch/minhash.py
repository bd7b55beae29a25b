"""Seeded, vectorized MinHash signatures and bottom-k sketches.

Shingles arrive already hashed to well-mixed 32-bit values, so each of the
`num_perm` hash functions is a random affine map x -> a*x + b (mod 2**32) with
odd a: a bijection of the 32-bit space, cheap in numpy's uint32 arithmetic.
Its estimates match the binomial error of ideal MinHash (tests/test_minhash.py).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import NDArray

from dedupdb.text import hashing
from dedupdb.text.tokens import char_view_limit

# view_limit of a text whose character view is whole.
WHOLE_VIEW = char_view_limit(0)

# Shingles hashed in one numpy pass: keeps the (shingles x permutations)
# matrix around a megabyte so it stays in cache.
_CHUNK_SHINGLES = 2048
# Documents hashed together (signatures): at most so many shingles (512 KB of them) and documents a group, and a
# document of more shingles a group's worth at a time. A group of fewer shingles than _GROUP_AT_LEAST is hashed a
# document at a time: a group's calls (three a permutation) cost more than a few documents' five each. Together is
# the quicker from some 2,500 to 4,000 shingles in all, however many documents hold them (256 permutations: 512
# texts of 5 shingles, 192 of 20, 48 of 80, 16 IMDB reviews).
_GROUP_SHINGLES = 1 << 17
_GROUP_DOCUMENTS = 4096
_GROUP_AT_LEAST = 4096
_EMPTY_SLOT = np.uint32(0xFFFFFFFF)


class MinHasher:
    def __init__(self, num_perm: int = 128, seed: int = 1) -> None:
        rng = np.random.default_rng(seed)
        self.num_perm = num_perm
        self.seed = seed
        self.multipliers = (rng.integers(0, 2**32, num_perm, dtype=np.uint64).astype(np.uint32)) | np.uint32(1)
        self.offsets = rng.integers(0, 2**32, num_perm, dtype=np.uint64).astype(np.uint32)

    def signature(self, shingles: NDArray[np.uint32]) -> NDArray[np.uint32]:
        return self.signatures([shingles])[0]

    def signatures(self, shingle_sets: list[NDArray[np.uint32]]) -> NDArray[np.uint32]:
        """One signature row per shingle array; an empty array gives a row of all-ones (matches nothing real)."""
        out = np.full((len(shingle_sets), self.num_perm), _EMPTY_SLOT, dtype=np.uint32)
        alone = []
        for members, held in _groups([len(s) for s in shingle_sets]):
            if held < _GROUP_AT_LEAST:
                alone += members
            elif held > _GROUP_SHINGLES:  # one document larger than a group: a group's worth at a time
                shingles = shingle_sets[members[0]]
                for start in range(0, held, _GROUP_SHINGLES):
                    minima = self._minima(shingles[start : start + _GROUP_SHINGLES], np.zeros(1, np.int64))[:, 0]
                    np.minimum(out[members[0]], minima, out=out[members[0]])
            else:
                starts = np.zeros(len(members), np.int64)
                np.cumsum([len(shingle_sets[i]) for i in members[:-1]], out=starts[1:])
                out[members] = self._minima(np.concatenate([shingle_sets[i] for i in members]), starts).T
        buffer = np.empty((_CHUNK_SHINGLES, self.num_perm), dtype=np.uint32)
        for row in alone:
            shingles = shingle_sets[row]
            # One document at a time, in blocks of rows that stay in cache.
            for start in range(0, len(shingles), _CHUNK_SHINGLES):
                part = shingles[start : start + _CHUNK_SHINGLES]
                hashed = np.multiply(part[:, None], self.multipliers, out=buffer[: len(part)])
                hashed += self.offsets
                np.minimum(out[row], hashed.min(axis=0), out=out[row])
        return out

    def _minima(self, values: NDArray[np.uint32], starts: NDArray[np.int64]) -> NDArray[np.uint32]:
        """(permutations, documents): each permutation's least value over each document's shingles, the documents'
        shingles joined in values, each starting at its starts. Hashed a permutation at a time and reduced by
        document: a few numpy calls a permutation for them all, where a document at a time takes five of its own
        (256 permutations: IMDB reviews 20 µs a text against 49, Chinese reviews 12.7 against 25.6; a text of
        thousands of shingles or more 70 ns a shingle against 230)."""
        hashed = np.empty(len(values), dtype=np.uint32)
        rows = np.empty((self.num_perm, len(starts)), dtype=np.uint32)
        for k in range(self.num_perm):
            np.multiply(values, self.multipliers[k], out=hashed)
            hashed += self.offsets[k]
            np.minimum.reduceat(hashed, starts, out=rows[k])
        return rows


def _groups(lengths: list[int]) -> list[tuple[list[int], int]]:
    """The non-empty documents (by position) in groups, with the shingles each holds: up to _GROUP_SHINGLES
    shingles and _GROUP_DOCUMENTS documents a group (so that its values and its rows of minima stay in cache), but
    a document of more shingles is a group of its own."""
    groups: list[tuple[list[int], int]] = []
    members: list[int] = []
    held = 0
    for position, length in enumerate(lengths):
        if not length:
            continue
        if members and (held + length > _GROUP_SHINGLES or len(members) == _GROUP_DOCUMENTS):
            groups.append((members, held))
            members, held = [], 0
        members.append(position)
        held += length
    if members:
        groups.append((members, held))
    return groups


def estimate_jaccard(sig_a: NDArray[np.uint32], sig_b: NDArray[np.uint32]) -> float:
    """Fraction of permutations whose minima agree: an unbiased estimate of Jaccard similarity."""
    return float(np.count_nonzero(sig_a == sig_b)) / len(sig_a)


def bottom_k(shingles: NDArray[np.uint32], k: int, already_unique: bool = False) -> tuple[NDArray[np.uint32], int]:
    """The k smallest distinct shingle hashes (sorted) and the number of distinct shingles; already_unique
    says shingles is distinct and sorted already."""
    distinct = shingles if already_unique else hashing.distinct(shingles)
    return distinct[:k], len(distinct)


def sketch_jaccard(sketch_a: NDArray[np.uint32], sketch_b: NDArray[np.uint32], k: int) -> float:
    """Jaccard from two bottom-k sketches: exact when both sets have fewer than k shingles."""
    return sketch_overlap(sketch_a, sketch_b, k)[0]


def sketch_overlap(sketch_a: NDArray[np.uint32], sketch_b: NDArray[np.uint32], k: int) -> tuple[float, int]:
    """(Jaccard, shared shingles seen) from two bottom-k sketches: view_overlap without the union."""
    return view_overlap(sketch_a, sketch_b, k)[:2]


def view_overlap(sketch_a: NDArray[np.uint32], sketch_b: NDArray[np.uint32], k: int) -> tuple[float, int, int]:
    """(Jaccard, shared shingles seen, union seen) from two bottom-k sketches: all exact when both sets have fewer
    than k shingles; above that, the shared count is that of the sample (at least about Jaccard x k) and the union
    is k.

    The k smallest hashes of A u B all lie in the union of the two sketches, and
    an element that small belongs to A exactly when it is in A's sketch, so the
    share of them found in both sketches estimates |A n B| / |A u B| (Broder 1997).

    Two whole sets are compared by their token n-grams (even hashes) and by the character n-grams (odd hashes) of
    a short text's character view (tokens.py) below the lower of the two views' limits: a text keeps the
    character n-grams whose hash lies below a limit that falls with its length (told by its token n-grams: see
    view_limit), so below the lower limit each set holds every character n-gram its text has, and two texts a
    few words apart in length compare by the same share of their character n-grams.
    Two texts whose character views are both whole (CHAR_VIEW_FULL tokens or fewer) are compared by their
    character n-grams alone: one typo breaks two of the four word bigrams of a five-word sentence, and
    counting them beside its two dozen character n-grams took a typo's Jaccard under the threshold
    (scripts/eval_short_en.py: five-word texts with a typo 0.987 -> 0.996, with a word changed 0.897 ->
    0.918). Past CHAR_VIEW_FULL tokens the word bigrams are a sixth of the shingles or more, and count.
    A text without a character view (long, or mostly CJK) makes the comparison one of token n-grams alone.
    """
    if len(sketch_a) == 0 or len(sketch_b) == 0:
        return 0.0, 0, 0
    if len(sketch_a) < k and len(sketch_b) < k:
        # Both sets whole: every value seen twice is shared, and the union is all the others once. Verifying a
        # batch calls this for every candidate, so the short way counts (half the time of the general one).
        limit_a, limit_b = view_limit(sketch_a), view_limit(sketch_b)
        if limit_a == limit_b == WHOLE_VIEW:  # two short texts: their character n-grams alone
            sketch_a, sketch_b = sketch_a[(sketch_a & np.uint32(1)) == 1], sketch_b[(sketch_b & np.uint32(1)) == 1]
        elif limit_a or limit_b:  # a character view on either side
            cut = min(limit_a, limit_b)
            sketch_a, sketch_b = _below(sketch_a, cut), _below(sketch_b, cut)
        merged = np.concatenate((sketch_a, sketch_b))
        merged.sort()  # each sketch is a set: a value occurs at most twice
        shared = int(np.count_nonzero(merged[1:] == merged[:-1]))
        union = len(merged) - shared
        return (shared / union if union else 0.0), shared, union
    merged = np.concatenate((sketch_a, sketch_b))
    merged.sort()
    repeated = merged[1:] == merged[:-1]
    union = merged[np.concatenate(([True], ~repeated))][:k]  # a sketch of k hashes may stand for more: estimate
    both = merged[1:][repeated]
    shared = int(np.count_nonzero(both <= union[-1]))
    return shared / len(union), shared, len(union)


def view_limit(sketch: NDArray[np.uint32]) -> int:
    """The limit of a whole sketch's character view (0 when it has none): that of a text of one token more than
    it has token n-grams (even values). A text repeating a word bigram has fewer, and is given a limit a step or
    so higher than its own, never lower: the other text's character n-grams above its own limit then count as
    not shared."""
    odd = int(np.count_nonzero(sketch & np.uint32(1)))
    return char_view_limit(len(sketch) - odd + 1) if odd else 0


def _below(sketch: NDArray[np.uint32], cut: int) -> NDArray[np.uint32]:
    """The even values of a sketch and the odd ones below cut."""
    return sketch[((sketch & np.uint32(1)) == 0) | (sketch.astype(np.int64) < cut)]
