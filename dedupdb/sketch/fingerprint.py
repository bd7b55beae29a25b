"""From normalized text to everything the store remembers of a document: hashes and signatures."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from itertools import chain

import numpy as np
from numpy.typing import NDArray

from dedupdb import compiled
from dedupdb.config import Settings
from dedupdb.sketch.minhash import MinHasher, bottom_k
from dedupdb.sketch.simhash import fingerprint as simhash_fingerprint
from dedupdb.sketch.simhash import fingerprints as simhash_fingerprints
from dedupdb.sketch.winnowing import run_hashes, winnowed
from dedupdb.text.hashing import content_hash, distinct_counts_of_each, to_signed64
from dedupdb.text.tokens import Tokenizer, chinese_words, jieba_words
from dedupdb.text.weights import (
    chinese_idf,
    chinese_word_hashes,
    word_buckets,
    word_weights,
)


# Not frozen: made by the hundred thousand in an add, and a frozen dataclass's __init__ costs six times as much.
@dataclass(slots=True)
class Fingerprint:
    content_hash: bytes
    chars: int
    shingles: int                 # distinct shingles; 0 means nothing to compare by
    minhash: NDArray[np.uint16]   # num_perm values, their low 16 bits (see _kept)
    sketch: NDArray[np.uint32]    # bottom-k distinct shingle hashes, sorted
    simhash: int | None           # None when the text is too short for SimHash to be trustworthy
    fingerprints: NDArray[np.uint32] | None = None  # winnowed (sketch/winnowing.py); None: stored before they existed

    @property
    def simhash_signed(self) -> int | None:
        return None if self.simhash is None else to_signed64(self.simhash)


# Not frozen: made by the hundred thousand in an add, and a frozen dataclass's __init__ costs six times as much.
@dataclass(slots=True)
class Sketch:
    """All of a fingerprint, which follows from the text alone (SimHash's weights come from fixed tables,
    weights.py): a worker computes it, and the store takes it as it is."""

    content_hash: bytes
    chars: int
    shingles: int
    minhash: NDArray[np.uint16]
    sketch: NDArray[np.uint32]
    simhash: int | None
    # Text not mostly CJK: its distinct word hashes, their counts and the corpus IDF's buckets they fall in
    # (distinct), which a scale-out job counts.
    words: tuple[NDArray[np.uint64], NDArray[np.int64], NDArray[np.uint32]] | None
    tokens: int
    fingerprints: NDArray[np.uint32] | None = None               # winnowed, for containment

    def __reduce__(self):
        # Sketches travel from worker processes by the thousand: their arrays as plain bytes pickle and unpickle
        # several times faster than as numpy arrays (read-only views come back, which is all anyone needs).
        words = None if self.words is None else (self.words[0].tobytes(), self.words[1].astype(np.int64).tobytes(),
                                                 self.words[2].tobytes())
        fingerprints = None if self.fingerprints is None else self.fingerprints.tobytes()
        return _unpickle_sketch, (self.content_hash, self.chars, self.shingles, self.minhash.tobytes(),
                                  self.sketch.tobytes(), self.simhash, words, self.tokens, fingerprints)


def _unpickle_sketch(content_hash, chars, shingles, minhash, sketch, simhash, words, tokens, fingerprints=None) -> Sketch:
    if words is not None:
        words = (np.frombuffer(words[0], np.uint64), np.frombuffer(words[1], np.int64), np.frombuffer(words[2], np.uint32))
    if fingerprints is not None:
        fingerprints = np.frombuffer(fingerprints, dtype=np.uint32)
    return Sketch(content_hash, chars, shingles, np.frombuffer(minhash, dtype=np.uint16),
                  np.frombuffer(sketch, dtype=np.uint32), simhash, words, tokens, fingerprints)


class Sketcher:
    """Fingerprinting: tokens, shingles, MinHash, bottom-k sketch, SimHash."""

    # Batches at least this large take the compiled path (fastsketch.py: the same numbers, several times faster)
    # when numba is installed and loaded or earned (below); fewer texts (a query) take it only once earned.
    FAST_BATCH = 8
    # Loading numba and the compiled code costs a process most of a second (seconds more the first time on a
    # machine, to compile). A process therefore turns to it once it has spent that long sketching with numpy
    # (batches, or single texts: a process answering queries by the thousand), or for a batch at once if it is
    # loaded already: a quick command never waits for numba, a large job loses at most that.
    FAST_AFTER_SECONDS = 0.8
    # A text longer than this takes numpy's path, by itself: the compiled kernel reserves some 88 bytes of address
    # space a byte of the batch's longest text (a 50 MB log file: 5.5 GB, 0.9 GB of it touched), where numpy's path
    # holds what it uses (1.1 GB, 0.8 GB touched), at four times the time. Where address space is limited (ulimit
    # -v), the kernel's reservation failed the whole add, and numba keeps what it reserved after the failure.
    LONG_TEXT_CHARS = 4 << 20

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.tokenizer = Tokenizer(settings.word_ngram, settings.cjk_ngram, settings.char_ngram)
        self.minhasher = MinHasher(settings.num_perm, settings.seed)
        self._numpy_seconds = 0.0  # spent sketching with numpy (batches and single texts)
        self._awaited = False  # at the last batch, this process awaited the compiled sketching (compiled.py)

    def sketch(self, texts: list[str]) -> list[Sketch]:
        long = [len(text) > self.LONG_TEXT_CHARS for text in texts]
        if not any(long):
            return self._sketch(texts)
        short = iter(self._sketch([text for text, is_long in zip(texts, long) if not is_long]))
        return [self._sketch([text], numpy_only=True)[0] if is_long else next(short)
                for text, is_long in zip(texts, long)]

    def _sketch(self, texts: list[str], numpy_only: bool = False) -> list[Sketch]:
        waiting = compiled.waiting()
        if self._awaited and not waiting:  # another process has compiled it: from now on, as in a worker that found it
            load_compiled()
        self._awaited = waiting
        earned = self._numpy_seconds >= self.FAST_AFTER_SECONDS
        loaded = f"{__package__}.fastsketch" in sys.modules
        # Loaded aside for single texts (compiled.load_aside, a process answering queries): they take it too.
        wanted = (earned or (loaded and (len(texts) >= self.FAST_BATCH or compiled.loaded_aside()))) and not waiting
        fast = self._fast() if wanted and not numpy_only else None
        if fast is not None:
            s = self.settings
            try:
                parts = fast.sketch_parts(texts, s.word_ngram, s.cjk_ngram, s.char_ngram, s.containment_ngram,
                                          s.winnow_window, self.minhasher.multipliers, self.minhasher.offsets)
            except MemoryError:  # the kernel's reservation refused (LONG_TEXT_CHARS): numpy's path, the same numbers
                fast = None
        if fast is None:
            started = time.perf_counter()
            parts = self._parts(texts)
            self._numpy_seconds += time.perf_counter() - started
        shingle_sets, signatures, word_counts, winnows, token_counts, mostly_cjk, buckets = parts
        signatures = _kept(signatures)
        worded = [i for i in range(len(texts)) if token_counts[i] and not mostly_cjk[i]]  # weighted by word_weights
        weights = word_weights if fast is None else fast.word_weights
        votes = simhash_fingerprints if fast is None else fast.simhashes
        simhashes = self._word_simhashes([word_counts[i] for i in worded], worded, weights, votes)
        simhashes.update(self._chinese_simhashes(texts, [i for i in range(len(texts)) if mostly_cjk[i]],
                                                 token_counts, fast))
        out = []
        for i, (text, shingles, signature) in enumerate(zip(texts, shingle_sets, signatures)):
            sketch, count = bottom_k(shingles, self.settings.sketch_size, already_unique=True)
            tokens = token_counts[i]
            words = (*word_counts[i], buckets[i]) if tokens and not mostly_cjk[i] else None
            simhash = simhashes.get(i)
            out.append(Sketch(content_hash(text), len(text), count, signature, sketch, simhash, words, tokens, winnows[i]))
        return out

    @staticmethod
    @lru_cache(maxsize=1)
    def _fast():
        """The compiled sketching module, or None where it cannot be imported (no numba, or no folder to keep
        compiled code in)."""
        try:
            from dedupdb.sketch import fastsketch
        except ImportError:
            return None
        return fastsketch

    def _parts(self, texts: list[str]):
        """What sketch() assembles, computed with numpy: shingle sets (distinct, sorted), signatures, word
        counts, winnowed fingerprints, token counts, whether each text is mostly CJK and the buckets of the words
        of each text that is not (else None)."""
        batch = self.tokenizer.batch(texts)
        shingle_sets = self.tokenizer.shingle_sets(batch)  # distinct and sorted: the sketch is their head
        signatures = self.minhasher.signatures(shingle_sets)
        word_counts = self.tokenizer.word_counts(batch)
        winnows = winnowed(batch, self.settings.containment_ngram, self.settings.winnow_window)
        count = range(len(texts))
        tokens, cjk = [batch.count(i) for i in count], [batch.is_cjk(i) for i in count]
        worded = [i for i in count if tokens[i] and not cjk[i]]
        buckets = [None] * len(texts)
        for i, distinct_buckets in zip(worded, word_buckets([word_counts[i][0] for i in worded])):
            buckets[i] = distinct_buckets
        return shingle_sets, signatures, word_counts, winnows, tokens, cjk, buckets

    def _word_simhashes(self, counted: list[tuple[np.ndarray, np.ndarray]], positions: list[int],
                        weights: Callable[[np.ndarray], np.ndarray], votes: Callable[..., list[int]]) -> dict[int, int]:
        """SimHash of the texts (by position) whose distinct words (hashes, counts) are enough for one, all in one
        pass, weights(word hashes) weighing them and votes (simhash.fingerprints, or its compiled twin) folding
        them; the word table is loaded only when some text has enough."""
        weighted = [(p, words, counts) for p, (words, counts) in zip(positions, counted)
                    if len(words) >= self.settings.simhash_min_features]
        if not weighted:
            return {}
        features = np.concatenate([words for _, words, _ in weighted])
        counts = np.concatenate([counts for _, _, counts in weighted])
        values = votes(features, counts * weights(features), [len(w) for _, w, _ in weighted])
        return {p: value for (p, _, _), value in zip(weighted, values)}

    def _chinese_words(self, text: str) -> list[str]:
        # A store of algorithm 6 goes on with jieba's Python segmenting, so that its fingerprints stay its own.
        return jieba_words(text) if self.settings.algorithm <= 6 else chinese_words(text)

    def _chinese_simhashes(self, texts: list[str], positions: list[int], token_counts: list[int],
                           fast=None) -> dict[int, int]:
        """The SimHash of each mostly-Chinese text at these positions: its distinct words' hashes, counted, weighed
        by jieba's IDF and voted on (simhash.fingerprint of that text alone, the value stores keep), for all the
        texts together, compiled where fast (fastsketch) is given, else in numpy. Both leave a vote near enough even
        that the order of adding could turn it to simhash.fingerprint of its text. One by one, all but the
        segmenting took half of a long Chinese review's SimHash (compiled), and an eighth of a short one's sketch on
        numpy's path (105 µs a review against 92 together)."""
        minimum = self.settings.simhash_min_features
        chosen = [p for p in positions if token_counts[p] >= minimum]  # fewer tokens cannot reach the minimum
        if not chosen:
            return {}
        words = [self._chinese_words(texts[p]) for p in chosen]
        every = list(chain.from_iterable(words))
        hashes = chinese_word_hashes(every) if fast is None else fast.chinese_hashes(every)
        # Each text's distinct words, sorted, with their counts: distinct_first_counts of each at once.
        counted = distinct_counts_of_each if fast is None else fast.distinct_counted
        features, counts, lengths = counted(hashes, [len(w) for w in words])
        enough = lengths >= minimum
        taken = np.repeat(enough, lengths)
        features = features[taken]
        votes = simhash_fingerprints if fast is None else fast.simhashes
        values = votes(features, counts[taken] * chinese_idf(features), lengths[enough].tolist(), simhash_fingerprint)
        return dict(zip(np.asarray(chosen)[enough].tolist(), values))


