"""The super-shingles preset: its S-curve, its index keys, a store built with it (found pairs, check, settings)."""

from __future__ import annotations

import json
import random
import sqlite3
import string
from math import comb
from pathlib import Path

import numpy as np
import pytest

import dedupdb
from dedupdb.index.lsh import Banding, SuperShingles, candidate_keys, curve, super_shingle_keys
from dedupdb.text.normalize import normalize

from .conftest import write

SUPER = SuperShingles()


# --- the math ----------------------------------------------------------------------------------------------


def test_super_shingles_are_the_classic_84_values_in_6_groups_of_14_with_15_pair_keys():
    assert (SUPER.groups, SUPER.rows, SUPER.match, SUPER.values, SUPER.keys) == (6, 14, 2, 84, 15)


@pytest.mark.parametrize(
    "similarity, expected",
    # 1 - (1-p)^6 - 6 p (1-p)^5 with p = J^14, worked out in exact fractions
    [(0.0, 0.0), (0.3, 3.431518430568217e-14), (0.8, 0.02577584796425255), (0.9, 0.41505139312821965), (0.95, 0.8786384653969609), (1.0, 1.0)],
)
def test_super_shingle_curve_known_values(similarity, expected):
    assert float(SUPER.probability(similarity)) == pytest.approx(expected, rel=1e-9, abs=1e-300)


def test_super_shingle_curve_is_the_chance_of_two_or_more_equal_groups():
    """Summed over every pattern of equal groups, not by the binomial formula the code uses."""
    for j in (0.3, 0.6, 0.85, 0.97):
        p = j**14
        by_patterns = sum(
            p ** bin(mask).count("1") * (1 - p) ** (6 - bin(mask).count("1"))
            for mask in range(64) if bin(mask).count("1") >= 2
        )
        assert float(SUPER.probability(j)) == pytest.approx(by_patterns, rel=1e-12)
    values = SUPER.probability(np.linspace(0, 1, 101))
    assert np.all(np.diff(values) >= 0)


def test_banding_curve_beside_it():
    assert float(Banding(53, 4).probability(0.5)) == pytest.approx(1 - (15 / 16) ** 53)
    table = curve(Banding(53, 4))
    assert list(table) == ["0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.85", "0.9", "0.95"]
    assert table["0.5"] == 0.967 and curve(SUPER)["0.9"] == 0.415


def test_keys_are_shared_exactly_when_two_groups_agree():
    """Two signatures with k equal groups share C(k, 2) of their 15 keys, each in its own column."""
    rng = np.random.default_rng(5)
    base = rng.integers(0, 2**32, size=(1, 256), dtype=np.uint32)
    for k in range(7):
        other = rng.integers(0, 2**32, size=(1, 256), dtype=np.uint32)
        for group in rng.choice(6, size=k, replace=False):
            other[0, group * 14 : (group + 1) * 14] = base[0, group * 14 : (group + 1) * 14]
        other[0, 84:] = base[0, 84:]  # values past the 84 play no part
        a, b = super_shingle_keys(base, SUPER)[0], candidate_keys(other, SUPER)[0]
        assert a.dtype == np.int64 and a.shape == (15,)
        assert int((a == b).sum()) == comb(k, 2)
        assert len(set(a.tolist()) & set(b.tolist())) == comb(k, 2)


def test_signatures_too_short_for_super_shingles():
    with pytest.raises(ValueError, match="84"):
        super_shingle_keys(np.zeros((1, 64), np.uint32), SUPER)


# --- a store built with the preset ---------------------------------------------------------------------------


def _words(rng: random.Random, count: int) -> list[str]:
    return ["".join(rng.choice(string.ascii_lowercase) for _ in range(7)) for _ in range(count)]


def near_pairs(root: Path, count: int, seed: int = 11) -> list[tuple[str, str]]:
    """count pairs of 50-word texts (no SimHash: fewer than 60 words) differing in one middle word: 47 of 51
    word bigrams shared, Jaccard 0.92."""
    rng = random.Random(seed)
    pairs = []
    for i in range(count):
        words = _words(rng, 50)
        edited = list(words)
        edited[25] = "changed"
        a, b = write(root / f"a{i:03}.txt", " ".join(words)), write(root / f"b{i:03}.txt", " ".join(edited))
        pairs.append((str(a), str(b)))
    return pairs


def _equal_groups(db, path_a: str, path_b: str) -> int:
    sig_a, sig_b = (db.fingerprinter.one(normalize(Path(p).read_text())).minhash[:84].reshape(6, 14)
                    for p in (path_a, path_b))
    return int((sig_a == sig_b).all(axis=1).sum())


def test_pairs_at_jaccard_092_are_found_exactly_when_two_super_shingles_agree(tmp_path):
    pairs = near_pairs(tmp_path / "corpus", 120)
    with dedupdb.open(tmp_path / "super.db", preset="super-shingles") as db:
        db.add([tmp_path / "corpus"], workers=0)
        found = {(p.a, p.b) for p in db.pairs()} | {(p.b, p.a) for p in db.pairs()}
        predicted = {(a, b) for a, b in pairs if _equal_groups(db, a, b) >= 2}
        jaccards = [p.jaccard for p in db.pairs()]
    assert {(a, b) for a, b in pairs if (a, b) in found} == predicted
    assert all(j >= 0.9 for j in jaccards) and len(jaccards) == len(predicted)
    # P(0.92) = 0.60 by the S-curve; 120 pairs put the share found well inside (0.4, 0.8)
    assert 0.4 * len(pairs) < len(predicted) < 0.8 * len(pairs)
    with dedupdb.open(tmp_path / "bands.db") as db:  # the default banding finds every one of them
        db.add([tmp_path / "corpus"], workers=0)
        assert sum(1 for _ in db.pairs()) == len(pairs)
        assert db.settings.preset == "banding"


