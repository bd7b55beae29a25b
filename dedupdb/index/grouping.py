"""Which document each duplicate is judged against: stars cut from a cluster in keep-rule order.

A cluster (a connected component of verified pairs) chains: A is like B and B like C while A is unlike C,
so a component of licence files can hold members 0.07 similar to the one kept. Every removal decision
(`clean`, `export --unique`, reclaimable bytes) must rest on a likeness to the document kept, so a
component is cut into stars: every member of a star is an exact copy of its centre or a verified pair
with it at or above the threshold, and the centre is the member its keep rule puts first.

First a greedy pass (centre clustering): members are taken in keep-rule order; the first not yet placed
becomes a centre, and every member not yet placed that is an exact copy of it or a verified pair with it
joins its star. That pass alone can strand the strongest copies: O joins the star of an older X at 0.51,
and then O's 0.86 edit E, whose only partner is O, is a star of one that no decision ever acts on.
So a text left alone (copies of one text always share a star) then tries its partners, most similar first:

- a partner alone too: the two make a star;
- the centre of a star, ranked before it: it joins that star;
- a member placed less similar to its centre than to it: that member leaves its star and the two make
  a new one (centred on the one ranked first), which also gathers every text still alone that is a pair
  with its centre and ranked after it. A star left with its centre alone frees that centre to try again.

Each move raises the sum of the members' similarities to their centres, so the moves end; a text is tried
again only when a partner of it changes place, so a cluster takes about linear time. When they end, for
every text u alone and every partner v of u: v is not alone, and either v is a centre ranked after u
(joining would keep a document the rule puts after u: both are kept) or v is a member at least as
similar to its centre as to u, so no pair is lost to a weaker one.

The stars are derived from the stored pairs whenever a decision is asked for, so they follow every add,
change and removal without upkeep of their own; the components stay as the "related" view.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from dedupdb.errors import InputError

# One set of rules for every command that keeps one document of a group. Ties fall to the document stored
# first (a smaller document id), then to the key, so the same store always gives the same decisions.
KEEP_RULES = ("oldest", "newest", "first", "last", "longest", "shortest", "largest", "smallest")
DEFAULT_KEEP = "oldest"


class Decidable(Protocol):
    id: int          # document id: a smaller one was stored earlier
    key: str
    path: str
    content_id: int
    bytes: int
    mtime_ns: int


D = TypeVar("D", bound=Decidable)


def under(path: str, folder: Path | None) -> bool:
    return folder is not None and Path(path).is_relative_to(folder)


def keep_order(rule: str, chars: Mapping[int, int], prefer: Path | None = None) -> Callable[[Decidable], tuple]:
    """Sort key putting the document to keep first: under `prefer` first, then by the rule."""
    measures: dict[str, Callable[[Decidable], int]] = {
        "oldest": lambda d: d.mtime_ns,
        "newest": lambda d: -d.mtime_ns,
        "first": lambda d: d.id,
        "last": lambda d: -d.id,
        "longest": lambda d: -chars[d.content_id],
        "shortest": lambda d: chars[d.content_id],
        "largest": lambda d: -d.bytes,
        "smallest": lambda d: d.bytes,
    }
    if rule not in measures:
        raise InputError(f"unknown keep rule {rule!r}; use one of {', '.join(KEEP_RULES)}")
    measure = measures[rule]
    return lambda d: (prefer is not None and not under(d.path, prefer), measure(d), d.id, d.key)


@dataclass(frozen=True)
class Star:
    centre: Decidable
    members: list[tuple[Decidable, float, bool]]  # (document, similarity to the centre, exact copy of it)


def neighbours(pairs: Iterable[tuple[int, int, float]], threshold: float) -> dict[int, dict[int, float]]:
    """Content -> {content: Jaccard} over the pairs at or above the threshold (SimHash-only pairs below it
    justify no decision)."""
    out: dict[int, dict[int, float]] = {}
    for a, b, jaccard in pairs:
        if jaccard >= threshold:
            out.setdefault(a, {})[b] = jaccard
            out.setdefault(b, {})[a] = jaccard
    return out


def stars(documents: Sequence[D], near: Mapping[int, Mapping[int, float]], order: Callable[[D], tuple]) -> list[Star]:
    """Stars over the documents of one cluster (see the module's note): the greedy pass in keep-rule order, then
    moves that place the texts it left alone. Copies of one text always share a star, so both steps work on
    texts, each ranked by its first document."""
    ranked = sorted(documents, key=order)
    rank = {d.id: i for i, d in enumerate(ranked)}
    by_content: dict[int, list[D]] = {}
    for d in ranked:
        by_content.setdefault(d.content_id, []).append(d)
    texts = list(by_content)  # text i ranks before text j when i < j
    index = {content: i for i, content in enumerate(texts)}

    def partners(i: int) -> list[tuple[int, float]]:
        """Text i's partners in this cluster (pairs may name texts whose documents were left out)."""
        found = []
        for other, s in near.get(texts[i], {}).items():
            j = index.get(other)
            if j is not None and j != i:
                found.append((j, s))
        return found

    # Most similar first (ties to the one ranked first): a text left alone tries them in turn. Sorted only for
    # the texts that need it, few of a real cluster.
    by_likeness: dict[int, list[tuple[int, float]]] = {}

    def best_first(i: int) -> list[tuple[int, float]]:
        if i not in by_likeness:
            by_likeness[i] = sorted(partners(i), key=lambda p: (-p[1], p[0]))
        return by_likeness[i]

    centre = list(range(len(texts)))  # the text whose star holds text i (i itself for a centre)
    similarity = [0.0] * len(texts)   # text i's similarity to its centre (0 for a centre)
    size = [0] * len(texts)           # other texts in the star text i is the centre of

    placed = [False] * len(texts)
    for i in range(len(texts)):
        if placed[i]:
            continue
        placed[i] = True
        for j, s in partners(i):
            if not placed[j]:  # only texts ranked after i are still free here
                placed[j], centre[j], similarity[j] = True, i, s
                size[i] += 1

    def alone(i: int) -> bool:
        return centre[i] == i and size[i] == 0

    # Texts left alone, first in keep order first; one is queued again whenever a partner of it changes place.
    queue = [i for i in range(len(texts)) if alone(i)]
    queued = set(queue)

    def changed(i: int) -> None:
        for j in [i, *(j for j, _ in partners(i))]:
            if alone(j) and j not in queued:
                heapq.heappush(queue, j)
                queued.add(j)

    while queue:
        u = heapq.heappop(queue)
        queued.discard(u)
        if not alone(u):
            continue
        for v, s in best_first(u):
            if centre[v] == v and size[v] > 0:
                if v < u:  # join a star whose centre the keep rule still puts first
                    centre[u], similarity[u] = v, s
                    size[v] += 1
                    changed(u)
                    break
            elif alone(v) or similarity[v] < s:
                # v alone, or placed less similar than it is to u: u and v make a star of their own.
                moved = [u, v]
                if not alone(v):
                    old = centre[v]
                    size[old] -= 1
                    moved.append(old)  # left alone if v was its last member
                hub, member = min(u, v), max(u, v)
                centre[hub], similarity[hub], size[hub] = hub, 0.0, 1
                centre[member], similarity[member] = hub, s
                for w, t in partners(hub):
                    if w > hub and alone(w):
                        centre[w], similarity[w] = hub, t
                        size[hub] += 1
                        moved.append(w)
                for i in moved:
                    changed(i)
                break

    members: dict[int, list[tuple[D, float, bool]]] = {i: [] for i in range(len(texts)) if centre[i] == i}
    for j, content in enumerate(texts):
        if centre[j] != j:
            members[centre[j]] += [(d, similarity[j], False) for d in by_content[content]]
    out = []
    for i, joined in members.items():  # centres in keep order
        first, *copies = by_content[texts[i]]
        joined += [(d, 1.0, True) for d in copies]
        joined.sort(key=lambda item: rank[item[0].id])
        out.append(Star(first, joined))
    return out
