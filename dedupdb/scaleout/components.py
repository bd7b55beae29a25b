"""Connected components of the verified pairs: each content number labelled with the smallest of its cluster.

The same labels as `dedupdb.index.clusters.components`, computed in one of two ways, chosen by the number of edges:

  * `driver_labels`: on the driver, vectorised numpy (dense relabelling, min-hooking and pointer jumping), while
    the edge list fits the driver's memory comfortably; it is much faster there, as Ray Data pays a fixed cost per
    round;
  * `star_labels`: large-star / small-star alternation (Kiveris et al., "Connected Components in MapReduce and
    Beyond", SoCC 2014) on a Ray Data dataset, for edge lists past the driver.

Ray is imported inside the functions, so this module imports without it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from dedupdb.index.clusters import dense_components

if TYPE_CHECKING:
    import ray.data

# Measured with scripts/bench_components.py (Ray local on 2 CPUs, near-duplicate-like random graphs): gathering the
# edges and labelling them on the driver took 0.07 s for 1e5 edges, 1.1 s for 1e6, 1.9 s for 3e6, 7.7 s for 1e7 and
# 32 s for 3e7, at a peak of about 70 bytes of driver memory an edge (2.1 GB for 3e7); star_labels took 3.4 s, 15 s
# and 40 s for 1e5, 1e6 and 3e6. The driver is the faster at every size it can hold, so memory sets the limit:
# 5e7 edges is about 3.5 GB on the driver.
DRIVER_EDGE_LIMIT = 50_000_000
# A star step's groups (one map_groups call each, all its nodes at once in numpy): one per CPU of the cluster, more
# when a group would pass this many edges. More groups than CPUs only add Ray tasks to every shuffle: 1e6 edges took
# 15 s in 2 groups and 25 s in 16 on 2 CPUs.
EDGES_PER_PARTITION = 2_000_000
# Star rounds stop long before this on any graph (the alternation needs O(log^2 n) of them); a guard against a bug.
MAX_STAR_ROUNDS = 200


def driver_labels(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, labels): the distinct edge ends, sorted, and the smallest node of each one's component."""
    a = np.asarray(a, dtype=np.int64).ravel()
    b = np.asarray(b, dtype=np.int64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"edge ends differ in length: {a.size} and {b.size}")
    return _labels_of_ends(np.concatenate([a, b]))


