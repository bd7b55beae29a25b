"""Property tests for the maths: MinHash, bottom-k sketches, SimHash blocks, banding, int64 round trips."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedupdb.text.hashing import to_signed64, to_unsigned64
from dedupdb.index import lsh
from dedupdb.index.lsh import Banding, band_keys, optimal_banding
from dedupdb.sketch.minhash import MinHasher, bottom_k, estimate_jaccard, sketch_jaccard
from dedupdb.sketch.simhash import block_keys, block_layout, fingerprint, hamming
from dedupdb.text.tokens import Tokenizer, shingle_hashes

u64 = st.integers(min_value=0, max_value=2**64 - 1)


@given(u64)
def test_int64_round_trip(value):
    signed = to_signed64(value)
    assert -(2**63) <= signed < 2**63
    assert to_unsigned64(signed) == value


def test_int64_round_trip_through_sqlite():
    import sqlite3

    conn = sqlite3.connect(":memory:")
    conn.execute("CREATE TABLE t (v INTEGER)")
    values = [0, 1, 2**63 - 1, 2**63, 2**64 - 1]
    conn.executemany("INSERT INTO t VALUES (?)", [(to_signed64(v),) for v in values])
    assert [to_unsigned64(r[0]) for r in conn.execute("SELECT v FROM t ORDER BY rowid")] == values


def _signature_in_subprocess() -> list[int]:
    code = (
        "from dedupdb.text.tokens import Tokenizer; from dedupdb.sketch.minhash import MinHasher;"
        "t = Tokenizer(3, 2); s = t.shingles(t.stream('the same text gives the same signature 今天天气很好'));"
        "print(list(MinHasher(128, 1).signature(s)[:16]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return [int(x) for x in out.strip().strip("[]").replace("np.uint32(", "").replace(")", "").split(",")]


def test_signatures_are_deterministic_across_processes():
    tokenizer = Tokenizer(3, 2)
    shingles = tokenizer.shingles(tokenizer.stream("the same text gives the same signature 今天天气很好"))
    here = [int(x) for x in MinHasher(128, 1).signature(shingles)[:16]]
    assert _signature_in_subprocess() == here == _signature_in_subprocess()


def test_documents_hashed_together_get_the_signatures_each_gets_alone(monkeypatch):
    """A batch's documents hashed in groups (a permutation at a time, reduced by document) get exactly the rows
    each gets hashed by itself, a block of its shingles at a time: groups cut by shingles and by documents, empty
    sets between them, a document larger than two groups, runs of short ones hashed one at a time."""
    from dedupdb.sketch import minhash

    rng = np.random.default_rng(7)

    def shingles(count: int) -> np.ndarray:
        return np.unique(rng.integers(0, 2**32, count, dtype=np.uint64).astype(np.uint32))

    sizes = [0, 3, 250, 0, *rng.integers(1, 400, 600).tolist(), 2 * minhash._GROUP_SHINGLES + 5, 1, 0,
             *[2] * (minhash._GROUP_DOCUMENTS + 10), *rng.integers(1000, 40_000, 12).tolist(), 7]
    sets = [shingles(size) for size in sizes]
    hasher = MinHasher(64, 3)
    groups = minhash._groups([len(s) for s in sets])
    together = [held for _, held in groups if minhash._GROUP_AT_LEAST <= held <= minhash._GROUP_SHINGLES]
    assert len(together) >= 3 and max(len(m) for m, _ in groups) == minhash._GROUP_DOCUMENTS
    assert all(held <= minhash._GROUP_SHINGLES or len(m) == 1 for m, held in groups)
    assert any(held > minhash._GROUP_SHINGLES + 1000 for _, held in groups)  # hashed in two blocks or more
    batch = hasher.signatures(sets)
    monkeypatch.setattr(minhash, "_GROUP_AT_LEAST", 1 << 62)  # every document by itself, a block at a time
    alone = hasher.signatures(sets)
    assert np.array_equal(batch, alone)
    assert (batch[[i for i, size in enumerate(sizes) if size == 0]] == 0xFFFFFFFF).all()
    # Each row is the minimum of the affine maps over the document's own shingles.
    for i in (i for i, size in enumerate(sizes) if size):
        least = np.full(64, 2**32, np.uint64)
        for part in np.array_split(sets[i], max(1, len(sets[i]) // 8192)):
            maps = (part[:, None].astype(np.uint64) * hasher.multipliers + hasher.offsets) % 2**32
            least = np.minimum(least, maps.min(axis=0))
        assert np.array_equal(batch[i], least.astype(np.uint32))


def test_different_seeds_give_different_signatures():
    shingles = np.arange(100, dtype=np.uint32) * np.uint32(2654435761)
    assert not np.array_equal(MinHasher(64, 1).signature(shingles), MinHasher(64, 2).signature(shingles))


def _sets_with_jaccard(rng, size, jaccard):
    inter = int(round(2 * size * jaccard / (1 + jaccard)))
    only = size - inter
    # Even values: shingles of tokens (an odd value is a character n-gram, compared by the rules of its view).
    universe = 2 * rng.choice(2**31 - 1, inter + 2 * only, replace=False).astype(np.uint32)
    a = universe[:size]
    b = np.concatenate([universe[:inter], universe[size:]])
    return a, b, inter / (inter + 2 * only)


@settings(max_examples=30, deadline=None)
@given(st.integers(0, 2**31), st.integers(50, 2000), st.floats(0.05, 0.95))
def test_minhash_estimate_within_expected_error(seed, size, jaccard):
    rng = np.random.default_rng(seed)
    a, b, true = _sets_with_jaccard(rng, size, jaccard)
    hasher = MinHasher(256, seed % 1000)
    estimate = estimate_jaccard(hasher.signature(a), hasher.signature(b))
    sigma = np.sqrt(true * (1 - true) / 256)
    assert abs(estimate - true) <= 5 * sigma + 1e-9


def test_minhash_error_matches_binomial_variance():
    rng = np.random.default_rng(7)
    errors = []
    for _ in range(300):
        a, b, true = _sets_with_jaccard(rng, 300, 0.6)
        hasher = MinHasher(128, int(rng.integers(1000)))
        errors.append(estimate_jaccard(hasher.signature(a), hasher.signature(b)) - true)
    expected = np.sqrt(0.6 * 0.4 / 128)
    assert abs(np.mean(errors)) < 0.01
    assert 0.75 * expected < np.std(errors) < 1.25 * expected


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 250), st.floats(0.0, 1.0))
def test_sketch_jaccard_is_exact_for_small_sets(seed, size, jaccard):
    rng = np.random.default_rng(seed)
    a, b, true = _sets_with_jaccard(rng, size, jaccard)
    sa, _ = bottom_k(a, 256)
    sb, _ = bottom_k(b, 256)
    assert abs(sketch_jaccard(sa, sb, 256) - true) < 1e-9


@settings(max_examples=20, deadline=None)
@given(st.integers(0, 2**31), st.integers(1000, 5000), st.floats(0.3, 0.95))
def test_sketch_jaccard_estimates_large_sets(seed, size, jaccard):
    rng = np.random.default_rng(seed)
    a, b, true = _sets_with_jaccard(rng, size, jaccard)
    estimate = sketch_jaccard(bottom_k(a, 256)[0], bottom_k(b, 256)[0], 256)
    assert abs(estimate - true) <= 5 * np.sqrt(true * (1 - true) / 256) + 1e-9


def test_shingles_of_short_text():
    assert len(shingle_hashes(np.empty(0, np.uint64), 3)) == 0
    one = shingle_hashes(np.array([1, 2], dtype=np.uint64), 3)
    assert len(one) == 1
    assert len(shingle_hashes(np.arange(10, dtype=np.uint64), 3)) == 8


def test_tokenizer_uses_characters_for_chinese_and_words_otherwise():
    t = Tokenizer(3, 2)
    zh = t.stream("今天天气很好 ok")
    assert zh.is_cjk and zh.tokens[:3] == ["今", "天", "天"]
    en = t.stream("hello, big world! 今天")
    assert not en.is_cjk and en.tokens == ["hello", "big", "world", "今", "天"]
    assert len(t.shingles(zh)) == len(zh.tokens) - 1


@st.composite
def _fingerprint_and_neighbour(draw):
    base = draw(u64)
    distance = draw(st.integers(0, 3))
    bits = draw(st.lists(st.integers(0, 63), min_size=distance, max_size=distance, unique=True))
    other = base
    for bit in bits:
        other ^= 1 << bit
    return base, other, distance


@given(_fingerprint_and_neighbour())
def test_block_search_finds_every_fingerprint_within_k(case):
    base, other, distance = case
    assert hamming(base, other) == distance
    shared = [a == b for a, b in zip(block_keys(base, 3), block_keys(other, 3))]
    assert len(shared) == 10 and any(shared)  # pigeonhole: k differing bits leave two of k + 2 blocks whole


@given(u64, st.lists(st.integers(0, 63), min_size=40, max_size=64, unique=True))
def test_block_keys_differ_for_distant_fingerprints(a, bits):
    b = a
    for bit in bits:
        b ^= 1 << bit
    # 40 or more differing bits leave at most 24 equal ones: no 25-bit key can agree
    assert all(x != y for x, y in zip(block_keys(a, 3), block_keys(b, 3)))


@given(st.integers(0, 15))
def test_block_layout_covers_64_bits(distance):
    layout = block_layout(distance)
    assert len(layout) == distance + 2
    assert sum(width for _, width in layout) == 64
    assert layout[0][0] == 0 and all(s2 == s1 + w1 for (s1, w1), (s2, _) in zip(layout, layout[1:]))


def test_simhash_similar_features_are_close():
    rng = np.random.default_rng(3)
    features = rng.integers(0, 2**63, 200, dtype=np.uint64)
    weights = rng.random(200) + 0.5
    a = fingerprint(features, weights)
    b = fingerprint(features[:196], weights[:196])
    c = fingerprint(rng.integers(0, 2**63, 200, dtype=np.uint64), weights)
    assert hamming(a, b) <= 6
    assert hamming(a, c) > 16


@given(st.floats(0.2, 0.95), st.sampled_from([64, 128, 256]))
@settings(max_examples=25, deadline=None)
def test_banding_is_sane(threshold, num_perm):
    banding = optimal_banding(threshold, num_perm)
    assert banding.bands * banding.rows <= num_perm
    # The S-curve rises through the threshold: likely below it to be rare, above it to be found.
    assert banding.probability(min(1.0, threshold + 0.2)) > 0.85
    assert banding.probability(max(0.0, threshold - 0.3)) < 0.35


def test_banding_rows_grow_with_threshold():
    rows = [optimal_banding(t, 128).rows for t in (0.3, 0.5, 0.7, 0.9)]
    assert rows == sorted(rows) and rows[0] < rows[-1]


def _banding_one_shape_at_a_time(threshold, num_perm, fp_weight, fn_weight):
    """optimal_banding as it was first written: each shape's areas measured alone, in order."""
    def area(f, lo, hi):
        x = np.linspace(lo, hi, 512)
        y = f(x)
        return float(np.sum((y[1:] + y[:-1]) * np.diff(x)) / 2.0)

    best, best_error = Banding(1, num_perm), float("inf")
    for bands in range(1, num_perm + 1):
        for rows in range(1, num_perm // bands + 1):
            banding = Banding(bands, rows)
            error = (fp_weight * area(banding.probability, 0.0, threshold)
                     + fn_weight * area(lambda s, shape=banding: 1.0 - shape.probability(s), threshold, 1.0))
            if error < best_error - 1e-12:
                best, best_error = banding, error
    return best


@pytest.mark.parametrize("num_perm", [16, 100, 128, 256])
def test_banding_scored_in_arrays_is_the_banding_scored_one_at_a_time(num_perm):
    for threshold in (0.1, 0.35, 0.5, 0.8, 0.95):
        for weights in ((lsh.FALSE_POSITIVE_WEIGHT, lsh.FALSE_NEGATIVE_WEIGHT), (0.5, 0.5)):
            expected = _banding_one_shape_at_a_time(threshold, num_perm, *weights)
            assert optimal_banding(threshold, num_perm, *weights) == expected


def test_band_keys_agree_only_where_bands_agree():
    rng = np.random.default_rng(5)
    sig = rng.integers(0, 2**32, (1, 128), dtype=np.uint64).astype(np.uint32)
    other = sig.copy()
    other[0, 0] ^= 1  # change band 0 only
    banding = Banding(16, 8)
    a, b = band_keys(sig, banding)[0], band_keys(other, banding)[0]
    assert a[0] != b[0] and np.array_equal(a[1:], b[1:])
    assert band_keys(sig, banding).dtype == np.int64


# --- fast paths give what the plain ones give ----------------------------------------------------

_ascii_text = st.lists(
    st.sampled_from(list("abcdefghijklmnopqrstuvwxyz0123456789_ .,;:!?'\"()-\t\n") + ["rt", " rt ", "rt_", "3rt"]),
    max_size=120,
).map("".join)
_mixed_text = st.lists(
    st.sampled_from(["the", "cat", "sat", " ", ", ", "rt", "今", "天", "好", "@bob ", "#tag ", "http://x.io/a ", "é"]),
    max_size=60,
).map("".join)


@settings(max_examples=300, deadline=None)
@given(_ascii_text)
def test_ascii_tokens_hash_like_the_regex_path(text):
    from dedupdb.text.tokens import REPOST_NOISE, _TOKEN, token_hashes

    fast = Tokenizer(2, 2).stream(text)  # ASCII without noise marks: bytes.translate and split
    slow_tokens = _TOKEN.findall(REPOST_NOISE.sub(" ", text))
    slow = token_hashes(slow_tokens)
    assert [t.decode() for t in fast.tokens] == slow_tokens
    assert fast.hashes.tolist() == slow.tolist()


_noisy_text = st.lists(
    st.one_of(st.sampled_from(["rt", "RT", "art", "@", "#", "/", "//", "//@", "http://", "https://", "www.", "w", "h",
                               "r", "t", "转", "转发", "转发微博", "回复", "回复@", ":", "：", ".", " ", "\n", "a", "中", "_", "1"]),
              st.text(max_size=3)),
    max_size=40,
).map("".join)


@settings(max_examples=400, deadline=None)
@given(_noisy_text)
def test_repost_noise_lookahead_finds_what_the_alternatives_alone_find(text):
    """The lookahead before the alternatives (a matter of speed) changes no match."""
    import re

    from dedupdb.text.tokens import REPOST_NOISE, REPOST_NOISE_ALTERNATIVES

    plain = re.compile(REPOST_NOISE_ALTERNATIVES)
    assert [m.span() for m in REPOST_NOISE.finditer(text)] == [m.span() for m in plain.finditer(text)]
    assert REPOST_NOISE.sub(" ", text) == plain.sub(" ", text)


def test_text_with_noise_marks_takes_the_regex_path():
    t = Tokenizer(2, 2)
    assert t.stream("see https://example.com/x now @bob #tag rt done").tokens == ["see", "now", "done"]
    assert t.stream("a rt b").hashes.tolist() == t.stream("a b").hashes.tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**32 - 1), max_size=300))