_SKETCHERS: dict[Settings, Sketcher] = {}


def _sketcher(settings: Settings) -> Sketcher:
    sketcher = _SKETCHERS.get(settings)
    if sketcher is None:
        sketcher = _SKETCHERS[settings] = Sketcher(settings)
    return sketcher


def _kept(signatures: NDArray[np.uint32]) -> NDArray[np.uint16]:
    """b-bit MinHash (Li and Koenig 2010): the low 16 bits of each value serve LSH as well as all 32 (a band key
    hashes four of them) in half the bytes a store keeps."""
    return signatures.astype(np.uint16)


def kept_signatures(settings: Settings, shingle_sets: list[NDArray[np.uint32]]) -> NDArray[np.uint16]:
    """The signatures, as sketching keeps them, of whole sets of shingle hashes: what a store gives back for the
    signatures it leaves out (a sketch holding every shingle hash of its text, store.py)."""
    return _kept(_sketcher(settings).minhasher.signatures(shingle_sets))


def numpy_seconds(settings: Settings) -> float:
    """How long this process has sketched with numpy (for these settings): what earns it the compiled code."""
    return _sketcher(settings)._numpy_seconds


def load_compiled() -> bool:
    """Load the compiled sketching now, in a worker process that is to sketch large batches: they then take it
    from the first, never numpy's path, which costs more memory and time. Only for a process that runs nothing
    but dedupdb's work (compiled.run_alone: a worker, the command line's) numba is loaded without scipy.linalg
    (compiled.blas_held_back). Returns whether it could be loaded."""
    with compiled.blas_held_back():
        return Sketcher._fast() is not None