def _labels_of_ends(ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """driver_labels of the int64 edge ends given as all the a then all the b; sorts `ends` in place.

    Nodes are relabelled densely in sorted order, so the smallest dense index of a component is its smallest node
    (cluster.dense_components labels them).
    Peak memory is the ends and their sort order (32 bytes an edge) plus the dense ends and their running count (8
    bytes an edge each while there are fewer than 2**31 nodes).
    """
    edge_count = ends.size // 2
    order = np.argsort(ends)
    ends.sort()  # in place: a sorted copy would cost another 16 bytes an edge
    first = np.ones(ends.size, dtype=bool)
    first[1:] = ends[1:] != ends[:-1]
    nodes = ends[first]
    index_type = np.int32 if nodes.size < 2**31 else np.int64
    dense = np.empty(ends.size, dtype=index_type)
    dense[order] = np.cumsum(first, dtype=index_type) - 1
    del order, first
    return nodes, nodes[dense_components(nodes.size, dense[:edge_count], dense[edge_count:])]


def star_labels(edges: "ray.data.Dataset", partitions: int | None = None) -> "ray.data.Dataset":
    """Dataset of node, label (the smallest node of its component) for every end of the int64 edges `a`, `b`.

    Runs rounds of a large-star then a small-star step until a round changes no edge: the graph is then one star
    per component, centred on its smallest node. A step groups the nodes into `partitions` groups by
    node % partitions (by default: see EDGES_PER_PARTITION), so Ray calls the numpy step once per group, not once
    per node.
    """
    import ray
    from ray.data.context import ShuffleStrategy

    edges = edges.select_columns(["a", "b"]).materialize()
    if not partitions:
        cpus = int(ray.cluster_resources().get("CPU", 1))
        partitions = max(1, cpus, -(-edges.count() // EDGES_PER_PARTITION))
    edges = edges.repartition(partitions).materialize()
    # The hash shuffle runs its map tasks in workers of their own runtime env, so on a node with few CPUs Ray starts
    # and kills workers at every step (seconds each); the sort shuffle's plain tasks take a tenth of a second. This
    # context is the materialized copy's own: the caller's datasets keep theirs.
    edges.context.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    for _ in range(MAX_STAR_ROUNDS):
        large = _grouped_step(edges, partitions, _with_both_ends, _large_star)
        edges = _grouped_step(large, partitions, _with_larger_end, _small_star).materialize()
        if not edges.sum("changed"):
            break
    else:
        raise RuntimeError(f"star_labels did not converge in {MAX_STAR_ROUNDS} rounds")
    return _grouped_step(edges, partitions, _with_both_ends, _smallest_neighbour)


def labels(
    edges: "ray.data.Dataset",
    edge_count: int,
    driver_limit: int = DRIVER_EDGE_LIMIT,
    partitions: int | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(nodes, labels) as `driver_labels` gives them: on the driver while the edges fit it, else by star_labels."""
    if edge_count <= driver_limit:
        return _labels_of_ends(_gather(edges, ("a", "b")))
    node_label = _gather(star_labels(edges, partitions), ("node", "label"))
    half = node_label.size // 2
    order = np.argsort(node_label[:half])
    return node_label[:half][order], node_label[half:][order]


def _gather(dataset: "ray.data.Dataset", columns: tuple[str, str]) -> np.ndarray:
    """The two int64 columns on the driver, one after the other in one array (one copy, not two)."""
    chunks: dict[str, list[np.ndarray]] = {column: [] for column in columns}
    for batch in dataset.iter_batches(batch_size=None, batch_format="numpy"):
        for column in columns:
            chunks[column].append(np.asarray(batch[column], dtype=np.int64))
    return np.concatenate([np.empty(0, np.int64), *chunks[columns[0]], *chunks[columns[1]]])


def _grouped_step(edges: "ray.data.Dataset", partitions: int, add_part, step) -> "ray.data.Dataset":
    keyed = edges.map_batches(add_part, batch_format="numpy", fn_kwargs={"partitions": partitions})
    return keyed.groupby("part", num_partitions=partitions).map_groups(step, batch_format="numpy")


# The map sides: rows of node, other, part (the group that sees the node) and what the previous step changed.


def _with_both_ends(batch: dict[str, np.ndarray], partitions: int) -> dict[str, np.ndarray]:
    """Each edge from both of its ends: a large-star reducer needs a node's whole neighbourhood."""
    node = np.concatenate([batch["a"], batch["b"]]).astype(np.int64, copy=False)
    other = np.concatenate([batch["b"], batch["a"]]).astype(np.int64, copy=False)
    return {"node": node, "other": other, "part": node % partitions}


def _with_larger_end(batch: dict[str, np.ndarray], partitions: int) -> dict[str, np.ndarray]:
    """Each edge from its larger end only: a small-star reducer sees a node's neighbours no larger than it.

    The large-star's changes ride along, so that one count after the small-star tells whether the round did anything.
    """
    node = np.maximum(batch["a"], batch["b"]).astype(np.int64, copy=False)
    other = np.minimum(batch["a"], batch["b"]).astype(np.int64, copy=False)
    return {"node": node, "other": other, "part": node % partitions, "changed": batch["changed"]}


# The reduce sides, one call per group: all its nodes at once, sorted by node, one segment per node.


def _segments(batch: dict[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(node, other, starts, lengths, changed): rows sorted by node then other without repeats, where each node's
    segment starts and how long it is, and whether any of its rows came changed from the previous step."""
    node = np.asarray(batch["node"], dtype=np.int64)
    other = np.asarray(batch["other"], dtype=np.int64)
    order = np.lexsort((other, node))
    node, other = node[order], other[order]
    distinct = np.ones(node.size, dtype=bool)
    distinct[1:] = (node[1:] != node[:-1]) | (other[1:] != other[:-1])
    new_node = np.ones(node.size, dtype=bool)
    new_node[1:] = node[1:] != node[:-1]
    if "changed" in batch and node.size:
        changed = np.logical_or.reduceat(np.asarray(batch["changed"], dtype=bool)[order], np.flatnonzero(new_node))
    else:
        changed = np.zeros(int(new_node.sum()), dtype=bool)
    node, other = node[distinct], other[distinct]
    starts = np.flatnonzero(new_node[distinct])
    lengths = np.diff(np.append(starts, node.size))
    return node, other, starts, lengths, changed


def _edges(a: list[np.ndarray], b: list[np.ndarray], changed: list[np.ndarray]) -> dict[str, np.ndarray]:
    return {
        "a": np.concatenate(a).astype(np.int64, copy=False),
        "b": np.concatenate(b).astype(np.int64, copy=False),
        "changed": np.concatenate(changed).astype(np.int8, copy=False),
    }


def _large_star(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every neighbour larger than a node is joined to the smallest of the node's closed neighbourhood."""
    node, other, starts, lengths, _ = _segments(batch)
    if node.size == 0:
        return _edges([node], [node], [node])
    smallest = np.minimum(np.minimum.reduceat(other, starts), node[starts])
    smallest_by_row = np.repeat(smallest, lengths)
    larger = other > node
    # A node with only a self-loop (a == b in the input) keeps it, so that it keeps its label.
    alone = node[starts][(lengths == 1) & (other[starts] == node[starts])]
    return _edges(
        [other[larger], alone],
        [smallest_by_row[larger], alone],
        [smallest_by_row[larger] != node[larger], np.zeros(alone.size, dtype=bool)],
    )


def _small_star(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A node and its neighbours no larger than it are all joined to the smallest of them."""
    node, other, starts, lengths, changed_before = _segments(batch)
    if node.size == 0:
        return _edges([node], [node], [node])
    smallest = np.minimum.reduceat(other, starts)  # others are <= node, a self-loop is the node itself
    smallest_by_row = np.repeat(smallest, lengths)
    moved = (other != smallest_by_row) & (other != node)
    # (node, smallest) was an edge already: it carries the large-star's changes. A node that is its own smallest has
    # only a self-loop, kept as above.
    return _edges(
        [node[starts], other[moved]],
        [smallest, smallest_by_row[moved]],
        [changed_before, np.ones(int(moved.sum()), dtype=bool)],
    )


def _smallest_neighbour(batch: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """On the final stars: a node's label is the smallest of itself and its neighbours (the centre)."""
    node, other, starts, _, _ = _segments(batch)
    if node.size == 0:
        return {"node": node, "label": node}
    return {"node": node[starts], "label": np.minimum(np.minimum.reduceat(other, starts), node[starts])}
