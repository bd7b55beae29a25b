"""Connected components of the scale-out job against the union-find of `dedupdb.index.clusters`."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from dedupdb.index.clusters import components
from dedupdb.scaleout import components as scaleout

TOP = 2**62 - 1  # content numbers are 62 bits


def reference(a, b) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, labels) from the union-find, in driver_labels' form."""
    a, b = [int(x) for x in a], [int(x) for x in b]
    label_of = components(a + b, zip(a, b))
    nodes = sorted(label_of)
    return np.array(nodes, dtype=np.int64), np.array([label_of[n] for n in nodes], dtype=np.int64)


def assert_same_labels(got, expected) -> None:
    got_nodes, got_labels = got
    nodes, labels = expected
    assert got_nodes.dtype == np.int64 and got_labels.dtype == np.int64
    np.testing.assert_array_equal(got_nodes, nodes)
    np.testing.assert_array_equal(got_labels, labels)


# Node pools that mix small numbers with ones near 2**62, so a sign or overflow bug shows.
node_pools = st.lists(
    st.one_of(st.integers(0, 50), st.integers(TOP - 50, TOP), st.integers(0, TOP)), min_size=1, max_size=40, unique=True
)


@st.composite
def graphs(draw) -> tuple[np.ndarray, np.ndarray]:
    """Random edges over a pool: self-loops (a == b) and repeated edges included, either way round."""
    pool = draw(node_pools)
    index = st.integers(0, len(pool) - 1)
    pairs = draw(st.lists(st.tuples(index, index), max_size=80))
    a = np.array([pool[i] for i, _ in pairs], dtype=np.int64)
    b = np.array([pool[j] for _, j in pairs], dtype=np.int64)
    return a, b


@st.composite
def shaped_graphs(draw) -> tuple[np.ndarray, np.ndarray]:
    """Chains and stars over shuffled numbers, joined by a few random edges: long paths need pointer jumping."""
    pool = np.array(draw(st.lists(st.integers(0, TOP), min_size=2, max_size=300, unique=True)), dtype=np.int64)
    order = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).permutation(pool.size)
    pool = pool[order] if draw(st.booleans()) else np.sort(pool)[:: draw(st.sampled_from([1, -1]))]
    cut = draw(st.integers(1, pool.size))
    chain, star = pool[:cut], pool[cut - 1:]
    a = np.concatenate([chain[:-1], np.repeat(star[:1], star.size - 1)])
    b = np.concatenate([chain[1:], star[1:]])
    extra = draw(st.lists(st.tuples(st.integers(0, pool.size - 1), st.integers(0, pool.size - 1)), max_size=5))
    a = np.append(a, [pool[i] for i, _ in extra]).astype(np.int64)
    b = np.append(b, [pool[j] for _, j in extra]).astype(np.int64)
    return a, b


@settings(max_examples=50, deadline=None)
@given(graphs())
def test_driver_labels_match_union_find(edges):
    assert_same_labels(scaleout.driver_labels(*edges), reference(*edges))


@settings(max_examples=50, deadline=None)
@given(shaped_graphs())
def test_driver_labels_match_union_find_on_chains_and_stars(edges):
    assert_same_labels(scaleout.driver_labels(*edges), reference(*edges))


@pytest.mark.parametrize("numbering", ["ascending", "descending", "shuffled"])
def test_a_long_chain_gets_one_label(numbering):
    rng = np.random.default_rng(7)
    path = np.sort(rng.choice(TOP, size=100_000, replace=False).astype(np.int64))
    if numbering == "descending":
        path = path[::-1]
    elif numbering == "shuffled":
        path = rng.permutation(path)
    a, b = path[:-1], path[1:]
    nodes, labels = scaleout.driver_labels(a, b)
    np.testing.assert_array_equal(nodes, np.sort(path))
    assert (labels == path.min()).all()
    assert_same_labels((nodes, labels), reference(a, b))


def test_driver_labels_edge_cases():
    empty = scaleout.driver_labels(np.empty(0, np.int64), np.empty(0, np.int64))
    assert empty[0].size == 0 and empty[1].size == 0 and empty[1].dtype == np.int64
    # A node seen only in a self-loop is its own component; lists and other int types are accepted.
    alone = scaleout.driver_labels([TOP, 5, 9], [TOP, 9, 5])
    assert_same_labels(alone, (np.array([5, 9, TOP]), np.array([5, 5, TOP])))
    narrow = scaleout.driver_labels(np.array([3, 1], np.int32), np.array([2, 2], np.int32))
    assert_same_labels(narrow, (np.array([1, 2, 3]), np.ones(3)))
    with pytest.raises(ValueError):
        scaleout.driver_labels([1, 2], [3])


