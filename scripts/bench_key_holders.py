#!/usr/bin/env python
"""What comparing a text with only the first texts under each of its index keys (KEY_HOLDERS_COMPARED) costs
and saves, on one batch against a store.

The first --batch records of a record file (JSONL with a "text" field) are fingerprinted as an add would, their
index rows looked up in the store (read only: nothing is added), and their candidate pairs made with every text
under a key compared, and then with each bound given. Every candidate is verified as an add verifies it, so the
near-duplicate pairs each bound leaves out are counted exactly, and, of those, the ones whose new text does not
reach the stored text's group through the pairs the bound keeps.

Usage (a store built by bench_query.py, and a record file of its next documents):
    python scripts/bench_key_holders.py --db /tmp/q10m.db --records next.jsonl --bounds 1000 256 64
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import dedupdb  # noqa: E402
from dedupdb.index.clusters import dense_components  # noqa: E402
from dedupdb.index.indexer import _shared_keys  # noqa: E402
from dedupdb.sketch.fingerprint import Fingerprinter, sketch_texts  # noqa: E402
from dedupdb.sketch.verify import Signature, SketchTable  # noqa: E402
from dedupdb.storage.store import Store  # noqa: E402
from dedupdb.text.hashing import distinct  # noqa: E402
from dedupdb.text.normalize import normalize  # noqa: E402

# The batch's texts take ids above every stored content's, as new contents do.
NEW_IDS = 1 << 29
VERIFY_AT_ONCE = 400_000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--db", type=Path, required=True, help="a store (opened read only)")
    parser.add_argument("--records", type=Path, required=True, help="JSONL with a text field, not in the store")
    parser.add_argument("--batch", type=int, default=16384, help="records in the batch (an add's largest batch)")
    parser.add_argument("--bounds", type=int, nargs="+", default=[1000, 256, 64])
    args = parser.parse_args()

    with open(args.records, encoding="utf-8") as fh:
        texts = [normalize(json.loads(line)["text"]) for _, line in zip(range(args.batch), fh)]
    store = Store.open(args.db, create=False, readonly=True)
    with tempfile.TemporaryDirectory() as folder, dedupdb.open(Path(folder) / "settings.db") as scratch:
        indexer = scratch.indexer  # the default settings and scheme, as the store was built with
        fps = Fingerprinter(indexer.settings).batch(sketch_texts(indexer.settings, texts))
        ids, keys = indexer.rows_of({NEW_IDS + i: fp for i, fp in enumerate(fps)})
        rows = np.unique(np.column_stack((keys.astype(np.uint64), ids.astype(np.uint64))), axis=0)
        new_keys, new_ids = rows[:, 0], rows[:, 1].astype(np.int64)
        started = time.perf_counter()
        stored_keys, stored_ids = store.match_index(distinct(new_keys))
        stored_ids = stored_ids.astype(np.int64)
        print(f"{len(texts):,} texts, {len(new_keys):,} index rows; {len(stored_keys):,} stored rows under their keys "
              f"({time.perf_counter() - started:.1f} s)")
        mine = SketchTable.of({NEW_IDS + i: Signature(fp.sketch, fp.simhash) for i, fp in enumerate(fps)})

        def verified(pairs: np.ndarray) -> list[tuple[int, int]]:
            out = []
            for start in range(0, len(pairs), VERIFY_AT_ONCE):
                part = pairs[start : start + VERIFY_AT_ONCE]
                wanted = distinct(part.ravel())
                theirs = SketchTable(*store.sketch_columns(wanted[wanted < NEW_IDS].tolist()))
                out += [(a, b) for a, b, _, _ in indexer.judge.pairs(SketchTable.joined([theirs, mine]), part)]
            return out

        every = _shared_keys(new_keys.copy(), new_ids.copy(), stored_keys, stored_ids.copy(), limit=1 << 40)
        every_codes = (every[:, 0] << 32) | every[:, 1]
        print(f"every text under a key compared: {len(every):,} candidate pairs")
        print("bound  candidates  near-duplicates kept  left out  left out, not in one group")
        for bound in args.bounds:
            pairs = _shared_keys(new_keys.copy(), new_ids.copy(), stored_keys, stored_ids.copy(), limit=bound)
            codes = (pairs[:, 0] << 32) | pairs[:, 1]
            lost = np.setdiff1d(every_codes, codes)
            kept_true = verified(pairs)
            lost_true = verified(np.column_stack((lost >> 32, lost & 0xFFFFFFFF)))
            apart = _not_joined(store, kept_true, lost_true)
            print(f"{bound:>5}  {len(pairs):>10,}  {len(kept_true):>20,}  {len(lost_true):>8,}  {apart:>26,}")
    store.close()


def _not_joined(store: Store, kept: list[tuple[int, int]], lost: list[tuple[int, int]]) -> int:
    """Of the pairs left out, those whose two texts the kept pairs do not put in one group (a stored text stands
    for its stored group)."""
    stored = sorted({c for pair in kept + lost for c in pair if c < NEW_IDS})
    cluster = store.clusters_of(stored)
    nodes: dict[tuple[str, int], int] = {}  # a stored group or a new text: its node number

    def node_of(content: int) -> int:
        return nodes.setdefault(("group", cluster[content]) if content < NEW_IDS else ("new", content), len(nodes))

    kept_ends = np.array([(node_of(a), node_of(b)) for a, b in kept], np.int64).reshape(-1, 2)
    lost_ends = np.array([(node_of(a), node_of(b)) for a, b in lost], np.int64).reshape(-1, 2)
    roots = dense_components(len(nodes), kept_ends[:, 0], kept_ends[:, 1])
    return int((roots[lost_ends[:, 0]] != roots[lost_ends[:, 1]]).sum())


if __name__ == "__main__":
    main()
