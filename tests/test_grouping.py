"""Groups cut from a cluster: every member justified by the document kept, and no text stranded alone while a
weaker pair holds its partner."""

from __future__ import annotations

import json
import os
import random
import string
from dataclasses import dataclass
from pathlib import Path

from hypothesis import given, settings as hypothesis_settings, strategies as st

import dedupdb
from dedupdb.index.grouping import DEFAULT_KEEP, Star, keep_order, neighbours, stars

from .conftest import write

THRESHOLD = 0.5


@dataclass(frozen=True)
class Doc:
    id: int
    key: str
    path: str
    content_id: int
    bytes: int
    mtime_ns: int


def _doc(id: int, key: str, content: int, mtime: int) -> Doc:
    return Doc(id, key, f"/{key}", content, 100, mtime)


def _shape(stars_: list[Star]) -> list[tuple[str, list[tuple[str, float]]]]:
    return [(s.centre.key, [(d.key, similarity) for d, similarity, _ in s.members]) for s in stars_]


def test_a_strong_copy_takes_its_original_from_a_weak_older_pair():
    """O joined the older X at 0.51; its 0.86 edit E1 and its truncation E2, unlike X and each other, were left
    alone and no decision acted on them."""
    x, o, e1, e2 = (_doc(i, name, i, i) for i, name in enumerate(("X", "O", "E1", "E2")))
    near = neighbours([(0, 1, 0.51), (1, 2, 0.86), (1, 3, 0.72), (2, 3, 0.45), (0, 2, 0.40)], THRESHOLD)
    result = stars([x, o, e1, e2], near, keep_order("oldest", {}))
    assert _shape(result) == [("X", []), ("O", [("E1", 0.86), ("E2", 0.72)])]


def test_copies_of_a_text_move_together():
    x, o, e1, e1_copy, o_copy = (
        _doc(i, name, content, i) for i, (name, content) in enumerate(
            (("X", 0), ("O", 1), ("E1", 2), ("E1 copy", 2), ("O copy", 1))
        )
    )
    near = neighbours([(0, 1, 0.51), (1, 2, 0.86)], THRESHOLD)
    result = stars([x, o, e1, e1_copy, o_copy], near, keep_order("oldest", {}))
    assert _shape(result) == [("X", []), ("O", [("E1", 0.86), ("E1 copy", 0.86), ("O copy", 1.0)])]


def test_a_centre_left_alone_takes_a_partner_again():
    """A loses its only member B to C, then takes D from Z, which holds D less similar than A is to it."""
    z, a, b, c, d = (_doc(i, name, i, i) for i, name in enumerate("ZABCD"))
    near = neighbours([(0, 4, 0.55), (1, 2, 0.6), (2, 3, 0.9), (1, 4, 0.8)], THRESHOLD)
    # greedy: Z {D}, A {B}, C alone; then B leaves A for C, and D leaves Z for A
    result = stars([z, a, b, c, d], near, keep_order("oldest", {}))
    assert _shape(result) == [("Z", []), ("A", [("D", 0.8)]), ("B", [("C", 0.9)])]


def _words(rng: random.Random, count: int) -> list[str]:
    return ["".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(4, 9))) for _ in range(count)]


def test_report_and_clean_act_on_the_strong_copies(cli, tmp_path):
    """Through the store: X (oldest) 0.51 like O; E1 an edit of O (0.85), E2 its first 58% (0.58), each below
    the threshold to X and to the other."""
    rng = random.Random(7)
    o = _words(rng, 101)           # 100 word bigrams
    e1 = list(o)
    e1[51:58] = _words(rng, 7)     # O's bigrams 50..57 replaced
    e2 = o[:59]                    # O's bigrams 0..57
    x = _words(rng, 3) + o[48:]    # O's bigrams 48..99 and three of its own
    root = tmp_path / "texts"
    for i, (name, words) in enumerate((("x.txt", x), ("o.txt", o), ("e1.txt", e1), ("e2.txt", e2))):
        os.utime(write(root / name, " ".join(words) + "\n"), ns=(10**18 + i * 10**9,) * 2)
    assert cli("add", str(root)).exit_code == 0
    groups = json.loads(cli("report", "--format", "json").stdout)
    assert [[(Path(m["path"]).name, m["similarity"]) for m in g["members"]] for g in groups] == [
        [("o.txt", 1.0), ("e1.txt", 0.8519), ("e2.txt", 0.58)]
    ]
    plan = json.loads(cli("clean", "--action", "move", "--to", str(tmp_path / "out"), "--format", "json").stdout)
    assert sorted((Path(s["keep"]["path"]).name, Path(s["act_on"]["path"]).name) for s in plan["steps"]) == [
        ("o.txt", "e1.txt"), ("o.txt", "e2.txt")
    ]


# --- property: random pair graphs ------------------------------------------------------------------------------