def test_distinct_matches_numpy_unique(values):
    from dedupdb.text.hashing import distinct, distinct_counts

    array = np.array(values, dtype=np.uint32)
    assert distinct(array).tolist() == np.unique(array).tolist()
    found, counts = distinct_counts(array)
    expected, expected_counts = np.unique(array, return_counts=True)
    assert found.tolist() == expected.tolist() and counts.tolist() == expected_counts.tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 2**31 - 1).map(lambda v: 2 * v), max_size=80, unique=True),
       st.lists(st.integers(0, 2**31 - 1).map(lambda v: 2 * v), max_size=80, unique=True), st.integers(1, 64))
def test_sketch_jaccard_is_exact_for_small_sets_and_agrees_with_sets(a, b, k):
    sa, sb = np.array(sorted(a), dtype=np.uint32), np.array(sorted(b), dtype=np.uint32)
    got = sketch_jaccard(bottom_k(sa, k)[0], bottom_k(sb, k)[0], k)
    if not a or not b:
        assert got == 0.0
        return
    union = sorted(set(a) | set(b))[:k]
    sketch_a, sketch_b = set(sorted(a)[:k]), set(sorted(b)[:k])
    if len(a) < k and len(b) < k:
        union = sorted(set(a) | set(b))
    expected = sum(1 for x in union if x in sketch_a and x in sketch_b) / len(union)
    assert abs(got - expected) < 1e-12
    if len(a) < k and len(b) < k:
        assert abs(got - len(set(a) & set(b)) / len(set(a) | set(b))) < 1e-12


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(1, 200), min_size=1, max_size=12), st.integers(0, 2**31))
def test_batch_simhash_equals_one_at_a_time(lengths, seed):
    from dedupdb.sketch.simhash import fingerprints

    rng = np.random.default_rng(seed)
    features = rng.integers(0, 2**64, sum(lengths), dtype=np.uint64)
    weights = rng.integers(1, 20, sum(lengths)).astype(np.float64)  # whole weights, ties included
    bounds = np.cumsum([0] + lengths)
    one_by_one = [fingerprint(features[a:b], weights[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    assert fingerprints(features, weights, lengths) == one_by_one


def test_minhash_of_long_texts_spans_chunks():
    from dedupdb.sketch import minhash

    hasher = MinHasher(64, 3)
    shingles = np.unique(np.random.default_rng(5).integers(0, 2**32, 3 * minhash._CHUNK_SHINGLES + 7).astype(np.uint32))
    expected = (shingles[:, None].astype(np.uint64) * hasher.multipliers.astype(np.uint64) + hasher.offsets) % 2**32
    assert hasher.signature(shingles).tolist() == expected.min(axis=0).astype(np.uint32).tolist()


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(_ascii_text, _mixed_text), max_size=8), st.integers(1, 3), st.integers(1, 3),
       st.integers(0, 5))
def test_batch_shingles_and_word_counts_equal_one_text_at_a_time(texts, word_ngram, cjk_ngram, char_ngram):
    from dedupdb.text.hashing import distinct, distinct_counts

    tokenizer = Tokenizer(word_ngram, cjk_ngram, char_ngram)
    batch = tokenizer.batch(texts)
    shingle_sets = tokenizer.shingle_sets(batch)
    word_counts = tokenizer.word_counts(batch)
    for i, text in enumerate(texts):
        stream = tokenizer.stream(text)
        assert batch.count(i) == len(stream.tokens) and batch.is_cjk(i) == stream.is_cjk
        assert shingle_sets[i].tolist() == distinct(tokenizer.shingles(stream)).tolist()
        expected = distinct_counts(stream.hashes)
        assert word_counts[i][0].tolist() == expected[0].tolist()
        assert word_counts[i][1].tolist() == expected[1].tolist()


def test_idf_counts_each_document_once_per_bucket():
    from dedupdb.text.weights import DF_BUCKETS, CorpusIdf, word_buckets

    rng = np.random.default_rng(3)
    documents = [np.unique(rng.integers(0, 2**64, int(n), dtype=np.uint64)) for n in rng.integers(1, 300, 50)]
    documents.append(documents[0])  # the same words again
    documents.append(np.array([5, 5 + DF_BUCKETS, 6], dtype=np.uint64))  # two distinct words, one bucket
    expected = np.zeros(DF_BUCKETS, np.uint32)
    for words in documents:
        expected[sorted({int(w) % DF_BUCKETS for w in words})] += 1
    buckets = word_buckets(documents)
    assert [b.tolist() for b in buckets] == [sorted({int(w) % DF_BUCKETS for w in d}) for d in documents]
    idf = CorpusIdf()
    idf.observe(buckets[:10])
    idf.observe(word_buckets(documents[10:]))
    assert idf.documents == len(documents)
    assert np.array_equal(idf.df, expected)
    assert idf.df[5] == 1 + sum(5 in {int(w) % DF_BUCKETS for w in d} for d in documents[:-1])


def test_word_table_is_loaded_only_when_a_text_long_enough_for_simhash_needs_it(tmp_path, db_path):
    """SimHash weighs words by a fixed table (weights.py): a query too short for SimHash never loads it, and a
    text's SimHash is the same whatever the store holds."""
    import dedupdb

    rng = np.random.default_rng(5)
    long_texts = [" ".join(f"w{int(i)}" for i in rng.integers(0, 400, 150)) for _ in range(4)]
    for i, text in enumerate(long_texts):
        (tmp_path / f"{i}.txt").write_text(text)
    code = (
        "import sys, dedupdb; from dedupdb.text import weights; db = dedupdb.open(sys.argv[1], create=False); "
        "db.query('a short question of a few words'); assert weights._word_table.cache_info().currsize == 0; "
        "hits = db.query(sys.argv[2]); assert weights._word_table.cache_info().currsize == 1; "
        "print(hits[0].key, hits[0].hamming)"
    )
    with dedupdb.open(db_path) as db:
        db.add([tmp_path / f"{i}.txt" for i in range(3)])
        alone = {cid: simhash for cid, simhash in db.store.conn.execute("SELECT id, simhash FROM contents")}
    query = long_texts[0] + " and a few words more"
    answer = subprocess.run([sys.executable, "-c", code, str(db_path), query], capture_output=True, text=True)
    assert answer.returncode == 0, answer.stderr
    key, hamming = answer.stdout.split()
    assert key == str(tmp_path / "0.txt") and int(hamming) <= 3  # its SimHash weighs its words alike
    with dedupdb.open(db_path) as db:
        db.add([tmp_path / "3.txt"])
        after = {cid: simhash for cid, simhash in db.store.conn.execute("SELECT id, simhash FROM contents")}
    assert all(v is not None for v in alone.values()) and {c: after[c] for c in alone} == alone


def test_chinese_idf_is_read_without_jieba_analyse():
    """jieba.analyse builds its own IDF table and a part-of-speech tagger on import (65 MB per process)."""
    import subprocess
    import sys

    code = (
        "import sys; from dedupdb.text.tokens import jieba_idf; t, m = jieba_idf(); "
        "assert len(t) > 200000 and 0 < m < 20; "
        "assert 'jieba.analyse' not in sys.modules and 'jieba.posseg' not in sys.modules"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_chinese_idf_from_its_compact_table_is_jieba_idf_word_for_word(tmp_path, monkeypatch):
    """The table kept as word hashes gives every word of jieba's table its IDF and any other word the median, when
    derived and when read back from the cache folder."""
    import numpy as np

    from dedupdb.text import tokens, weights

    monkeypatch.setattr("dedupdb.config.cache_dir", lambda: tmp_path)
    table, median = tokens.jieba_idf()
    words = list(table) + ["不存在的词语甲乙", "qwertyuiop", "的"]
    expected = np.array([table.get(w, median) for w in words])
    weights._chinese_table.cache_clear()
    try:
        assert np.array_equal(weights.chinese_idf(weights.chinese_word_hashes(words)), expected)
        assert list(tmp_path.glob("jieba-idf-*.npy"))
        weights._chinese_table.cache_clear()
        assert np.array_equal(weights.chinese_idf(weights.chinese_word_hashes(words)), expected)
        for kept in tmp_path.glob("jieba-idf-*.npy"):  # an empty file there (a crash mid-write): derived again
            kept.write_bytes(b"")
        weights._chinese_table.cache_clear()
        assert np.array_equal(weights.chinese_idf(weights.chinese_word_hashes(words)), expected)
        assert all(kept.stat().st_size for kept in tmp_path.glob("jieba-idf-*.npy"))
    finally:
        weights._chinese_table.cache_clear()


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 2**31 - 1).map(lambda v: 2 * v), max_size=120, unique=True), st.integers(0, 120),
       st.integers(0, 120), st.integers(1, 80))
