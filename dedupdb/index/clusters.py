"""Union-find over pairs: connected components are the duplicate clusters."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np


class UnionFind:
    def __init__(self) -> None:
        self._parent: dict[int, int] = {}

    def find(self, x: int) -> int:
        parent = self._parent
        root = parent.setdefault(x, x)
        while root != parent[root]:
            root = parent[root]
        while parent[x] != root:  # path compression
            parent[x], x = root, parent[x]
        return root

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            # The smaller id becomes the root so a cluster is always named by its smallest member.
            if rb < ra:
                ra, rb = rb, ra
            self._parent[rb] = ra

    def groups(self) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for x in list(self._parent):
            out.setdefault(self.find(x), []).append(x)
        return out


def components(nodes: Iterable[int], edges: Iterable[tuple[int, int]]) -> dict[int, int]:
    """Each node mapped to the smallest node of its connected component."""
    uf = UnionFind()
    for node in nodes:
        uf.find(node)
    for a, b in edges:
        uf.union(a, b)
    return {node: root for root, members in uf.groups().items() for node in members}


def dense_components(size: int, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """For nodes 0..size-1 and edges (a[i], b[i]): each node's smallest connected node, vectorised for millions
    of edges. Each round hooks every root under the smallest root it has an edge to, jumps pointers until every
    node points at its root, and contracts the edges onto the roots: a chain converges in a few rounds, not one a
    node. Labels are int32 while nodes allow (4 bytes a node, and 4 an edge end)."""
    index_type = np.int32 if size < 2**31 else np.int64
    parent = np.arange(size, dtype=index_type)
    u, v = np.asarray(a).astype(index_type, copy=False), np.asarray(b).astype(index_type, copy=False)
    while True:
        # u and v are roots here: an edge inside one tree is done with for good.
        crossing = u != v
        u, v = u[crossing], v[crossing]
        if u.size == 0:
            return parent
        # parent[x] <= x always holds and only decreases, so the parents stay a forest.
        np.minimum.at(parent, u, v)
        np.minimum.at(parent, v, u)
        while True:  # pointer jumping: log2(depth) passes until every node points at its root
            grandparent = parent[parent]
            if np.array_equal(grandparent, parent):
                break
            parent[:] = grandparent
        u, v = parent[u], parent[v]