@st.composite
def _graphs(draw):
    texts = draw(st.integers(1, 12))
    copies = [draw(st.integers(1, 3)) for _ in range(texts)]
    count = sum(copies)
    ids = draw(st.permutations(range(count)))
    mtimes = [draw(st.integers(0, 4)) for _ in range(count)]  # ties fall to the id
    docs, k = [], 0
    for content, n in enumerate(copies):
        for _ in range(n):
            docs.append(Doc(ids[k], f"d{ids[k]}", f"/d{ids[k]}", content, 100, mtimes[k]))
            k += 1
    pairs = [
        (a, b, draw(st.sampled_from([0.3, 0.45, 0.5, 0.55, 0.6, 0.7, 0.8, 0.9, 1.0])))
        for a in range(texts) for b in range(a + 1, texts) if draw(st.booleans())
    ]
    return docs, pairs


@hypothesis_settings(max_examples=400, deadline=None)
@given(_graphs(), st.randoms(use_true_random=False))
def test_groups_of_random_pair_graphs(graph, shuffler):
    docs, pairs = graph
    near = neighbours(pairs, THRESHOLD)
    order = keep_order(DEFAULT_KEEP, {})
    result = stars(docs, near, order)

    star_of: dict[int, Star] = {}
    for star in result:
        for d in [star.centre, *(m for m, _, _ in star.members)]:
            assert d.id not in star_of, "a document in two groups"
            star_of[d.id] = star
    assert set(star_of) == {d.id for d in docs}

    for star in result:
        c = star.centre
        for d, similarity, exact in star.members:
            assert order(c) < order(d), "the centre is the member its keep rule puts first"
            if d.content_id == c.content_id:
                assert exact and similarity == 1.0
            else:
                assert not exact and similarity == near[c.content_id][d.content_id] >= THRESHOLD
    for d in docs:  # copies of a text share a star
        assert all(star_of[e.id] is star_of[d.id] for e in docs if e.content_id == d.content_id)

    def placed(content: int) -> tuple[Star, float | None]:
        """The star holding a text, and its similarity to that star's centre (None for the centre)."""
        doc = next(d for d in docs if d.content_id == content)
        star = star_of[doc.id]
        if star.centre.content_id == content:
            return star, None
        return star, next(s for d, s, _ in star.members if d.content_id == content)

    def alone(star: Star) -> bool:
        return all(d.content_id == star.centre.content_id for d, _, _ in star.members)

    for star in result:
        if not alone(star):
            continue
        u = star.centre
        for v, similarity in near.get(u.content_id, {}).items():
            v_star, v_similarity = placed(v)
            assert not alone(v_star), "two partners both left alone"
            if v_similarity is None:
                # v keeps its star: u could join it only by being dropped for a document ranked after it
                assert order(u) < order(v_star.centre)
            else:
                assert v_similarity >= similarity, "a partner held by a weaker pair"

    shuffled = list(docs)
    shuffler.shuffle(shuffled)
    assert _shape(stars(shuffled, near, order)) == _shape(result)


def test_a_large_component_is_grouped():
    """Thousands of texts in one component, every one of them paired, finish and keep the invariant's basics."""
    rng = random.Random(3)
    n = 4000
    docs = [_doc(i, f"d{i}", i, rng.randrange(10**6)) for i in range(n)]
    pairs = [(i, rng.randrange(i), round(rng.uniform(0.5, 1.0), 2)) for i in range(1, n)]
    pairs += [(rng.randrange(n), rng.randrange(n), round(rng.uniform(0.5, 1.0), 2)) for _ in range(3 * n)]
    pairs = [(a, b, s) for a, b, s in pairs if a != b]
    near = neighbours(pairs, THRESHOLD)
    result = stars(docs, near, keep_order("oldest", {}))
    assert sum(1 + len(s.members) for s in result) == n
    assert all(near[s.centre.content_id][d.content_id] == similarity for s in result for d, similarity, _ in s.members)


def test_export_unique_keeps_what_report_and_clean_keep(cli, db_path, tmp_path):
    """One default keep rule: the copy added first is the newer one, and every command keeps the older."""
    root = tmp_path / "texts"
    newer = write(root / "a.txt", "the minutes of the meeting of the board held on the first monday of march")
    older = write(root / "b.txt", "the minutes of the meeting of the board held on the first monday of march")
    os.utime(newer, ns=(2 * 10**18,) * 2)
    os.utime(older, ns=(10**18,) * 2)
    assert cli("add", str(newer)).exit_code == 0 and cli("add", str(older)).exit_code == 0
    [group] = json.loads(cli("report", "--format", "json").stdout)
    assert group["members"][0]["path"] == str(older)
    exported = [json.loads(line)["key"] for line in cli("export", "--unique").stdout.splitlines()]
    assert exported == [str(older)]
    with dedupdb.open(db_path) as db:
        assert [r.key for r in db.export()] == [str(older)]
        assert db.clusters()[0].members[0].key == str(older)