def test_sketch_overlap_counts_shared_shingles_like_sets(values, common, only_a, k):
    """Sets built to overlap (token n-grams: even hashes): the whole-set shortcut and the sampled path both give
    what the sets say."""
    from dedupdb.sketch.minhash import sketch_overlap

    a = values[: common + only_a]
    b = values[:common] + values[common + only_a :]
    sketch_a, sketch_b = bottom_k(np.array(sorted(a), np.uint32), k)[0], bottom_k(np.array(sorted(b), np.uint32), k)[0]
    jaccard, shared = sketch_overlap(sketch_a, sketch_b, k)
    if not a or not b:
        assert (jaccard, shared) == (0.0, 0)
        return
    whole = len(a) < k and len(b) < k
    union = sorted(set(a) | set(b)) if whole else sorted(set(a) | set(b))[:k]
    in_both = [x for x in union if x in set(sketch_a.tolist()) and x in set(sketch_b.tolist())]
    assert shared == len(in_both) and jaccard == len(in_both) / len(union)


def test_batch_simhash_in_parts_equals_one_at_a_time(monkeypatch):
    from dedupdb.sketch import simhash

    monkeypatch.setattr(simhash, "_TEXTS_AT_ONCE", 3)
    rng = np.random.default_rng(9)
    lengths = [int(n) for n in rng.integers(1, 90, 11)]
    features = rng.integers(0, 2**64, sum(lengths), dtype=np.uint64)
    weights = rng.random(sum(lengths)) * 5
    bounds = np.cumsum([0] + lengths)
    one_by_one = [fingerprint(features[a:b], weights[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    assert simhash.fingerprints(features, weights, lengths) == one_by_one


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=200))
def test_distinct_first_counts_matches_numpy_unique(values):
    from dedupdb.text.hashing import distinct_first_counts

    array = np.array(values, dtype=np.uint64)
    got = distinct_first_counts(array)
    expected = np.unique(array, return_index=True, return_counts=True)
    assert all(g.tolist() == e.tolist() for g, e in zip(got, expected))


def test_character_views_compare_below_the_lower_of_the_two_limits():
    """Whole sets compare their character n-grams (odd hashes) below the lower of the two views' limits (told by
    the number of token n-grams, even hashes), so a text keeping more of its character n-grams (fewer tokens)
    compares with a longer one by the same share."""
    from dedupdb.sketch.minhash import view_limit, view_overlap
    from dedupdb.text.tokens import CHAR_VIEW_FULL, char_view_limit

    short = list(range(0, 2 * CHAR_VIEW_FULL, 2))   # 16 token n-grams: a text of 17 tokens
    longer = short + [100, 102, 104]                 # the same with three words more
    low, high = char_view_limit(CHAR_VIEW_FULL + 4), char_view_limit(CHAR_VIEW_FULL + 1)
    chars = [1, 3, low - 1, low + 1, high - 1]       # the shorter text's character n-grams, up to its limit
    a = np.array(sorted(short + chars), np.uint32)
    b = np.array(sorted(longer + chars[:3]), np.uint32)  # the longer text keeps those below its lower limit
    assert (view_limit(a), view_limit(b)) == (high, low)
    assert view_overlap(a, b, 1024) == (19 / 22, 19, 22)  # its three new words alone differ
    c = np.array(short, np.uint32)  # no character view: token n-grams alone
    assert view_limit(c) == 0 and view_overlap(a, c, 1024) == (1.0, 16, 16)
    assert view_overlap(a, b, 4)[2] == 4  # sketches of more than k: the sampled union, as it is


def test_the_shipped_word_table_is_the_one_the_installed_lists_give():
    """The package ships the SimHash word table (weights.SHIPPED_TABLES) so that no process derives it; it must be
    what the lists of the pyspellchecker installed give, entry for entry. After the dependency moves, run
    scripts/derive_word_weights.py."""
    from dedupdb.text import weights

    shipped = np.load(weights.SHIPPED_TABLES / weights.word_table_name(), allow_pickle=False)
    derived = weights._derived_table()
    assert shipped.dtype == derived.dtype and len(shipped) == len(derived)
    assert np.array_equal(shipped["hash"], derived["hash"])
    # Within a few units of the last place: numpy's log may differ by one between machines and releases (its SIMD
    # paths), which is why the table is shipped, not derived where it is used.
    assert np.allclose(shipped["weight"], derived["weight"], rtol=1e-13, atol=0)


def test_the_shipped_word_table_is_taken_before_the_cache_folder(tmp_path, monkeypatch):
    """A table left in the cache folder by another version of the code is not what the weights are: the shipped
    one is taken first."""
    from dedupdb.text import weights

    stale = np.zeros(3, [("hash", "<u8"), ("weight", "<f8")])
    stale["hash"] = [1, 2, 3]
    monkeypatch.setattr("dedupdb.config.cache_dir", lambda: tmp_path)
    np.save(tmp_path / weights.word_table_name(), stale, allow_pickle=False)
    weights._word_table.cache_clear()
    try:
        keys, _ = weights._word_table()
        assert len(keys) > 100_000
        monkeypatch.setattr(weights, "SHIPPED_TABLES", tmp_path / "none")
        weights._word_table.cache_clear()
        keys, _ = weights._word_table()
        assert keys.tolist() == [1, 2, 3]  # without a shipped table, the cache folder's
    finally:
        weights._word_table.cache_clear()


# Texts where jieba-rs alone, filtered as jieba's words are, would not give jieba's words: a range and marks cut
# apart ("60-70", "mr.big", "2.0ghz"), words of the dictionary with marks ("c#", "c++"), a rarer ideograph that
# jieba does not take as Han ("𠀀"), and underscores, which jieba keeps.
JIEBA_LIKE = [
    "价格在60-70元之间,mr.big的2.0ghz处理器打3.5%的折扣,详情见t.cn/abc",
    "他用c#和c++写程序,check-out在12:00",
    "字𠀀-号与㐀字相连,这人𠀀-出了",
    "这是我第1次给全五星哦^_^超级快!__下次再来",
    "今天天气很好,我们一起去公园散步,看到很多人在湖边钓鱼,孩子们在草地上放风筝,大家都很开心。",
]


def test_chinese_words_are_the_words_jieba_gives():
    """chinese_words segments with jieba-rs, jieba_words with jieba's own Python code (stores of algorithm 6):
    the same words, in the same order, where jieba-rs's own tokens would differ."""
    import rjieba

    from dedupdb.text import tokens
    from dedupdb.text.normalize import normalize

    for text in JIEBA_LIKE:
        normalized = normalize(text)
        assert tokens.chinese_words(normalized) == tokens.jieba_words(normalized), text
    # jieba-rs's own tokens differ on the first three; the fourth keeps jieba's underscores through the cut
    plain = [[w for w in rjieba.cut(normalize(t)) if tokens._JIEBA_WORD.search(w)] for t in JIEBA_LIKE[:3]]
    assert all(p != tokens.jieba_words(normalize(t)) for p, t in zip(plain, JIEBA_LIKE))


def test_the_segmenter_is_chosen_by_the_stores_algorithm(monkeypatch):
    """A store of algorithm 6 goes on with jieba's Python segmenting, so that its fingerprints stay its own; one of
    algorithm 7 takes jieba-rs. Both give the SimHash jieba's words give."""
    from dedupdb.config import Settings
    from dedupdb.sketch import fingerprint
    from dedupdb.sketch.fingerprint import Sketcher
    from dedupdb.text.normalize import normalize

    used = []
    for name in ("chinese_words", "jieba_words"):
        real = getattr(fingerprint, name)
        monkeypatch.setattr(fingerprint, name, lambda text, real=real, name=name: used.append(name) or real(text))
    text = normalize("".join(JIEBA_LIKE) * 2)
    old, new = (Sketcher(Settings(algorithm=a)).sketch([text])[0] for a in (6, 7))
    assert used == ["jieba_words", "chinese_words"]
    # The value the code of algorithm 6 gave (90a5609): segmenting, the words' hashes and their IDF all unchanged.
    assert old.simhash == new.simhash == 5913880838328548872


@settings(max_examples=200, deadline=None)
@given(st.lists(st.integers(0, 40), max_size=60), st.lists(st.integers(0, 45), max_size=60), st.booleans())
def test_spans_are_searchsorted_left_and_right_in_the_needles_order(haystack, needles, sort_needles):
    from dedupdb.text.hashing import spans

    hay = np.sort(np.array(haystack, np.uint64))
    wanted = np.array(sorted(needles) if sort_needles else needles, np.uint64)
    lows, sizes = spans(hay, wanted)
    assert lows.tolist() == np.searchsorted(hay, wanted, "left").tolist()
    assert (lows + sizes).tolist() == np.searchsorted(hay, wanted, "right").tolist()


def test_index_keys_hash_each_column_with_its_slot():
    """Every index key a store holds is its slot's mix and its value, hashed (column_slot_hash): written out here
    in Python's integers, and for two keys as stored, so that a store's keys never move."""
    from dedupdb.storage.entries import INDEX_KEY_BITS
    from dedupdb.text.hashing import FMIX_C1, FMIX_C2, column_slot_hash

    mask, slot_mult = (1 << 64) - 1, 0x9E3779B97F4A7C15

    def fmix(x: int) -> int:
        x ^= x >> 33
        x = (x * int(FMIX_C1)) & mask
        x ^= x >> 33
        x = (x * int(FMIX_C2)) & mask
        return x ^ (x >> 33)

    rng = np.random.default_rng(5)
    keys = rng.integers(0, 2**64, (7, 53), dtype=np.uint64)
    for first in (0, 1024):
        expected = [[fmix(key ^ fmix(((first + j + 1) * slot_mult) & mask)) >> (64 - INDEX_KEY_BITS)
                     for j, key in enumerate(row)] for row in keys.tolist()]
        assert column_slot_hash(keys, first, INDEX_KEY_BITS).tolist() == expected
    pinned = column_slot_hash(np.array([[12345, 2**63 + 7]], np.uint64), 0, INDEX_KEY_BITS)
    assert pinned.tolist() == [[621399512, 1388178590]]

