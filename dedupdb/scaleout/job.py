"""A scale-out job on Ray Data: the stages of stages.py, one after another, each materialized so that its time,
rows and bytes are measured and a later stage reads it from the object store (spilled to disk when it outgrows
memory).

    read      shards -> records (one task a shard, the engine's parsers)
    sketch    records -> documents and sketches (sketch_records, as `add`'s workers run it)
    texts     sketches shuffled by text -> one sketch per distinct text
    idf       word buckets shuffled by bucket -> the corpus document frequencies (summed on the driver, 4 MiB;
              written as idf.bin, which SimHash no longer reads: its weights are fixed tables, weights.py)
    sign      sketches -> signatures (each SimHash as the sketching stage computed it)
    candidates  index rows shuffled by key -> the pairs sharing a key, shuffled by pair -> distinct pairs
    verify    pairs and sketches shuffled by a, then by b -> pairs judged by the store's rule
    components  verified pairs -> connected components (components.py)
    clusters  documents shuffled by component -> stars in keep-rule order and the pairs of documents
    write     Parquet (layout.py); with unique, the kept records of each shard in its format

Grouping is done by partition (a key's hash modulo the partitions), each partition handled whole by vectorised
code: Ray's map_groups calls its function once a group, far too often for one group a key.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from dedupdb.config import Settings
from dedupdb.errors import DedupError, InputError
from dedupdb.index.lsh import Candidates, scheme_meta
from dedupdb.ingest.records import RecordOptions
from dedupdb.scaleout import stages
from dedupdb.scaleout.inputs import Shard
from dedupdb.scaleout.inputs import shards as find_shards
from dedupdb.scaleout.layout import CLUSTERS, DOCUMENTS, IDF, PAIRS, SIGNATURES, UNIQUE, Manifest
from dedupdb.text.weights import DF_BUCKETS

# Rows of a partition handled whole by one call: partitions are made at least this small (and at least two a
# CPU, so every CPU has work while the largest is still going).
ROWS_PER_PARTITION = 200_000
# Records a sketching call takes: as add's workers take them (a few thousand keep numba's per-call cost small).
SKETCH_BATCH = 2000
# Records of a block sketched by one task, at most (see Job.run).
SKETCH_BLOCK_ROWS = 50_000

Progress = Callable[[str, float, int], None]  # (stage, seconds, rows)


class Job:
    def __init__(self, settings: Settings, scheme: Candidates, keep: str = "first", progress: Progress | None = None,
                 partitions: int | None = None) -> None:
        if keep not in stages.JOB_KEEP_RULES:
            raise InputError(f"unknown keep rule {keep!r} for a job; use one of {', '.join(stages.JOB_KEEP_RULES)}")
        self.settings = settings
        self.scheme = scheme
        self.keep = keep
        self.progress = progress
        self._partitions = partitions
        self.stages: list[dict] = []

    # --- the run ------------------------------------------------------------------------------------------------

    def run(self, inputs: list[str], out: Path, options: RecordOptions, unique: bool = False) -> Manifest:
        import ray

        found = find_shards(inputs, options)
        out = _empty_folder(out)
        cpus = max(1, int(ray.cluster_resources().get("CPU", 1)))
        self._cpus = cpus
        records = self._stage("read", lambda: _records(found))
        # A shard is read by one task into one block: the records are cut into at least two blocks a CPU, so that
        # one large shard is sketched by every CPU, and no more than that (at most SKETCH_BLOCK_ROWS each) since
        # every block costs each later shuffle a piece per partition.
        blocks = max(2 * cpus, math.ceil(records.count() / SKETCH_BLOCK_ROWS))
        sketched = self._stage("sketch", lambda: records.repartition(blocks).map_batches(
            stages.sketch_table, fn_kwargs={"settings": self.settings}, batch_size=SKETCH_BATCH, batch_format="pyarrow"))
        records = None  # each stage's input is let go once it is used, so the object store holds about two stages
        failed = [{"path": r["key"], "reason": r["bad"]} for r in _where(sketched, _is_failed).take_all()]
        bad = _where(sketched, _is_bad_record)
        bad_count = bad.count()
        bad_sample = [{"where": r["key"], "reason": r["bad"]} for r in bad.take(100)] if bad_count else []
        # Only what the later stages need of a document travels on (its sketch leaves with its text's row).
        documents = _where(sketched, _is_good).select_columns(
            [*stages.DOCUMENT_SCHEMA.names, "chars", "simhashed"]).materialize()
        texts = self._stage("texts", lambda: self._grouped(
            _where(sketched, _carries_sketch).select_columns([*stages.SKETCH_SCHEMA.names, "ordinal"]),
            "content", stages.first_per_content, documents.count()))
        sketched = None
        df, worded = self._idf(texts)
        signatures = self._stage("sign", lambda: texts.map_batches(
            stages.signatures, fn_kwargs={"settings": self.settings},
            batch_size=SKETCH_BATCH, batch_format="pyarrow"))
        texts_count = texts.count()
        texts = None
        candidates = self._stage("candidates", lambda: self._candidates(signatures))
        verified = self._stage("verify", lambda: self._verify(candidates, signatures))
        candidates_count = candidates.count()
        candidates = None
        nodes, labels = self._components(verified)
        clustered = self._stage("clusters", lambda: self._clusters(documents, verified, nodes, labels))
        self._stage_write(out, documents, signatures, clustered)
        (out / IDF).write_bytes(df)
        manifest = Manifest(
            settings=self.settings.to_meta(), scheme=scheme_meta(self.scheme), inputs=[s.as_dict() for s in found],
            idf_documents=worded, keep=self.keep, stages=self.stages, bad_records=bad_sample, failed_inputs=failed,
            counts={"records": documents.count(), "bad_records": bad_count, "failed_inputs": len(failed),
                    "texts": texts_count,
                    "candidate_pairs": candidates_count, "verified_pairs": verified.count(),
                    "clustered_documents": _where(clustered, _is_cluster).count(),
                    "document_pairs": _where(clustered, _is_pair).count()},
        )
        if unique:
            kept = self._stage("unique", lambda: _write_unique(found, clustered, out / UNIQUE))
            manifest.counts["unique_records"] = int(sum(kept.to_pandas()["kept"])) if kept.count() else 0
        manifest.write(out)
        return manifest

    def _stage(self, name: str, build):
        started = time.perf_counter()
        dataset = build().materialize()
        self._record(name, time.perf_counter() - started, dataset.count(), dataset.size_bytes())
        return dataset

    def _record(self, name: str, seconds: float, rows: int, size: int) -> None:
        """A stage's time, rows and bytes into the manifest, and its line to whoever follows the job."""
        self.stages.append({"stage": name, "seconds": round(seconds, 3), "rows": rows, "bytes": size})
        if self.progress:
            self.progress(name, seconds, rows)

    def partitions(self, rows: int) -> int:
        if self._partitions:
            return self._partitions
        return max(2 * self._cpus, math.ceil(rows / ROWS_PER_PARTITION))

    def _grouped(self, dataset, column: str, fn, rows: int, **kwargs):
        """fn applied to each partition of the dataset by column's hash: every row of one value in one call."""
        parts = self.partitions(rows)

        def tag(table: pa.Table) -> pa.Table:
            values = table.column(column).to_numpy(zero_copy_only=False)
            return table.append_column("part", pa.array(_mixed(values) % parts))

        def untagged(table: pa.Table) -> pa.Table:
            return fn(table.drop_columns(["part"]), **kwargs)

        return dataset.map_batches(tag, batch_format="pyarrow").groupby("part").map_groups(untagged, batch_format="pyarrow")

    # --- stages -------------------------------------------------------------------------------------------------

    def _idf(self, texts) -> tuple[bytes, int]:
        """The corpus document frequencies of the distinct texts' word buckets, and the texts with words."""
        started = time.perf_counter()
        counts = texts.map_batches(stages.bucket_counts, batch_format="pyarrow")
        summed = self._grouped(counts, "bucket", stages.sum_bucket_counts, texts.count()).materialize()
        df = np.zeros(DF_BUCKETS, np.uint32)
        worded = 0
        for batch in summed.iter_batches(batch_format="numpy", batch_size=1 << 16):
            df[batch["bucket"].astype(np.intp)] += batch["texts"].astype(np.uint32)
            worded += int(batch["worded"].sum())
        self._record("idf", time.perf_counter() - started, summed.count(), summed.size_bytes())
        return df.astype("<u4").tobytes(), worded

    def _candidates(self, signatures):
        rows = signatures.map_batches(stages.band_rows, fn_kwargs={"settings": self.settings, "scheme": self.scheme},
                                      batch_size=SKETCH_BATCH, batch_format="pyarrow")
        estimate = signatures.count() * 64
        pairs = self._grouped(rows, "key", stages.candidate_pairs, estimate)
        return self._grouped(pairs, "a", stages.distinct_pairs, estimate).materialize()

    def _verify(self, candidates, signatures):
        import ray.data

        if candidates.count() == 0:
            return ray.data.from_arrow(stages.VERIFIED_SCHEMA.empty_table())
        sketches = signatures.map_batches(stages.sketch_rows, batch_format="pyarrow")
        rows = candidates.count() + signatures.count()
        carried = self._grouped(candidates.map_batches(stages.pair_rows, batch_format="pyarrow").union(sketches),
                                "a", stages.carry_left, rows)
        # The second round groups pairs by b and sketches by their own content (in a): one join column for both.
        joined = carried.union(sketches).map_batches(_join_on_b, batch_format="pyarrow")
        return self._grouped(joined, "join", _judge_joined, rows, settings=self.settings)

    def _components(self, verified) -> tuple[np.ndarray, np.ndarray]:
        from dedupdb.scaleout.components import labels

        started = time.perf_counter()
        nodes, found = labels(verified.select_columns(["a", "b"]), verified.count())
        self._record("components", time.perf_counter() - started, len(nodes), 0)
        return nodes, found

    def _clusters(self, documents, verified, nodes: np.ndarray, labels: np.ndarray):
        import ray

        pairs = pa.concat_tables([stages.VERIFIED_SCHEMA.empty_table(),
                                  *verified.iter_batches(batch_size=None, batch_format="pyarrow")])
        arrays = {
            "a": pairs.column("a").to_numpy(), "b": pairs.column("b").to_numpy(),
            "jaccard": pairs.column("jaccard").to_numpy(),
            "hamming": pc.fill_null(pairs.column("hamming"), -1).to_numpy().astype(np.int64),
        }
        arrays["cluster"] = _label(nodes, labels, arrays["a"])
        pairs_ref, labels_ref = ray.put(arrays), ray.put((nodes, labels))
        parts = self.partitions(documents.count())

        def tag(table: pa.Table) -> pa.Table:
            known_nodes, known_labels = ray.get(labels_ref)
            cluster = _label(known_nodes, known_labels, table.column("content").to_numpy())
            return table.append_column("cluster", pa.array(cluster)).append_column(
                "part", pa.array(_mixed(cluster) % parts))

        settings, keep = self.settings, self.keep

        def cut(table: pa.Table) -> pa.Table:
            everything = ray.get(pairs_ref)
            part = int(table.column("part")[0].as_py())
            mine = (_mixed(everything["cluster"]) % parts) == part
            simhashed = set(table.filter(table.column("simhashed")).column("content").to_pylist())
            clusters, pairs_out = stages.cluster_partition(
                table, {k: v[mine] for k, v in everything.items()}, settings, keep, simhashed)
            return _combined(clusters, pairs_out)

        return documents.map_batches(tag, batch_format="pyarrow").groupby("part").map_groups(cut, batch_format="pyarrow")

    def _stage_write(self, out: Path, documents, signatures, clustered) -> None:
        started = time.perf_counter()
        # In input order (the part files too), so an import numbers documents as add would, and "first" and
        # "last" mean there what they mean here.
        documents.select_columns(list(stages.DOCUMENT_SCHEMA.names)).sort("ordinal").write_parquet(str(out / DOCUMENTS))
        signatures.sort("first").write_parquet(str(out / SIGNATURES))  # so import numbers texts as add would
        _where(clustered, _is_pair).select_columns(list(stages.PAIR_SCHEMA.names)).write_parquet(
            str(out / PAIRS))
        _where(clustered, _is_cluster).select_columns(list(stages.CLUSTER_SCHEMA.names)).write_parquet(
            str(out / CLUSTERS))
        for folder in (DOCUMENTS, SIGNATURES, PAIRS, CLUSTERS):
            (out / folder).mkdir(exist_ok=True)  # a dataset of no rows writes no file, and no folder
        self._record("write", time.perf_counter() - started, 0, 0)