def sketch_texts(settings: Settings, texts: list[str]) -> list[Sketch]:
    """Sketches of normalized texts; a module-level function so worker processes can run it."""
    return _sketcher(settings).sketch(texts)


def query_runs(settings: Settings, normalized_text: str) -> np.ndarray:
    """Every distinct run hash a text's fingerprints are chosen from (winnowing.py): what a short query looks up."""
    return queries_runs(settings, [normalized_text])[0]


def queries_runs(settings: Settings, normalized_texts: list[str]) -> list[np.ndarray]:
    """query_runs() of many texts, tokenized together."""
    batch = _sketcher(settings).tokenizer.batch(normalized_texts)
    return [run_hashes(batch, i, settings.containment_ngram) for i in range(len(normalized_texts))]


class Fingerprinter:
    def __init__(self, settings: Settings) -> None:
        self.settings = settings

    def batch(self, sketches: list[Sketch]) -> list[Fingerprint]:
        """Fingerprints from sketches (made here or in a worker)."""
        return [
            Fingerprint(s.content_hash, s.chars, s.shingles, s.minhash, s.sketch, s.simhash, s.fingerprints)
            for s in sketches
        ]

    def texts(self, texts: list[str]) -> list[Fingerprint]:
        """Fingerprints of normalized texts, sketched here."""
        return self.batch(sketch_texts(self.settings, texts))

    def one(self, text: str) -> Fingerprint:
        return self.texts([text])[0]
