"""Which document each duplicate is judged against: stars cut from a cluster in keep-rule order.

A cluster (a connected component of verified pairs) chains: A is like B and B like C while A is unlike C,
so a component of licence files can hold members 0.07 similar to the one kept. Every removal decision
(`clean`, `export --unique`, reclaimable bytes) must rest on a likeness to the document kept, so a
component is cut into stars (greedy centre clustering): members are taken in keep-rule order; the first
not yet placed becomes a centre and keeps its place, and every member not yet placed that is an exact
copy of it, or a verified pair with it at or above the threshold, joins its star. Each star's centre is
the document its keep rule prefers, and each other member is justified by its own similarity to it.

The stars are derived from the stored pairs whenever a decision is asked for, so they follow every add,
change and removal without upkeep of their own; the components stay as the "related" view.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, TypeVar

from .errors import InputError

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
    """Greedy stars over the documents of one cluster, in keep-rule order (see the module's note).
    Runs in time linear in documents and pairs: a centre looks only at its own copies and neighbours."""
    ranked = sorted(documents, key=order)
    rank = {d.id: i for i, d in enumerate(ranked)}
    by_content: dict[int, list[D]] = {}
    for d in ranked:
        by_content.setdefault(d.content_id, []).append(d)
    placed: set[int] = set()
    out = []
    for centre in ranked:
        if centre.id in placed:
            continue
        placed.add(centre.id)
        joined: list[tuple[D, float, bool]] = [
            (d, 1.0, True) for d in by_content[centre.content_id] if d.id not in placed
        ]
        for other, similarity in near.get(centre.content_id, {}).items():
            joined += [(d, similarity, False) for d in by_content.get(other, ()) if d.id not in placed]
        joined.sort(key=lambda item: rank[item[0].id])
        placed.update(d.id for d, _, _ in joined)
        out.append(Star(centre, joined))
    return out