# --- helpers run inside Ray tasks (module level: they pickle by reference) ---------------------------------------

def _each_shard(found: list[Shard], fn):
    """fn(batch of one shard's index) in a task of its own for each shard."""
    import ray

    items = ray.data.from_items([{"index": i} for i in range(len(found))], override_num_blocks=len(found))
    return items.map_batches(fn, batch_size=1, batch_format="numpy")


def _records(found: list[Shard]):
    def read(batch: dict) -> object:
        for index in batch["index"].tolist():
            yield from stages.read_shard(index, found[index])

    return _each_shard(found, read)


def _mixed(values: np.ndarray) -> np.ndarray:
    """A well-spread non-negative hash of int64 values (content numbers and keys are hashes already, but pair
    codes and small test values are not), so that partitions are even."""
    x = values.astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    x ^= x >> np.uint64(29)
    return (x >> np.uint64(1)).astype(np.int64)


def _label(nodes: np.ndarray, labels: np.ndarray, contents: np.ndarray) -> np.ndarray:
    """The component of each content: its label, or itself when it is in no verified pair."""
    if len(nodes) == 0:
        return contents.astype(np.int64)
    at = np.minimum(np.searchsorted(nodes, contents), len(nodes) - 1)
    return np.where(nodes[at] == contents, labels[at], contents).astype(np.int64)


