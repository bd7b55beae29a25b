"""The compiled sketching path (fastsketch.py) gives exactly what Sketcher's numpy path gives."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from itertools import accumulate, pairwise
from pathlib import Path

import numpy as np
import pytest
import xxhash
from hypothesis import HealthCheck, given, settings as hypothesis_settings, strategies as st

pytest.importorskip("numba")

from dedupdb.sketch import fastsketch  # noqa: E402
from dedupdb.sketch import fingerprint as fingerprint_module
from dedupdb.sketch import simhash
from dedupdb.config import Settings  # noqa: E402
from dedupdb.sketch.fingerprint import Sketch, Sketcher  # noqa: E402
from dedupdb.text.normalize import normalize  # noqa: E402

EVAL = Path(__file__).resolve().parent.parent.parent / "shared" / "eval"
OTHER_SETTINGS = Settings(word_ngram=3, cjk_ngram=1, containment_ngram=2, winnow_window=5, num_perm=64, sketch_size=16)

EDGE_CASES = [
    "", " ", "a", "rt", "rt rt", "x rt y", "rt_x rt2 art rt", "covid19 and 2020 and ld2d", "10/10", "3.14", "1,000,000",
    "@user hello there", "@裤腿太小 不是很好@裤腿太小.码数", "#tag# 内容 #topic", "#hashtag and #1 and a#b",
    "// 转发 @某人: 文字 转发微博", "http://example.com/a?b=c see https://x.y www.site.org here",
    "reply//@someone: text //@other: more", "RT rt Rt", "回复@张三:好的", "mail me at a@b.com ok",
    "😀 emoji 😀😀 text", "\U00020000\U00020001\U0002a6d6 ext", "𝐀𝐁 math", "١٢٣ arabic digits ٤", "x² ½ ⅓ numbers",
    "２０２０年 full width", "a_b _ __ _x", "e\u0301 combining", "ﬁ ligature", "hello 世界 world 你好 mixed", "한국어 텍스트 입니다",
    "ひらがな カタカナ", "Ελληνικά κείμενο", "русский текст 42", "עברית", "ไทย", "x" * 40 + " long token " + "y" * 100,
    "1234567890" * 5, "word " * 50, "word other " * 3000, " ".join(f"w{i % 2600}" for i in range(7000)),
    "中" * 3, "中文", "短", "一二", "a b", "a b c",
    "\u3000\u3040\u30ff\u3400\u4dbf\u9fff\uf900\ufaff\uac00\ud7af",
    "\U0002ffff\U00030000 edges", "tab\tnew\nline", "\x00 control \x1f chars",
]


def python_sketcher(settings: Settings) -> Sketcher:
    sketcher = Sketcher(settings)
    sketcher.FAST_BATCH = 1 << 62  # never the compiled path
    return sketcher


def fast_sketcher(settings: Settings) -> Sketcher:
    sketcher = Sketcher(settings)
    sketcher.FAST_AFTER_SECONDS = 0.0
    sketcher._parts = None  # the numpy path would fail: a batch must take the compiled one
    return sketcher


def assert_same_sketches(a: list[Sketch], b: list[Sketch]) -> None:
    assert len(a) == len(b)
    for x, y in zip(a, b):
        for name in ("content_hash", "chars", "shingles", "simhash", "tokens"):
            assert getattr(x, name) == getattr(y, name), name
        for name in ("minhash", "sketch", "fingerprints"):
            u, v = getattr(x, name), getattr(y, name)
            assert u.dtype == v.dtype and np.array_equal(u, v), name
        assert (x.words is None) == (y.words is None)
        if x.words is not None:
            for u, v in zip(x.words, y.words):
                assert u.dtype == v.dtype and np.array_equal(u, v)


def assert_same(texts: list[str], settings: Settings = Settings()) -> None:
    """Whole sketches from the compiled path (a batch) equal those of the numpy path."""
    assert len(texts) >= Sketcher.FAST_BATCH
    assert_same_sketches(python_sketcher(settings).sketch(texts), fast_sketcher(settings).sketch(texts))


def assert_same_parts(texts: list[str], settings: Settings) -> None:
    """What the two paths compute per text, compared without the parts both share (content hash, jieba)."""
    s = settings
    sketcher = Sketcher(s)
    expected = sketcher._parts(texts)
    got = fastsketch.sketch_parts(texts, s.word_ngram, s.cjk_ngram, s.char_ngram, s.containment_ngram,
                                  s.winnow_window, sketcher.minhasher.multipliers, sketcher.minhasher.offsets)
    shingles, signatures, words, prints, tokens, cjk, buckets = expected
    assert got[4] == tokens and got[5] == cjk
    assert got[1].dtype == signatures.dtype and np.array_equal(got[1], signatures)
    for i in range(len(texts)):
        for u, v in ((shingles[i], got[0][i]), (prints[i], got[3][i])):
            assert u.dtype == v.dtype and np.array_equal(u, v), texts[i]
        if tokens[i] and not cjk[i]:
            for u, v in zip((*words[i], buckets[i]), (*got[2][i], got[6][i])):
                assert u.dtype == v.dtype and np.array_equal(u, v), texts[i]
        else:
            assert got[2][i] is None and got[6][i] is None and buckets[i] is None


def corpus(name: str, n: int) -> list[str]:
    path = EVAL / name
    if not path.exists():
        pytest.skip(f"{path} missing")
    texts = []
    with gzip.open(path, "rt", encoding="utf-8") as lines:
        for line in lines:
            texts.append(normalize(json.loads(line)["text"]))
            if len(texts) == n:
                break
    return texts


@pytest.mark.parametrize("name, n", [
    ("en_imdb_aclImdb.jsonl.gz", 400), ("en_reuters21578.jsonl.gz", 400),
    ("zh_sophonplus_reviews.jsonl.gz", 300), ("zh_thucnews_titles_devtest.jsonl.gz", 300),
])
def test_real_text_sketches_alike(name, n):
    texts = corpus(name, n)
    assert_same(texts)
    assert_same_parts(texts, OTHER_SETTINGS)


def test_edge_cases_sketch_alike():
    texts = [normalize(t) for t in EDGE_CASES] + EDGE_CASES  # as stored, and raw: any str gives the same
    assert_same(texts)
    for settings in (Settings(word_ngram=1, cjk_ngram=1, containment_ngram=1, winnow_window=1), OTHER_SETTINGS,
                     Settings(word_ngram=10, cjk_ngram=10, containment_ngram=10, winnow_window=64),
                     Settings(char_ngram=0), Settings(char_ngram=1), Settings(char_ngram=10)):
        assert_same_parts(texts, settings)


def test_every_code_point_tokenizes_alike():
    """Each code point alone, and runs of them, against the regex (the table covers all of Unicode)."""
    points = [c for c in range(1, 0x110000) if not 0xD800 <= c <= 0xDFFF]
    step = 20_000
    alone = [" ".join(map(chr, points[i : i + step])) for i in range(0, len(points), step)]
    runs = ["".join(map(chr, points[i : i + step])) for i in range(0, len(points), step)]
    assert_same_parts(alone + runs, Settings(word_ngram=1, cjk_ngram=1, containment_ngram=1, winnow_window=1))
    assert_same_parts(alone + runs, Settings(char_ngram=3))


_PIECES = st.sampled_from([
    " ", "  ", "rt", "RT", "@", "#", "/", "//", ":", ".", ",", "_", "http://", "www.", "转发", "回复", "微博", "a", "b",
    "7", "42", "٣", "²", "中", "文", "あ", "한", "\U00020000", "😀", "é", "ß", "\u0301", "\t", "，", "：", "！",
])
_TEXT = st.lists(st.one_of(_PIECES, st.text(max_size=4)), max_size=30).map("".join)


@hypothesis_settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(texts=st.lists(_TEXT, min_size=1, max_size=12), word_ngram=st.integers(1, 4), cjk_ngram=st.integers(1, 4),
       char_ngram=st.integers(0, 6), containment_ngram=st.integers(1, 5), winnow_window=st.integers(1, 10))
def test_random_text_sketches_alike(texts, word_ngram, cjk_ngram, char_ngram, containment_ngram, winnow_window):
    settings = Settings(word_ngram=word_ngram, cjk_ngram=cjk_ngram, char_ngram=char_ngram,
                        containment_ngram=containment_ngram, winnow_window=winnow_window, num_perm=16)
    assert_same_parts(texts, settings)
    assert_same_parts([normalize(t) for t in texts], settings)


def test_xxh64_matches_xxhash():
    """Both compiled xxh64s give xxhash's numbers: the whole one, and the short one of a character or a digit."""
    rng = np.random.default_rng(5)
    data = rng.integers(0, 256, 300, dtype=np.uint8)
    data.flags.writeable = False
    for length in [*range(0, 80), 127, 128, 200]:
        for seed in (0, 0x5EED, 2**64 - 1):
            start = int(rng.integers(0, 300 - length + 1))
            expected = xxhash.xxh64_intdigest(data[start : start + length].tobytes(), seed)
            assert int(fastsketch.xxh64(data, start, length, np.uint64(seed))) == expected
            if length < 8:  # a character or a digit's own hash
                assert int(fastsketch.xxh64_short(data, start, length, np.uint64(seed))) == expected


