#!/usr/bin/env python
"""Connected components of the scale-out job: labelling on the driver against large-star / small-star on Ray Data.

For each edge count, a random graph shaped like near-duplicate clusters (content numbers drawn in [0, 2**62);
cluster sizes Zipf-distributed up to a hundredth of the edge count: two thirds pairs, a few clusters of thousands;
each a random tree, a third of it chained, plus half as many extra edges inside the cluster) is made into a Ray Data
dataset on a local Ray (--cpus CPUs) and labelled the two ways `dedupdb.scaleout.components.labels` chooses between:

  driver   gather the edges to the driver (iter_batches) and run driver_labels (also timed alone)
  star     star_labels on the dataset (--partitions groups a step, by default one per CPU), then gather node and
           label

Each measurement runs in a fresh process, after a warm-up on a small graph (a job's Ray workers are already up),
with the graph made by a Ray task, so the driver's peak RSS (VmHWM, reset just before the timed call; it counts
the shared object-store pages the driver maps) is the labelling's own. Where both ways run, their labels are checked
equal.

Usage:
    python scripts/bench_components.py                              # 1e4, 1e5, 1e6, 3e6 edges, both ways (~3 min)
    python scripts/bench_components.py --edges 1e5,1e6 --star-max 1e6 --partitions 8
    python scripts/bench_components.py --edges 1e7,3e7 --star-max 0  # the driver only
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def near_duplicate_graph(edge_count: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """edge_count edges (a, b) of int64 content numbers (a few fewer for tiny counts), clustered as near-duplicates."""
    rng = np.random.default_rng(seed)
    largest = max(2, edge_count // 100)
    # Each cluster of s nodes gets about 1.5 (s - 1) edges; draw sizes until they pass the edge count.
    sizes = np.minimum(1 + rng.zipf(2.2, size=edge_count), largest)
    sizes = sizes[: int(np.searchsorted(np.cumsum(1.4 * (sizes - 1)), edge_count)) + 1]
    node_count = int(sizes.sum())
    starts = np.cumsum(sizes) - sizes
    cluster_start = np.repeat(starts, sizes)
    cluster_size = np.repeat(sizes, sizes)
    position = np.arange(node_count) - cluster_start
    member = position > 0
    # A random recursive tree (shallow), a third of it chained to the previous node (a chain of edits).
    earlier = np.floor(rng.random(node_count) * position).astype(np.int64)
    chained = rng.random(node_count) < 1 / 3
    parent_position = np.where(chained, position - 1, earlier)
    tree_a = np.flatnonzero(member)
    tree_b = (cluster_start + parent_position)[member]
    extra_from = rng.choice(tree_a, size=tree_a.size // 2) if tree_a.size else tree_a
    extra_to = cluster_start[extra_from] + np.floor(rng.random(extra_from.size) * cluster_size[extra_from]).astype(
        np.int64
    )
    distinct = extra_to != extra_from
    ends_a = np.concatenate([tree_a, extra_from[distinct]])
    ends_b = np.concatenate([tree_b, extra_to[distinct]])
    content = rng.integers(0, 2**62, size=node_count, dtype=np.int64)
    order = rng.permutation(ends_a.size)[:edge_count]
    swap = rng.random(order.size) < 0.5
    a, b = content[ends_a[order]], content[ends_b[order]]
    return np.where(swap, b, a), np.where(swap, a, b)


def _rss_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _reset_peak_rss() -> None:
    Path("/proc/self/clear_refs").write_text("5")  # Linux: resets VmHWM to the current RSS


def edge_table(edge_count: int, seed: int):
    import pyarrow as pa

    a, b = near_duplicate_graph(edge_count, seed)
    return pa.table({"a": a, "b": b})


def measure(way: str, edge_count: int, seed: int, cpus: int, partitions: int) -> dict:
    """One timed run, in this process: seconds, driver RSS before and at peak, and a digest of the labels.

    The graph is made by a Ray task, as a job's pairs are, so the driver holds none of it before the timed call."""
    import ray

    from dedupdb.scaleout import components

    ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    make_table = ray.remote(edge_table)
    limit = edge_count if way == "driver" else -1
    # Warm up on a small graph first: in a job, Ray's workers are already running and have imported numpy.
    components.labels(ray.data.from_arrow_refs([make_table.remote(1000, seed + 1)]), 1000, limit, partitions or None)
    edges = ray.data.from_arrow_refs([make_table.remote(edge_count, seed)]).materialize()
    _reset_peak_rss()
    result: dict = {"way": way, "edges": edges.count(), "rss_before_mb": _rss_mb("VmRSS")}
    started = time.perf_counter()
    nodes, labels = components.labels(edges, edge_count, driver_limit=limit, partitions=partitions or None)
    result["seconds"] = time.perf_counter() - started
    result["peak_rss_mb"] = _rss_mb("VmHWM")
    result["nodes"] = int(nodes.size)
    result["components"] = int(np.unique(labels).size)
    result["digest"] = int(np.bitwise_xor.reduce(nodes * 31 + labels)) if nodes.size else 0
    if way == "driver":
        ends = components._gather(edges, ("a", "b"))
        a, b = ends[: ends.size // 2], ends[ends.size // 2:]
        started = time.perf_counter()
        components.driver_labels(a, b)
        result["driver_labels_seconds"] = time.perf_counter() - started
    ray.shutdown()
    return result


def run_child(way: str, edge_count: int, args: argparse.Namespace) -> dict:
    command = [sys.executable, __file__, "--child", way, "--edges", str(edge_count), "--seed", str(args.seed),
               "--cpus", str(args.cpus), "--partitions", str(args.partitions)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"{way} at {edge_count} edges failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--edges", default="1e4,1e5,1e6,3e6", help="edge counts, comma-separated")
    parser.add_argument("--star-max", type=float, default=3e6, help="run star_labels up to this many edges")
    parser.add_argument("--partitions", type=int, default=0, help="groups of a star step (default: star_labels')")
    parser.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--child", choices=("driver", "star"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(measure(args.child, int(float(args.edges)), args.seed, args.cpus, args.partitions)))
        return

    print(f"{'edges':>10} {'nodes':>10} {'comps':>9} | {'driver_labels':>13} {'driver s':>9} {'peak MB':>8} "
          f"{'+MB':>7} | {'star s':>8} {'peak MB':>8} {'+MB':>7} | faster")
    for edge_count in (int(float(value)) for value in args.edges.split(",")):
        driver = run_child("driver", edge_count, args)
        star = run_child("star", edge_count, args) if edge_count <= args.star_max else None
        if star and (star["nodes"], star["components"], star["digest"]) != (
            driver["nodes"], driver["components"], driver["digest"]
        ):
            raise SystemExit(f"star and driver labels differ at {edge_count} edges: {star} {driver}")
        star_columns = (
            f"{star['seconds']:8.2f} {star['peak_rss_mb']:8.0f} {star['peak_rss_mb'] - star['rss_before_mb']:7.0f}"
            if star else f"{'skipped':>8} {'':>8} {'':>7}"
        )
        faster = "-" if not star else ("driver" if driver["seconds"] < star["seconds"] else "star")
        print(f"{driver['edges']:>10,} {driver['nodes']:>10,} {driver['components']:>9,} | "
              f"{driver['driver_labels_seconds']:13.3f} {driver['seconds']:9.3f} {driver['peak_rss_mb']:8.0f} "
              f"{driver['peak_rss_mb'] - driver['rss_before_mb']:7.0f} | {star_columns} | {faster}", flush=True)


if __name__ == "__main__":
    main()