def star_rounds_in_memory(a, b, partitions: int) -> tuple[np.ndarray, np.ndarray]:
    """The star rounds' map and reduce steps run in this process, partition by partition, as Ray would run them."""

    def grouped(edges, add_part, step):
        keyed = add_part(edges, partitions=partitions)
        parts = [step({column: values[keyed["part"] == p] for column, values in keyed.items()})
                 for p in range(partitions)]
        return {column: np.concatenate([part[column] for part in parts]) for column in parts[0]}

    edges = {"a": np.asarray(a, np.int64), "b": np.asarray(b, np.int64)}
    for _ in range(100):
        edges = grouped(grouped(edges, scaleout._with_both_ends, scaleout._large_star),
                        scaleout._with_larger_end, scaleout._small_star)
        if not edges["changed"].any():
            break
    final = grouped(edges, scaleout._with_both_ends, scaleout._smallest_neighbour)
    order = np.argsort(final["node"])
    return final["node"][order], final["label"][order]


@settings(max_examples=50, deadline=None)
@given(st.one_of(graphs(), shaped_graphs()), st.integers(1, 5))
def test_star_rounds_match_union_find(edges, partitions):
    assert_same_labels(star_rounds_in_memory(*edges, partitions), reference(*edges))


# Ray: a local instance shared by the tests below. Each star round costs Ray Data a fixed ~0.25 s, so the graphs are
# small, with a chain long enough to take ten rounds.


@pytest.fixture(scope="session")
def ray_local():
    ray = pytest.importorskip("ray")
    ray.init(num_cpus=2, include_dashboard=False, ignore_reinit_error=True, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    return ray


def edges_dataset(ray, a, b, blocks: int = 3):
    import pyarrow as pa

    return ray.data.from_arrow(pa.table({"a": np.asarray(a, np.int64), "b": np.asarray(b, np.int64)})).repartition(
        blocks
    )


def gather_star_labels(ray, a, b, partitions: int) -> tuple[np.ndarray, np.ndarray]:
    batches = list(scaleout.star_labels(edges_dataset(ray, a, b), partitions).iter_batches(batch_format="numpy"))
    node = np.concatenate([batch["node"] for batch in batches])
    label = np.concatenate([batch["label"] for batch in batches])
    order = np.argsort(node)
    return node[order], label[order]


def random_clusters(seed: int, clusters: int) -> tuple[np.ndarray, np.ndarray]:
    """Several components of 1 to 60 nodes, each a random tree plus extra edges, with self-loops and repeats."""
    rng = np.random.default_rng(seed)
    a_parts, b_parts = [], []
    for _ in range(clusters):
        members = rng.integers(0, 2**62, size=int(rng.integers(1, 60)), dtype=np.int64)
        parents = members[(rng.random(members.size - 1) * np.arange(1, members.size)).astype(np.int64)]
        extra = rng.choice(members, size=(2, members.size // 3))
        a_parts += [members[1:], extra[0], members[:1]]  # members[:1] twice: a self-loop
        b_parts += [parents, extra[1], members[:1]]
    a, b = np.concatenate(a_parts + [[TOP]]), np.concatenate(b_parts + [[TOP]])  # and a node alone with itself
    repeated = rng.choice(a.size, size=a.size // 10)
    return np.concatenate([a, b[repeated]]), np.concatenate([b, a[repeated]])


def test_star_labels_on_a_long_shuffled_chain(ray_local):
    rng = np.random.default_rng(3)
    path = rng.choice(TOP, size=2_000, replace=False).astype(np.int64)
    a, b = path[:-1], path[1:]
    assert_same_labels(gather_star_labels(ray_local, a, b, partitions=4), scaleout.driver_labels(a, b))


def test_star_labels_on_random_clusters(ray_local):
    a, b = random_clusters(seed=11, clusters=80)
    expected = scaleout.driver_labels(a, b)
    assert np.unique(expected[1]).size > 50  # many components, not one
    assert_same_labels(gather_star_labels(ray_local, a, b, partitions=3), expected)


def test_labels_give_the_same_answer_either_way(ray_local, monkeypatch):
    a, b = random_clusters(seed=5, clusters=40)
    path = np.arange(10**15, 10**15 + 300, dtype=np.int64)[::-1]  # a chain numbered downwards, joined to a cluster
    a, b = np.concatenate([a, path[:-1], path[-1:]]), np.concatenate([b, path[1:], a[:1]])
    expected = reference(a, b)
    edges = edges_dataset(ray_local, a, b)

    def wrong_way(*args, **kwargs):
        raise AssertionError("labels took the other way")

    with monkeypatch.context() as patch:
        patch.setattr(scaleout, "star_labels", wrong_way)
        assert_same_labels(scaleout.labels(edges, a.size), expected)
    with monkeypatch.context() as patch:
        patch.setattr(scaleout, "_labels_of_ends", wrong_way)
        assert_same_labels(scaleout.labels(edges, a.size, driver_limit=a.size - 1, partitions=5), expected)