def test_a_found_pair_is_queried_and_verified_as_before(tmp_path):
    pairs = near_pairs(tmp_path / "corpus", 40)
    with dedupdb.open(tmp_path / "super.db", preset="super-shingles") as db:
        db.add([tmp_path / "corpus"], workers=0)
        a, b = next((a, b) for a, b in pairs if _equal_groups(db, a, b) >= 2)
        hits = db.query(Path(a).read_text())
        assert [h.path for h in hits][:2] == [a, b]
        assert hits[1].jaccard == pytest.approx(47 / 51, abs=0.01)
        assert db.store.index_rows() == 15 * 80  # 15 keys a text, no SimHash rows for these short texts


def test_cli_init_shows_both_curves_and_the_store_passes_check(tmp_path, cli, db_path):
    result = cli("init", "--preset", "super-shingles")
    assert result.exit_code == 0, result.output
    assert "super-shingles (this store)" in result.output and "53 bands x 4 rows" in result.output
    assert "0.415" in result.output and "5.59e-08" in result.output  # J = 0.9 and the threshold 0.5
    near_pairs(tmp_path / "corpus", 30)
    write(tmp_path / "corpus" / "copy.txt", (tmp_path / "corpus" / "a000.txt").read_text())
    assert cli("add", str(tmp_path / "corpus"), "--workers", "0").exit_code == 0
    result = cli("check")
    assert result.exit_code == 0 and result.output.startswith("sound"), result.output
    stats = json.loads(cli("stats", "--format", "json").output)
    assert stats["settings"]["preset"] == "super-shingles"
    assert stats["lsh"] == {"groups": 6, "rows": 14, "match": 2, "keys": 15}
    assert stats["candidate_probability"]["0.95"] == 0.879
    assert "candidate probability" in cli("stats").output
    meta = dict(sqlite3.connect(db_path).execute("SELECT key, value FROM meta WHERE key LIKE 'setting.preset' "
                                                 "OR key LIKE 'lsh.%'").fetchall())
    assert meta == {"setting.preset": "super-shingles", "lsh.groups": "6", "lsh.rows": "14", "lsh.match": "2"}


def test_default_init_shows_the_preset_beside_it(cli):
    result = cli("init")
    assert result.exit_code == 0, result.output
    assert "banding (this store)" in result.output and "0.967" in result.output
    assert json.loads(cli("stats", "--format", "json").output)["settings"]["preset"] == "banding"


def test_another_preset_is_refused_and_reindex_keeps_it(tmp_path, cli, db_path):
    near_pairs(tmp_path / "corpus", 20)
    with dedupdb.open(db_path, preset="super-shingles") as db:
        db.add([tmp_path / "corpus"], workers=0)
        before = sorted((p.a, p.b) for p in db.pairs())
    with pytest.raises(dedupdb.SettingsError, match="preset=super-shingles, not banding"):
        dedupdb.open(db_path, preset="banding")
    result = cli("init", "--preset", "banding")
    assert result.exit_code == 1
    assert result.output.strip().count("\n") == 0 and "preset=super-shingles" in result.output
    result = cli("reindex", "--threshold", "0.6")
    assert result.exit_code == 0 and "6 super-shingles of 14 values" in result.output, result.output
    with dedupdb.open(db_path) as db:
        assert db.settings.preset == "super-shingles" and db.settings.threshold == 0.6
        assert isinstance(db.banding, SuperShingles)
        assert sorted((p.a, p.b) for p in db.pairs()) == before  # every pair here is above 0.9
    assert cli("check").exit_code == 0


def test_unknown_preset_and_too_few_permutations_are_one_line_errors(cli, tmp_path):
    result = cli("init", "--preset", "minhash")
    assert result.exit_code != 0
    with pytest.raises(dedupdb.SettingsError, match="preset must be one of banding, super-shingles"):
        dedupdb.Settings(preset="minhash")
    result = cli("init", "--preset", "super-shingles", "--permutations", "64")
    assert result.exit_code == 2 and "super-shingles need at least 84 permutations" in result.output
    assert result.output.strip().count("\n") == 0


def test_a_store_from_before_presets_opens_as_banding(tmp_path, db_path):
    near_pairs(tmp_path / "corpus", 10)
    with dedupdb.open(db_path) as db:
        db.add([tmp_path / "corpus"], workers=0)
    conn = sqlite3.connect(db_path)
    conn.execute("DELETE FROM meta WHERE key = 'setting.preset'")
    conn.commit()
    conn.close()
    with dedupdb.open(db_path) as db:
        assert db.settings.preset == "banding" and isinstance(db.banding, Banding)
        assert db.check().sound
    with pytest.raises(dedupdb.SettingsError, match="preset=banding, not super-shingles"):
        dedupdb.open(db_path, preset="super-shingles")