def _where(dataset, predicate):
    """The rows of a dataset for which predicate(table) holds (a boolean array), by pyarrow."""
    return dataset.map_batches(lambda table: table.filter(predicate(table)), batch_format="pyarrow")


def _is_failed(table: pa.Table):
    return table.column("failed")


def _is_bad_record(table: pa.Table):
    return pc.and_(pc.is_valid(table.column("bad")), pc.invert(table.column("failed")))


def _is_good(table: pa.Table):
    return pc.is_null(table.column("bad"))


def _carries_sketch(table: pa.Table):
    return pc.is_valid(table.column("minhash"))


def _is_cluster(table: pa.Table):
    return pc.equal(table.column("kind"), "cluster")


def _is_pair(table: pa.Table):
    return pc.equal(table.column("kind"), "pair")


def _is_dropped(table: pa.Table):
    return pc.and_(_is_cluster(table), pc.invert(pc.fill_null(table.column("keep"), True)))


def _join_on_b(table: pa.Table) -> pa.Table:
    is_sketch = table.column("is_sketch")
    return table.append_column("join", pc.if_else(is_sketch, table.column("a"), table.column("b")))


def _judge_joined(table: pa.Table, settings: Settings) -> pa.Table:
    return stages.judge_pairs(table.drop_columns(["join"]), settings)