@hypothesis_settings(max_examples=300, deadline=None)
@given(text=_TEXT)
def test_texts_skipping_the_repost_regex_hold_no_noise(text):
    """The cheap checks that spare most texts the regex never skip one it would change."""
    from dedupdb.text.tokens import REPOST_NOISE

    assert fastsketch._has_rt(text) == bool(re.search(r"\brt\b", text))
    if not any(mark in text for mark in fastsketch._NOISE_MARKS) and not fastsketch._has_rt(text):
        assert REPOST_NOISE.search(text) is None


def watched_batches(monkeypatch) -> list[list[str]]:
    """The batches the compiled sketching is given from now on, each a list of its texts."""
    given = []
    original = fastsketch.sketch_parts

    def watched(texts, *args):
        given.append(list(texts))
        return original(texts, *args)

    monkeypatch.setattr(fastsketch, "sketch_parts", watched)
    return given


def test_batches_take_the_compiled_path_and_single_texts_once_earned(monkeypatch):
    batches = watched_batches(monkeypatch)

    def calls() -> list[int]:
        return [len(batch) for batch in batches]

    sketcher = Sketcher(Settings())
    texts = [f"text number {i} with some words" for i in range(Sketcher.FAST_BATCH)]
    batch = sketcher.sketch(texts)  # fastsketch is loaded (imported above): taken at once
    assert calls() == [len(texts)]
    single = sketcher.sketch(texts[:1])
    assert calls() == [len(texts)]  # unchanged: one text stays on numpy
    assert_same_sketches(single, batch[:1])

    # Not loaded yet: texts go to numpy until they have taken FAST_AFTER_SECONDS there, single texts counted too;
    # then single texts take the compiled path as well.
    monkeypatch.delitem(sys.modules, "dedupdb.sketch.fastsketch")
    patient = Sketcher(Settings())
    patient.FAST_AFTER_SECONDS = 3600.0
    assert_same_sketches(patient.sketch(texts), batch)
    assert calls() == [len(texts)]
    patient.FAST_AFTER_SECONDS = 1e-9
    assert_same_sketches(patient.sketch(texts[:1]), batch[:1])
    assert calls() == [len(texts), 1]


