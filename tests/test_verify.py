"""Verification of a batch of candidate pairs gives judge()'s verdicts, compiled or not."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedupdb.sketch.minhash import bottom_k, sketch_overlap, view_overlap
from dedupdb.sketch.verify import PairJudge, Signature, SketchTable, judge

fastverify = pytest.importorskip("dedupdb.sketch.fastverify")


def _sketches(seed: int, count: int, k: int) -> list[np.ndarray]:
    """Bottom-k sketches of sets drawn from a small universe, so that many overlap: some whole (under k values),
    some cut at k, a few empty."""
    rng = np.random.default_rng(seed)
    universe = rng.choice(2**32 - 1, size=4 * k, replace=False).astype(np.uint32)
    out = []
    for _ in range(count):
        size = int(rng.integers(0, 3 * k))
        values = np.sort(rng.choice(universe, size=size, replace=False)) if size else np.empty(0, np.uint32)
        out.append(bottom_k(values, k, already_unique=True)[0])
    return out


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 2**31), st.integers(1, 40))
def test_compiled_overlaps_equal_sketch_overlap(seed, k):
    sketches = _sketches(seed, 12, k)
    left, right = np.triu_indices(len(sketches), 1)
    lengths = np.array([len(s) for s in sketches], np.int64)
    values = np.concatenate(sketches).astype(np.uint32)
    shared, jaccard, union = fastverify.overlaps(values, np.cumsum(lengths) - lengths, lengths, left, right, k)
    for a, b, s, j, u in zip(left.tolist(), right.tolist(), shared.tolist(), jaccard.tolist(), union.tolist()):
        assert (j, s, u) == view_overlap(sketches[a], sketches[b], k)
        assert (j, s) == sketch_overlap(sketches[a], sketches[b], k)


@pytest.mark.parametrize("compiled", [False, True])
def test_pair_judge_gives_the_verdicts_of_judge(compiled, monkeypatch):
    k = 24
    sketches = _sketches(7, 30, k)
    rng = np.random.default_rng(3)
    signatures = {
        int(cid): Signature(s, int(rng.integers(0, 2**63)) if cid % 3 else None)
        for cid, s in zip(rng.choice(10**6, size=len(sketches), replace=False), sketches)
    }
    ids = sorted(signatures)
    a, b = np.triu_indices(len(ids), 1)
    pairs = np.column_stack((np.array(ids)[a], np.array(ids)[b]))
    expected = []
    for x, y in pairs.tolist():
        verdict = judge(signatures[x], signatures[y], 0.3, 3, k)
        if verdict.duplicate:
            expected.append((x, y, verdict.jaccard, verdict.hamming))
    assert len(expected) > 5 and any(h is None for *_, h in expected) and any(h is not None for *_, h in expected)
    judge_ = PairJudge(0.3, k)
    monkeypatch.setattr(PairJudge, "_fast", staticmethod(lambda: fastverify if compiled else None))
    if compiled:
        judge_.FAST_AFTER_SECONDS = 0.0
    assert judge_.pairs(signatures, pairs) == expected
    with pytest.raises(KeyError):  # a candidate without a signature fails on either path, never reads astray
        judge_.pairs({cid: sig for cid, sig in signatures.items() if cid != ids[1]}, pairs)
    # The same as columns, given in parts out of id order (as a batch's new and stored sketches are joined).
    items = list(signatures.items())
    parts = [SketchTable.of(dict(items[start::3])) for start in (2, 0, 1)]
    assert judge_.pairs(SketchTable.joined(parts), pairs) == expected
    with pytest.raises(KeyError):
        judge_.pairs(SketchTable.joined(parts[:2]), pairs)
    with pytest.raises(ValueError):  # a content twice would make its sketch ambiguous
        SketchTable.joined([parts[0], parts[0]])


def test_pair_judge_turns_to_compiled_code_once_numpy_has_taken_as_long(monkeypatch):
    """A process that has verified little never loads numba (a small add stays quick and small)."""
    import sys
    import types

    sketches = _sketches(1, 4, 16)
    signatures = {i: Signature(s, None) for i, s in enumerate(sketches)}
    pairs = np.array([(0, 1), (1, 2), (2, 3), (0, 3)], np.int64)
    calls = []
    counted = types.SimpleNamespace(overlaps=lambda *a: calls.append(1) or fastverify.overlaps(*a))
    monkeypatch.setattr(PairJudge, "_fast", staticmethod(lambda: counted))
    monkeypatch.delitem(sys.modules, "numba")  # as if it were not loaded yet
    judge_ = PairJudge(0.2, 16)
    judge_.FAST_AFTER_SECONDS = 3600.0
    first = judge_.pairs(signatures, pairs)
    assert calls == [] and first
    judge_.FAST_AFTER_SECONDS = 0.0  # as if it had been verifying for long
    assert judge_.pairs(signatures, pairs) == first and calls == [1]
    fresh = PairJudge(0.2, 16)  # a batch large enough to be worth it goes compiled at once
    fresh.NUMPY_SECONDS_A_PAIR = fresh.FAST_AFTER_SECONDS / len(pairs)
    assert fresh.pairs(signatures, pairs) == first and calls == [1, 1]


def test_pair_judge_compiles_its_own_verifying_once_numpy_has_judged_long_while_awaiting(monkeypatch):
    """While another process compiles (a first add), verifying keeps to numpy until it has cost about what compiling
    the verifying alone would; then this process takes it compiled (compiling it where numba's cache lacks it), with
    the same verdicts. A thread loading compiled code holds it back."""
    import types

    from dedupdb import compiled

    sketches = _sketches(5, 6, 16)
    signatures = {i: Signature(s, None) for i, s in enumerate(sketches)}
    pairs = np.array([(a, b) for a in range(6) for b in range(a + 1, 6)], np.int64)
    calls = []
    counted = types.SimpleNamespace(overlaps=lambda *a: calls.append(1) or fastverify.overlaps(*a))
    monkeypatch.setattr(PairJudge, "_fast", staticmethod(lambda: counted))
    monkeypatch.setattr(compiled, "_awaiting", True)
    monkeypatch.setattr(compiled, "_checked", float("inf"))  # never looks for the mark: awaited throughout
    judge_ = PairJudge(0.2, 16)
    judge_.FAST_AFTER_SECONDS = 0.0
    first = judge_.pairs(signatures, pairs)
    assert compiled.waiting() and calls == [] and first
    judge_._numpy_seconds = judge_.COMPILE_ITSELF_AFTER_SECONDS
    monkeypatch.setattr(compiled, "_loading", True)  # a load aside under way: not now
    assert judge_.pairs(signatures, pairs) == first and calls == []
    monkeypatch.setattr(compiled, "_loading", False)
    assert judge_.pairs(signatures, pairs) == first and calls == [1]


def test_two_short_texts_compare_by_their_character_views_alone():
    """Two texts of up to CHAR_VIEW_FULL tokens are compared by their character n-grams alone (the word bigrams
    a typo breaks would weigh against them); a short text against a long one by word n-grams; numpy and compiled
    code alike."""
    from dedupdb.config import Settings
    from dedupdb.sketch.fingerprint import Sketcher
    from dedupdb.text.normalize import normalize

    texts = ["But quick to tell me goodbye", "But quick to tell me goodybe",
             " ".join(f"word{i}" for i in range(60)), " ".join(f"word{i}" for i in range(59)) + " goodbye"]
    settings_ = Settings()
    sketches = [s.sketch for s in Sketcher(settings_).sketch([normalize(t) for t in texts])]
    k = settings_.sketch_size
    a, b = sketches[0], sketches[1]
    odd_a, odd_b = a[(a & 1) == 1], b[(b & 1) == 1]
    chars = len(np.intersect1d(odd_a, odd_b)) / len(np.union1d(odd_a, odd_b))
    both = len(np.intersect1d(a, b)) / len(np.union1d(a, b))
    assert view_overlap(a, b, k)[0] == chars > both
    left, right = np.triu_indices(len(sketches), 1)
    lengths = np.array([len(s) for s in sketches], np.int64)
    values = np.concatenate(sketches).astype(np.uint32)
    shared, jaccard, union = fastverify.overlaps(values, np.cumsum(lengths) - lengths, lengths, left, right, k)
    for x, y, s, j, u in zip(left.tolist(), right.tolist(), shared.tolist(), jaccard.tolist(), union.tolist()):
        assert (j, s, u) == view_overlap(sketches[x], sketches[y], k)