_COMBINED_SCHEMA = pa.schema([("kind", pa.string()), *stages.CLUSTER_ROW_SCHEMA,
                              *(f for f in stages.PAIR_SCHEMA if f.name not in stages.CLUSTER_ROW_SCHEMA.names)])


def _combined(clusters: pa.Table, pairs: pa.Table) -> pa.Table:
    """Clusters and pairs in one table (a map_groups call returns one), told apart by kind."""
    def widen(table: pa.Table, kind: str) -> pa.Table:
        columns = {name: table.column(name) for name in table.column_names}
        return stages.padded(_COMBINED_SCHEMA, table.num_rows, {**columns, "kind": pa.array([kind] * table.num_rows)})

    return pa.concat_tables([widen(clusters, "cluster"), widen(pairs, "pair")])


def _write_unique(found: list[Shard], clustered, folder: Path):
    """Each shard's records but those a cluster drops, written as a shard of the same format (uncompressed)."""
    import ray

    from dedupdb.scaleout.unique import write_kept

    dropped: dict[int, list[str]] = {}
    for batch in _where(clustered, _is_dropped).select_columns(["input", "record"]).iter_batches(
            batch_format="pyarrow"):
        for index, record in zip(batch.column("input").to_pylist(), batch.column("record").to_pylist()):
            dropped.setdefault(index, []).append(record)
    folder.mkdir(parents=True, exist_ok=True)
    refs = ray.put(dropped)

    def write(batch: dict) -> dict:
        drop = ray.get(refs)
        kept = [write_kept(i, found[i], set(drop.get(i, ())), folder) for i in batch["index"].tolist()]
        return {"index": batch["index"], "kept": np.array(kept, np.int64)}

    return _each_shard(found, write)