def test_a_long_text_takes_numpys_path_by_itself_and_a_refused_reservation_falls_back_to_it(monkeypatch):
    """The compiled kernel reserves room for its batch's longest text (some 88 bytes a byte): a text longer than
    LONG_TEXT_CHARS is sketched on numpy's path by itself, the others of its batch compiled, in their order; and a
    kernel whose reservation is refused (MemoryError, a limited address space) leaves the batch to numpy's path.
    The sketches are those of either path throughout."""
    texts = [normalize(t) for t in EDGE_CASES]
    expected = python_sketcher(Settings()).sketch(texts)
    given = watched_batches(monkeypatch)
    sketcher = Sketcher(Settings())
    sketcher.LONG_TEXT_CHARS = 200
    long = [t for t in texts if len(t) > 200]
    assert 2 <= len(long) < len(texts) - Sketcher.FAST_BATCH
    assert_same_sketches(sketcher.sketch(texts), expected)
    assert given == [[t for t in texts if len(t) <= 200]]  # one compiled batch, no long text in it

    def refused(batch, *args):
        raise MemoryError("Allocation failed (probably too large).")

    monkeypatch.setattr(fastsketch, "sketch_parts", refused)
    assert_same_sketches(Sketcher(Settings()).sketch(texts), expected)


def test_without_numba_the_numpy_path_serves(monkeypatch):
    texts = [normalize(t) for t in EDGE_CASES]
    expected = Sketcher(Settings()).sketch(texts)
    monkeypatch.setattr(Sketcher, "_fast", staticmethod(lambda: None))
    assert_same_sketches(Sketcher(Settings()).sketch(texts), expected)


