"""Union-find over pairs: connected components are the duplicate clusters."""

from __future__ import annotations

from collections.abc import Iterable


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