def _empty_folder(out: Path) -> Path:
    out = Path(out).expanduser()
    try:
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise InputError(f"{out}: the output folder must be new or empty")
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise InputError(f"{out}: cannot be made ({exc.strerror or exc})") from None
    return out.resolve()


def start_ray(address: str | None, workers: int | None, quiet: bool = True) -> None:
    """Connect to a cluster at address, or start a local Ray runtime with `workers` CPUs (default: all)."""
    import ray

    if quiet:  # the job reports its stages itself; Ray's and Ray Data's notes would bury them
        logging.getLogger("ray").setLevel(logging.WARNING)
        logging.getLogger("ray.data").setLevel(logging.CRITICAL)  # a failed task's trace: the error says it in a line
    if ray.is_initialized():
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # a local runtime on loopback needs no token
    kwargs = {"include_dashboard": False, "log_to_driver": not quiet, "logging_level": logging.WARNING}
    if address:
        # The cluster runs this very dedupdb: its package travels with the job (its dependencies must be
        # installed on the nodes, as `pip install "dedupdb[ray]"` installs them).
        import dedupdb

        ray.init(address=address, runtime_env={"py_modules": [str(Path(dedupdb.__file__).parent)]}, **kwargs)
    else:
        ray.init(num_cpus=workers or os.cpu_count() or 1, **kwargs)


def run(inputs: list[str], out: Path, settings: Settings, scheme: Candidates, options: RecordOptions,
        address: str | None = None, workers: int | None = None, keep: str = "first", unique: bool = False,
        progress: Progress | None = None, bars: bool = False) -> Manifest:
    """Run a job: see the module's note. bars: Ray Data's own progress bars (on a terminal)."""
    import ray.data

    start_ray(address, workers)
    context = ray.data.DataContext.get_current()
    context.enable_progress_bars = bars
    # Sort-based shuffles run as tasks; the hash shuffle starts aggregator actors for each groupby, several seconds
    # apiece (9 s against 0.3 s for a groupby of 5,000 rows into 8 partitions here, 5 s against 0.3 s for 500,000).
    from ray.data.context import ShuffleStrategy

    context.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    context.print_on_execution_start = False
    try:
        return Job(settings, scheme, keep, progress).run(inputs, Path(out), options, unique)
    except Exception as exc:
        # An error of dedupdb's raised in a task reaches the driver wrapped in Ray's, whose text is the task's
        # whole trace: the user gets dedupdb's one line.
        cause = getattr(exc, "cause", None)
        if isinstance(cause, DedupError):
            raise InputError(str(cause)) from None
        raise