def test_numba_is_loaded_once_numpy_has_taken_as_long():
    """Neither a single text (a cold query) nor a batch loads numba in a process that has spent less than
    FAST_AFTER_SECONDS sketching with numpy; once it has, single texts (a process answering many queries) take
    the compiled path too."""
    code = """if True:
        import sys
        from dedupdb.config import Settings
        from dedupdb.sketch.fingerprint import Sketcher
        sketcher = Sketcher(Settings())
        texts = [f"text number {i} of a small batch" for i in range(Sketcher.FAST_BATCH)]
        sketcher.sketch(texts[:1])
        sketcher.sketch(texts)
        print("numba" in sys.modules)
        sketcher.FAST_AFTER_SECONDS = 0.0
        sketcher.sketch(texts[:1])
        print("numba" in sys.modules)
        other = Sketcher(Settings())  # loaded now: a batch takes it at once, a single text once it has earned it
        other.sketch(texts[:1])
        spent = other._numpy_seconds
        print(spent > 0)
        other.sketch(texts)
        print(other._numpy_seconds == spent)
    """
    root = Path(__file__).resolve().parent.parent
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root,
                         env={**os.environ, "PYTHONPATH": str(root)})
    assert out.stdout.split() == ["False", "True", "True", "True"]


@hypothesis_settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["a", "b", ",", " ", "  ", "   "]), max_size=12).map("".join), min_size=1, max_size=12))
def test_collapse_spaces_matches_splitting_and_joining(lines):
    """The compiled pass over ASCII lines joined by newlines gives " ".join(line.split()) of each."""
    data = "\n".join(lines).encode("ascii")
    collapsed = fastsketch.collapse_spaces(np.frombuffer(data, np.uint8)).tobytes().decode("ascii")
    assert collapsed.split("\n") == [" ".join(line.split()) for line in lines]


@hypothesis_settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from(list("ab /.@#w") + ["www.", "//", "\u8f6c\u53d1"]), max_size=8).map("".join),
                max_size=12))
def test_marked_texts_are_those_holding_a_mark(texts):
    marks = ("@", "#", "//", "www.")
    encoded = [t.encode("utf-8") for t in texts]
    starts = list(accumulate((len(e) + 1 for e in encoded), initial=0))
    found = fastsketch._marked(b"\n".join(encoded), starts, tuple(m.encode("ascii") for m in marks))
    assert found == {i for i, t in enumerate(texts) if any(m in t for m in marks)}


@hypothesis_settings(max_examples=60, deadline=None)
@given(bits=st.sampled_from([1, 8, 20, 32, 64]), n=st.sampled_from([1, 2, 3, 255, 256, 2047, 2048, 2049, 5000]),
       seed=st.integers(0, 1000), crowded=st.booleans())
def test_sorting_matches_numpy(bits, n, seed, crowded):
    """The kernel's sort, both ways (few values, by buckets; many, by bytes), on values spread evenly and on
    values crowded into a few buckets (repeats, and neighbours sharing their top bits)."""
    rng = np.random.default_rng(seed)
    values = rng.integers(0, 1 << bits, n, dtype=np.uint64) if bits < 64 else rng.integers(0, 1 << 63, n, dtype=np.uint64) * np.uint64(2)
    if crowded:
        values = values[rng.integers(0, min(4, n), n)] | (rng.integers(0, 4, n, dtype=np.uint64) if bits > 2 else np.uint64(0))
    kept = values.copy()
    got = fastsketch._sorted(values.copy(), n, bits, np.empty(n, np.uint64), np.empty(8 * 256 + 1, np.int64))
    assert np.array_equal(got[:n], np.sort(kept))


