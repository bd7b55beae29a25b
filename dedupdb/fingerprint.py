"""From normalized text to everything the store remembers of a document: hashes and signatures."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xxhash
from numpy.typing import NDArray

from .config import Settings
from .hashing import content_hash, to_signed64
from .minhash import MinHasher, bottom_k
from .simhash import fingerprint as simhash_fingerprint
from .tokens import TokenStream, Tokenizer, chinese_words
from .weights import CorpusIdf, chinese_idf

_WORD_SEED = 0x51A5


@dataclass(frozen=True)
class Fingerprint:
    content_hash: bytes
    chars: int
    shingles: int                 # distinct shingles; 0 means nothing to compare by
    minhash: NDArray[np.uint32]   # num_perm values
    sketch: NDArray[np.uint32]    # bottom-k distinct shingle hashes, sorted
    simhash: int | None           # None when the text is too short for SimHash to be trustworthy

    @property
    def simhash_signed(self) -> int | None:
        return None if self.simhash is None else to_signed64(self.simhash)


class Fingerprinter:
    def __init__(self, settings: Settings, idf: CorpusIdf) -> None:
        self.settings = settings
        self.tokenizer = Tokenizer(settings.word_ngram, settings.cjk_ngram)
        self.minhasher = MinHasher(settings.num_perm, settings.seed)
        self.idf = idf

    def batch(self, texts: list[str], learn: bool = True) -> list[Fingerprint]:
        """Fingerprints of normalized texts; with learn, their words also feed the corpus IDF first."""
        streams = [self.tokenizer.stream(t) for t in texts]
        # Distinct words with their counts, shared by the IDF table and SimHash (space-separated text only).
        words = [None if s.is_cjk else np.unique(s.hashes, return_counts=True) for s in streams]
        if learn:
            for counted in words:
                if counted is not None and len(counted[0]):
                    self.idf.observe(counted[0])
        shingle_sets = [self.tokenizer.shingles(s) for s in streams]
        signatures = self.minhasher.signatures(shingle_sets)
        out = []
        for text, stream, counted, shingles, signature in zip(texts, streams, words, shingle_sets, signatures):
            sketch, distinct = bottom_k(shingles, self.settings.sketch_size)
            out.append(
                Fingerprint(
                    content_hash=content_hash(text),
                    chars=len(text),
                    shingles=distinct,
                    minhash=signature,
                    sketch=sketch,
                    simhash=self._simhash(text, stream, counted),
                )
            )
        return out

    def one(self, text: str) -> Fingerprint:
        return self.batch([text], learn=False)[0]

    def _simhash(self, text: str, stream: TokenStream, counted) -> int | None:
        minimum = self.settings.simhash_min_features
        if len(stream.tokens) < minimum:
            return None  # cannot reach the minimum; spares jieba the work
        if counted is None:
            words = chinese_words(text)
            hashes = np.fromiter(
                (xxhash.xxh64_intdigest(w.encode("utf-8"), _WORD_SEED) for w in words), np.uint64, len(words)
            )
            features, first, counts = np.unique(hashes, return_index=True, return_counts=True)
            idf = chinese_idf([words[i] for i in first])
        else:
            features, counts = counted
            idf = self.idf.idf(features)
        if len(features) < minimum:
            return None
        return simhash_fingerprint(features, counts * idf)