def test_word_weights_match_the_table_lookup():
    """SimHash's word weights found through the compiled directory equal weights.word_weights: every word of the
    table, its neighbours, random hashes and the extremes."""
    from dedupdb.text.weights import RARE_WEIGHT, word_table, word_weights

    keys, _ = word_table()
    rng = np.random.default_rng(3)
    hashes = np.concatenate([keys, keys + np.uint64(1), keys - np.uint64(1), rng.integers(0, 1 << 63, 50_000, dtype=np.uint64),
                             np.array([0, 1, (1 << 64) - 1, 1 << 63], np.uint64)])
    rng.shuffle(hashes)
    got, expected = fastsketch.word_weights(hashes), word_weights(hashes)
    assert got.dtype == expected.dtype and np.array_equal(got, expected)
    assert np.count_nonzero(fastsketch.word_weights(keys) < RARE_WEIGHT) > len(keys) // 2  # found, not all rare


@pytest.mark.parametrize("name", ["en_imdb_aclImdb.jsonl.gz", "en_reuters21578.jsonl.gz"])
def test_compiled_simhash_votes_are_numpys(name):
    """fastsketch.simhashes, which folds a batch's word weights in one pass, gives simhash.fingerprints' bits: the
    compiled path's whole sketches are compared above, this compares the votes alone, over texts of every
    length (each at least simhash_min_features words, as a SimHash needs), and over random weights."""
    from dedupdb.sketch.simhash import fingerprints

    texts = corpus(name, 600)
    s = Settings()
    parts = fastsketch.sketch_parts(texts, s.word_ngram, s.cjk_ngram, s.char_ngram, s.containment_ngram,
                                    s.winnow_window, *_permutations(s))
    counted = [parts[2][i] for i in range(len(texts)) if parts[2][i] is not None
               and len(parts[2][i][0]) >= s.simhash_min_features]
    assert len(counted) > 100
    features = np.concatenate([words for words, _ in counted])
    weights = np.concatenate([counts for _, counts in counted]) * fastsketch.word_weights(features)
    lengths = [len(words) for words, _ in counted]
    assert fastsketch.simhashes(features, weights, lengths) == fingerprints(features, weights, lengths)
    rng = np.random.default_rng(7)
    lengths = rng.integers(1, 400, 300).tolist()
    features = rng.integers(0, 2**64, sum(lengths), dtype=np.uint64)
    weights = rng.exponential(3.0, sum(lengths))
    assert fastsketch.simhashes(features, weights, lengths) == fingerprints(features, weights, lengths)


def test_compiled_simhash_votes_near_even_are_numpys():
    """Words of one weight (words the table does not know) split half and half leave a vote even but for the
    order of adding: numpy's order decides those texts, as it decides them on numpy's path, so that a batch
    sketched compiled stores what one sketched with numpy does (a resumed add, tests/test_faults.py)."""
    from dedupdb.sketch.simhash import fingerprints

    rng = np.random.default_rng(3)
    lengths = rng.integers(60, 140, 400).tolist()
    features = rng.integers(0, 2**64, sum(lengths), dtype=np.uint64)
    weights = rng.integers(1, 3, sum(lengths)) * 11.512925464970229  # counts times one rare word's weight
    bounds = np.concatenate(([0], np.cumsum(lengths))).astype(np.int64)
    _, sure = fastsketch._votes(features, weights, bounds)
    assert 0 < np.count_nonzero(~sure) < len(lengths)
    assert fastsketch.simhashes(features, weights, lengths) == fingerprints(features, weights, lengths)


def test_compiled_chinese_word_hashes_are_pythons():
    """fastsketch.chinese_hashes gives weights.chinese_word_hashes' values: for words of every script and length
    (xxh64's long and short paths), an empty word, none at all, and a word holding a zero byte (hashed one by one
    then)."""
    from dedupdb.text.weights import chinese_word_hashes

    rng = np.random.default_rng(11)
    alphabet = list("中文分词的一是在不了有和人这abcXYZ0123456789.%-_+#&😀é\u3400\U00020000 ")
    words = ["".join(rng.choice(alphabet, int(n))) for n in rng.integers(1, 50, 3000)]
    for sample in (words, words[:1], ["", "中", ""], [], ["a\0b", "中文"], ["x" * 200, "词" * 33]):
        got = fastsketch.chinese_hashes(sample)
        assert got.dtype == np.uint64 and got.tolist() == chinese_word_hashes(sample).tolist()


def test_distinct_counts_of_each_text_at_once_are_each_texts_own():
    """fastsketch.distinct_counted, and numpy's hashing.distinct_counts_of_each, give hashing.distinct_first_counts'
    values and counts for each text at once: texts of none, one, many repeated and more values than the compiled
    sort's one-pass limit (fastsketch._FEW)."""
    from dedupdb.text.hashing import distinct_counts_of_each, distinct_first_counts

    rng = np.random.default_rng(1)
    lengths = [0, 1, 5, 3000, fastsketch._FEW + 1, fastsketch._FEW, 100, 0, 2, 3]
    values = np.concatenate([rng.integers(0, 50 if n < 200 else 2**64, n, dtype=np.uint64) for n in lengths[:-2]])
    # Side by side, a text whose greatest value is the next one's least: each keeps its own count of it.
    values = np.concatenate((values, np.array([5, 7, 7, 7, 9], np.uint64)))
    bounds = np.concatenate(([0], np.cumsum(lengths)))
    expected = [distinct_first_counts(values[a:b]) for a, b in pairwise(bounds.tolist())]
    for counted in (fastsketch.distinct_counted, distinct_counts_of_each):  # compiled, and numpy's
        distinct, counts, each = counted(values, lengths)
        assert each.tolist() == [len(found) for found, _, _ in expected]
        assert distinct.tolist() == [v for found, _, _ in expected for v in found.tolist()]
        assert counts.tolist() == [c for _, _, times in expected for c in times.tolist()]


def _own_chinese_simhash(sketcher: Sketcher, text: str, tokens: int) -> int | None:
    """A mostly-Chinese text's SimHash, the text by itself: its distinct words' hashes, counted, weighed by jieba's
    IDF and voted on by simhash.fingerprint; none for fewer distinct words than a SimHash takes."""
    from dedupdb.text.hashing import distinct_first_counts
    from dedupdb.text.weights import chinese_idf, chinese_word_hashes

    minimum = sketcher.settings.simhash_min_features
    if tokens < minimum:
        return None
    features, _, counts = distinct_first_counts(chinese_word_hashes(sketcher._chinese_words(text)))
    if len(features) < minimum:
        return None
    return simhash.fingerprint(features, counts * chinese_idf(features))


def test_batched_chinese_simhashes_are_each_texts_own(monkeypatch):
    """A batch's Chinese SimHashes, voted on together by the compiled path and by numpy's, are each text's own,
    fingerprinted by itself (_own_chinese_simhash, simhash.fingerprint): over texts of dictionary words, and
    over texts of distinct rare ideographs, each of one weight (the table does not know them), whose votes are near
    even: those are decided by simhash.fingerprint on either path."""
    rng = np.random.default_rng(5)
    # Texts of common characters, which jieba cuts into words it knows and words it does not (60 distinct words
    # at least make a SimHash).
    common = list("的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面"
                  "而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置派层片始却专状育厂京识适属圆包火住调满县局照参红细引听该铁价严")
    texts = ["".join(rng.choice(common, int(rng.integers(40, 400)))) for _ in range(200)]
    for _ in range(200):
        rare = rng.choice(np.arange(0x3400, 0x4DB5), int(rng.integers(10, 40)) * 2, replace=False)
        texts.append(normalize("，".join(chr(c) for c in rare)))
    near_even = []
    votes = fastsketch._votes

    def counted_votes(features, weights, bounds):
        values, sure = votes(features, weights, bounds)
        near_even.append(int(np.count_nonzero(~sure)))
        return values, sure

    monkeypatch.setattr(fastsketch, "_votes", counted_votes)
    # numpy's path votes on the batch together too, and leaves its own near-even votes to simhash.fingerprint.
    referred = []
    together = simhash.fingerprints

    def counted_fingerprints(features, weights, lengths, reference=None):
        def counted(*args):
            referred.append(1)
            return reference(*args)

        return together(features, weights, lengths, None if reference is None else counted)

    monkeypatch.setattr(fingerprint_module, "simhash_fingerprints", counted_fingerprints)
    numpy_path = python_sketcher(Settings())
    expected, got = numpy_path.sketch(texts), fast_sketcher(Settings()).sketch(texts)
    # Each text's own SimHash, fingerprinted by itself: what both batched paths must give.
    own = [_own_chinese_simhash(numpy_path, text, sketch.tokens) for text, sketch in zip(texts, expected)]
    assert [s.simhash for s in expected] == own
    assert [s.simhash for s in got] == own
    assert sum(s.simhash is not None for s in expected[:200]) > 100  # dictionary words: most have a SimHash
    assert sum(near_even) > 20  # the rare ideographs' votes were left to simhash.fingerprint
    assert len(referred) > 20  # on numpy's path too


def _permutations(settings: Settings):
    minhasher = Sketcher(settings).minhasher
    return minhasher.multipliers, minhasher.offsets



@pytest.mark.parametrize("settings", [Settings(), OTHER_SETTINGS])
def test_compiled_index_keys_are_numpys(monkeypatch, settings):
    """indexer.index_rows in a process with the compiled sketching loaded (fastsketch.index_keys) gives numpy's
    rows, key for key and in the same order: texts with and without a SimHash, a text with no shingles, one text
    alone, none; and for the super-shingles preset, which keeps numpy's path."""
    from dedupdb import compiled
    from dedupdb.index import indexer
    from dedupdb.index.lsh import Banding, SuperShingles, optimal_banding
    from dedupdb.sketch.fingerprint import Fingerprinter

    rng = np.random.default_rng(11)
    words = [f"w{i}" for i in range(400)]
    texts = [" ".join(rng.choice(words, int(n))) for n in rng.integers(3, 300, 60)] + [normalize(t) for t in EDGE_CASES]
    fingerprints = dict(zip(range(5, 5 + 3 * len(texts), 3), Fingerprinter(settings).texts(texts)))
    assert any(fp.simhash is None for fp in fingerprints.values())
    assert any(fp.simhash is not None for fp in fingerprints.values())
    assert any(fp.shingles == 0 for fp in fingerprints.values())
    banding = optimal_banding(settings.threshold, settings.num_perm)
    calls = []
    real = fastsketch.index_keys
    monkeypatch.setattr(fastsketch, "index_keys", lambda *a: calls.append(1) or real(*a))
    for scheme in (banding, Banding(7, 3), SuperShingles(4, 8, 2)):
        for chosen in (fingerprints, dict([next(iter(fingerprints.items()))]), {}):
            monkeypatch.setattr(compiled, "loaded", lambda name: fastsketch)
            ids, keys = indexer.index_rows(settings, scheme, chosen)
            monkeypatch.setattr(compiled, "loaded", lambda name: None)
            expected_ids, expected_keys = indexer.index_rows(settings, scheme, chosen)
            assert ids.dtype == expected_ids.dtype and keys.dtype == expected_keys.dtype
            assert np.array_equal(ids, expected_ids) and np.array_equal(keys, expected_keys)
            assert len(keys) or not chosen
    assert len(calls) == 6  # the two bandings took the compiled path; super-shingles did not


def test_code_point_classes_are_kept_and_checked(monkeypatch):
    """The classes of every code point are kept in the cache folder and read back, not matched again; a file there
    that is not a whole table of them (cut short, empty, or another table's bytes) is matched again and replaced."""
    from dedupdb.config import cache_dir

    fastsketch.char_classes.cache_clear()
    try:
        matched = fastsketch._matched_classes()
        assert np.array_equal(fastsketch.char_classes(), matched)
        kept = list(cache_dir().glob("char-classes-*.npy"))
        assert len(kept) == 1
        calls = []
        monkeypatch.setattr(fastsketch, "_matched_classes", lambda: calls.append(1) or matched.copy())
        fastsketch.char_classes.cache_clear()
        assert np.array_equal(fastsketch.char_classes(), matched) and not calls
        for damage in (lambda path: path.write_bytes(path.read_bytes()[:1000]), lambda path: path.write_bytes(b""),
                       lambda path: np.save(path, np.zeros_like(matched))):
            damage(kept[0])
            fastsketch.char_classes.cache_clear()
            assert np.array_equal(fastsketch.char_classes(), matched)
            assert np.array_equal(np.load(kept[0]), matched)  # replaced
        assert len(calls) == 3
    finally:
        fastsketch.char_classes.cache_clear()
