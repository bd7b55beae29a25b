"""The work of each stage of a scale-out job on one batch or one partition, as plain functions of Arrow tables and
numpy arrays: job.py hands them to Ray Data, tests call them directly. Every verdict comes from the functions
`dedupdb add` uses (sketch_records, Fingerprinter, index_rows, PairJudge, grouping.stars), so a job and a store
agree on what a near-duplicate is.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import numpy as np
import pyarrow as pa

from dedupdb.config import Settings
from dedupdb.errors import DedupError
from dedupdb.index.grouping import keep_order, neighbours, stars
from dedupdb.index.indexer import index_rows
from dedupdb.index.lsh import KEY_HOLDERS_COMPARED, Candidates
from dedupdb.ingest.pipeline import no_memory_for, sketch_records
from dedupdb.scaleout.inputs import Shard, ShardRecord, shard_records
from dedupdb.scaleout.layout import content_number, ordinal
from dedupdb.sketch.fingerprint import Fingerprint, Fingerprinter, Sketch
from dedupdb.sketch.verify import PairJudge, Signature
from dedupdb.text.hashing import ranges, run_starts, to_signed64, to_unsigned64
from dedupdb.text.weights import CorpusIdf

# --- reading --------------------------------------------------------------------------------------------------

RECORD_SCHEMA = pa.schema([
    ("key", pa.string()), ("input", pa.int32()), ("record", pa.string()), ("text", pa.string()),
    ("ordinal", pa.int64()), ("bytes", pa.int64()), ("bad", pa.string()), ("failed", pa.bool_()),
])


def read_shard(index: int, shard: Shard, rows: int = 4096):
    """The records of one shard as tables of RECORD_SCHEMA, `rows` at a time; a bad record is a row with its
    reason in `bad` (and no text), so the job can count and list them. A shard that cannot be read (no such
    column, not Parquet, corrupt compressed data) ends with a row keyed by the shard itself, `failed`, with the
    reason: the job goes on without it, as add goes on past a file it cannot read (keeping what was read)."""
    columns: dict[str, list] = {name: [] for name in RECORD_SCHEMA.names}
    items = shard_records(shard)
    while True:
        try:
            item = next(items)
        except StopIteration:
            break
        except (DedupError, OSError) as exc:
            reason = str(exc) if isinstance(exc, DedupError) else (exc.strerror or str(exc))
            for name, value in zip(RECORD_SCHEMA.names, (shard.uri, index, None, None, ordinal(index, 0), 0, reason, True)):
                columns[name].append(value)
            break
        good = isinstance(item, ShardRecord)
        columns["key"].append(f"{shard.uri}#{item.record_id}" if good else f"{shard.uri}:{item.line}")
        columns["input"].append(index)
        columns["record"].append(item.record_id if good else None)
        columns["text"].append(item.text if good else None)
        columns["ordinal"].append(ordinal(index, item.line))
        columns["bytes"].append(len(item.text.encode("utf-8")) if good else 0)
        columns["bad"].append(None if good else item.reason)
        columns["failed"].append(False)
        if len(columns["key"]) >= rows:
            yield pa.table(columns, schema=RECORD_SCHEMA)
            columns = {name: [] for name in RECORD_SCHEMA.names}
    if columns["key"]:
        yield pa.table(columns, schema=RECORD_SCHEMA)


# --- sketching ------------------------------------------------------------------------------------------------

DOCUMENT_SCHEMA = pa.schema([
    ("key", pa.string()), ("input", pa.int32()), ("record", pa.string()), ("content", pa.int64()),
    ("bytes", pa.int64()), ("ordinal", pa.int64()), ("snippet", pa.string()),
])
# A text's sketch as it leaves the sketching stage: what its signature needs, and its words for SimHash's IDF.
SKETCH_SCHEMA = pa.schema([
    ("content", pa.int64()), ("hash", pa.binary()), ("chars", pa.int64()), ("shingles", pa.int64()),
    ("minhash", pa.binary()), ("sketch", pa.binary()), ("simhash", pa.int64()), ("word_hashes", pa.binary()),
    ("word_counts", pa.binary()), ("word_buckets", pa.binary()), ("tokens", pa.int64()), ("fingerprints", pa.binary()),
])
# Each record's document, the sketch its text carries if it is the first of the table with that text (chars is
# every record's), whether its text has a SimHash (an exact pair is at distance 0 then), and why it was left out
# if it was.
SKETCHED_SCHEMA = pa.schema([*DOCUMENT_SCHEMA, *(f for f in SKETCH_SCHEMA if f.name != "content"),
                             ("simhashed", pa.bool_()), ("bad", pa.string()), ("failed", pa.bool_())])


def sketch_table(table: pa.Table, settings: Settings) -> pa.Table:
    """Documents and sketches of a table of records (SKETCHED_SCHEMA): each distinct text of the table is
    sketched once and its first record carries the sketch (the others leave those columns null); bad records
    pass through with their reason."""
    # In ordinal order, so that the record carrying a text's sketch is its first here: the smallest ordinal among
    # the carriers is the text's first document's, which ranks it under its keys (candidate_pairs).
    table = table.sort_by("ordinal")
    good = [i for i, bad in enumerate(table.column("bad").to_pylist()) if bad is None]
    texts = table.column("text").to_pylist()
    results = dict(zip(good, sketch_records(settings, [texts[i] for i in good])))
    out: dict[str, list] = {name: [] for name in SKETCHED_SCHEMA.names}
    for name in ("key", "input", "record", "bytes", "ordinal", "bad", "failed"):
        out[name] = table.column(name).to_pylist()
    simhashed = {h: _has_simhash(s, settings) for h, s, _ in results.values() if s is not None}
    chars = {h: s.chars for h, s, _ in results.values() if s is not None}  # every record's, for the keep rules
    for i in range(table.num_rows):
        content_hash, sketch, snippet = results.get(i, (None, None, ""))
        if snippet is None:  # no memory to sketch it: a bad record, as in an add
            out["bad"][i], snippet = no_memory_for(texts[i]), ""
        out["simhashed"].append(simhashed.get(content_hash, False))
        if content_hash is None and out["bad"][i] is None:
            out["bad"][i] = "no text"  # a record whose text normalizes to nothing is not stored by add either
        out["snippet"].append(snippet)
        out["content"].append(None if content_hash is None else content_number(content_hash))
        out["hash"].append(content_hash)
        for name, value in _sketch_columns(sketch).items():
            out[name].append(value)
        out["chars"][-1] = chars.get(content_hash)
    return pa.table(out, schema=SKETCHED_SCHEMA)


def _has_simhash(s: Sketch, settings: Settings) -> bool:
    """Whether the text gets a SimHash (Fingerprinter._simhashes): CJK text carries its own, other text has one
    when it has enough distinct words."""
    return s.simhash is not None if s.words is None else len(s.words[0]) >= settings.simhash_min_features


def _sketch_columns(s: Sketch | None) -> dict:
    if s is None:
        return {name: None for name in ("chars", "shingles", "minhash", "sketch", "simhash", "word_hashes",
                                        "word_counts", "word_buckets", "tokens", "fingerprints")}
    words = s.words
    return {
        "chars": s.chars, "shingles": s.shingles, "minhash": s.minhash.astype("<u2").tobytes(),
        "sketch": s.sketch.astype("<u4").tobytes(), "simhash": None if s.simhash is None else to_signed64(s.simhash),
        "word_hashes": None if words is None else words[0].astype("<u8").tobytes(),
        "word_counts": None if words is None else words[1].astype("<u4").tobytes(),  # 32 bits: it crosses a shuffle
        # The corpus IDF's buckets as add's workers hand them to the store, which counts them.
        "word_buckets": None if words is None else words[2].astype("<u4").tobytes(),
        "tokens": s.tokens,
        "fingerprints": None if s.fingerprints is None else s.fingerprints.astype("<u4").tobytes(),
    }


def first_per_content(table: pa.Table) -> pa.Table:
    """One sketch per text, of a partition holding every sketch of its texts: its first document's (the smallest
    ordinal), where the table has ordinals. Two texts whose content numbers agree (62 bits of their hashes) cannot
    be told apart downstream: that stops the job rather than merge them."""
    contents = table.column("content").to_numpy()
    if "ordinal" in table.column_names:
        order = np.lexsort((table.column("ordinal").to_numpy(), contents))
    else:
        order = np.argsort(contents, kind="stable")
    ordered = contents[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1]))) if len(ordered) else order
    hashes = table.column("hash").to_pylist()
    for start, end in zip(starts.tolist(), [*starts[1:].tolist(), len(order)]):
        first = hashes[order[start]]
        if any(hashes[order[j]] != first for j in range(start + 1, end)):
            raise RuntimeError(f"two distinct texts share the content number {int(ordered[start])}")
    return table.take(pa.array(order[starts]))


# --- corpus IDF -------------------------------------------------------------------------------------------------

def bucket_counts(table: pa.Table) -> pa.Table:
    """(bucket, texts) of one table of sketches: in how many of its texts each word bucket occurs, counted by the
    store's own CorpusIdf."""
    idf = CorpusIdf()
    idf.observe([np.frombuffer(b, "<u4") for b in table.column("word_buckets").to_pylist() if b is not None])
    present = np.flatnonzero(idf.df)
    worded = np.zeros(len(present), np.int64)
    worded[:1] = idf.documents  # the texts with words ride on the first row, summed with the rest
    return pa.table({"bucket": present.astype(np.int64), "texts": idf.df[present].astype(np.int64), "worded": worded})


def sum_bucket_counts(table: pa.Table) -> pa.Table:
    """The sums of bucket_counts rows of one partition of buckets."""
    buckets = table.column("bucket").to_numpy()
    texts = table.column("texts").to_numpy()
    found = np.unique(buckets)
    sums = np.zeros(len(found), np.int64)
    np.add.at(sums, np.searchsorted(found, buckets), texts)
    worded = np.zeros(len(found), np.int64)
    worded[:1] = table.column("worded").to_numpy().sum()
    return pa.table({"bucket": found, "texts": sums, "worded": worded})


# --- signatures and candidates ----------------------------------------------------------------------------------

SIGNATURE_SCHEMA = pa.schema([
    ("content", pa.int64()), ("hash", pa.binary()), ("chars", pa.int64()), ("shingles", pa.int64()),
    ("minhash", pa.binary()), ("sketch", pa.binary()), ("simhash", pa.int64()), ("fingerprints", pa.binary()),
    ("first", pa.int64()),  # the ordinal of the text's first document: which texts under a key are compared
])


def signatures(table: pa.Table, settings: Settings) -> pa.Table:
    """Signatures (SIGNATURE_SCHEMA) of a table of distinct sketches, as a store keeps them (each SimHash as its
    sketch carries it: weighted by fixed tables, weights.py)."""
    sketches = [_sketch_of(row) for row in table.to_pylist()]
    fingerprints = Fingerprinter(settings).batch(sketches)
    return pa.table({
        "content": table.column("content"), "hash": table.column("hash"), "chars": table.column("chars"),
        "shingles": table.column("shingles"), "minhash": table.column("minhash"), "sketch": table.column("sketch"),
        "simhash": pa.array([fp.simhash_signed for fp in fingerprints], pa.int64()),
        "fingerprints": table.column("fingerprints"), "first": table.column("ordinal"),
    }, schema=SIGNATURE_SCHEMA)


def _sketch_of(row: dict) -> Sketch:
    words = None
    if row["word_hashes"] is not None:
        words = (np.frombuffer(row["word_hashes"], "<u8"), np.frombuffer(row["word_counts"], "<u4").astype(np.int64),
                 np.frombuffer(row["word_buckets"], "<u4"))
    fingerprints = None if row["fingerprints"] is None else np.frombuffer(row["fingerprints"], "<u4")
    simhash = None if row["simhash"] is None else to_unsigned64(row["simhash"])
    return Sketch(row["hash"], row["chars"], row["shingles"], np.frombuffer(row["minhash"], "<u2"),
                  np.frombuffer(row["sketch"], "<u4"), simhash, words, row["tokens"], fingerprints)


def fingerprint_of(row: dict) -> Fingerprint:
    """A signatures row as the engine's Fingerprint."""
    fingerprints = None if row["fingerprints"] is None else np.frombuffer(row["fingerprints"], "<u4")
    simhash = None if row["simhash"] is None else to_unsigned64(row["simhash"])
    return Fingerprint(row["hash"], row["chars"], row["shingles"], np.frombuffer(row["minhash"], "<u2"),
                       np.frombuffer(row["sketch"], "<u4"), simhash, fingerprints)


def band_rows(table: pa.Table, settings: Settings, scheme: Candidates) -> pa.Table:
    """(key, content, first) of every index row of a table of signatures: one per LSH band and SimHash block
    pair, with the ordinal of the text's first document."""
    rows = table.to_pylist()
    fingerprints = {row["content"]: fingerprint_of(row) for row in rows}
    ids, keys = index_rows(settings, scheme, fingerprints)
    contents = np.array([row["content"] for row in rows], np.int64)
    order = np.argsort(contents)
    firsts = np.array([row["first"] for row in rows], np.int64)[order][np.searchsorted(contents[order], ids)]
    return pa.table({"key": keys.view(np.int64), "content": ids, "first": firsts})


def candidate_pairs(table: pa.Table, limit: int = KEY_HOLDERS_COMPARED) -> pa.Table:
    """(a, b), a < b, distinct: the contents of a partition of index rows (every row of its keys) that share a
    key, one of the two among the key's first `limit` texts, as a store meets them: a store numbers texts in the
    order it reads them, so a key's texts rank by their first document's ordinal (first)."""
    keys, ids, firsts = (table.column(name).to_numpy() for name in ("key", "content", "first"))
    order = np.lexsort((ids, firsts, keys))
    keys, ids = keys[order], ids[order]
    if len(keys):
        again = np.r_[False, (keys[1:] == keys[:-1]) & (ids[1:] == ids[:-1])]  # a content holds a key once
        keys, ids = keys[~again], ids[~again]
    positions = np.arange(len(keys))
    first = run_starts(keys)
    before = np.minimum(positions - first, limit)  # each row with the rows before it under its key, compared
    a, b = ids[np.repeat(positions, before)], ids[ranges(first, before)]
    return distinct_pairs_of(a, b)


def distinct_pairs_of(a: np.ndarray, b: np.ndarray) -> pa.Table:
    low, high = np.minimum(a, b), np.maximum(a, b)
    apart = low != high
    low, high = low[apart], high[apart]
    order = np.lexsort((high, low))
    low, high = low[order], high[order]
    keep = np.r_[True, (low[1:] != low[:-1]) | (high[1:] != high[:-1])] if len(low) else np.empty(0, bool)
    return pa.table({"a": low[keep].astype(np.int64), "b": high[keep].astype(np.int64)})


def distinct_pairs(table: pa.Table) -> pa.Table:
    """The distinct pairs of a partition holding every copy of its pairs."""
    return distinct_pairs_of(table.column("a").to_numpy(), table.column("b").to_numpy())


# --- verification: pairs joined with both sides' sketches ----------------------------------------------------------

# A verification round's rows: a pair (side "pair"), or a text's sketch (side "sketch": a is the content) to join
# on; the first round joins on a and carries a's sketch on, the second joins on b and judges.
JOIN_SCHEMA = pa.schema([
    ("a", pa.int64()), ("b", pa.int64()), ("is_sketch", pa.bool_()), ("sketch", pa.binary()),
    ("simhash", pa.int64()), ("sketch_a", pa.binary()), ("simhash_a", pa.int64()),
])
VERIFIED_SCHEMA = pa.schema([("a", pa.int64()), ("b", pa.int64()), ("jaccard", pa.float64()), ("hamming", pa.int32())])


def padded(schema: pa.Schema, rows: int, columns: dict) -> pa.Table:
    """A table of the schema holding these columns, and nulls in every other."""
    return pa.table({f.name: columns[f.name] if f.name in columns else pa.nulls(rows, f.type) for f in schema},
                    schema=schema)


def sketch_rows(table: pa.Table) -> pa.Table:
    """Signatures as the sketch rows of a verification round."""
    n = table.num_rows
    return padded(JOIN_SCHEMA, n, {"a": table.column("content"), "is_sketch": pa.array(np.ones(n, bool)),
                                   "sketch": table.column("sketch"), "simhash": table.column("simhash")})


def pair_rows(table: pa.Table) -> pa.Table:
    """Candidate pairs as the pair rows of the first verification round."""
    n = table.num_rows
    return padded(JOIN_SCHEMA, n, {"a": table.column("a"), "b": table.column("b"), "is_sketch": pa.array(np.zeros(n, bool))})


def _split(table: pa.Table) -> tuple[dict[int, tuple[bytes, int | None]], pa.Table]:
    is_sketch = table.column("is_sketch").to_numpy(zero_copy_only=False).astype(bool)
    sketches = table.filter(pa.array(is_sketch))
    found = dict(zip(sketches.column("a").to_pylist(), zip(sketches.column("sketch").to_pylist(),
                                                             sketches.column("simhash").to_pylist())))
    return found, table.filter(pa.array(~is_sketch))


def carry_left(table: pa.Table) -> pa.Table:
    """First round, a partition by a: each pair takes its a's sketch along (a pair whose a has none, which
    cannot happen in a job, is dropped)."""
    found, pairs = _split(table)
    a = pairs.column("a").to_pylist()
    held = [found.get(x) for x in a]
    keep = [h is not None for h in held]
    pairs = pairs.filter(pa.array(keep, pa.bool_()))
    held = [h for h in held if h is not None]
    return padded(JOIN_SCHEMA, pairs.num_rows, {
        "a": pairs.column("a"), "b": pairs.column("b"), "is_sketch": pa.array(np.zeros(pairs.num_rows, bool)),
        "sketch_a": pa.array([h[0] for h in held], pa.binary()), "simhash_a": pa.array([h[1] for h in held], pa.int64()),
    })


def judge_pairs(table: pa.Table, settings: Settings) -> pa.Table:
    """Second round, a partition by b: each pair judged with both sketches by the store's own rule (PairJudge)."""
    found, pairs = _split(table)
    signatures: dict[int, Signature] = {}
    rows = []
    for a, b, sketch_a, simhash_a in zip(pairs.column("a").to_pylist(), pairs.column("b").to_pylist(),
                                         pairs.column("sketch_a").to_pylist(), pairs.column("simhash_a").to_pylist()):
        if b not in found:
            continue
        signatures.setdefault(a, _signature(sketch_a, simhash_a))
        signatures.setdefault(b, _signature(*found[b]))
        rows.append((a, b))
    judged = _judge(settings).pairs(signatures, np.array(rows, np.int64).reshape(-1, 2)) if rows else []
    return pa.table({
        "a": pa.array([r[0] for r in judged], pa.int64()), "b": pa.array([r[1] for r in judged], pa.int64()),
        "jaccard": pa.array([r[2] for r in judged], pa.float64()),
        "hamming": pa.array([r[3] for r in judged], pa.int32()),
    }, schema=VERIFIED_SCHEMA)


def _signature(sketch: bytes, simhash: int | None) -> Signature:
    return Signature(np.frombuffer(sketch, "<u4"), None if simhash is None else to_unsigned64(simhash))


@lru_cache(maxsize=4)
def _judge(settings: Settings) -> PairJudge:
    return PairJudge(settings.threshold, settings.sketch_size)


# --- clusters: stars cut in keep-rule order, and the pairs of documents ---------------------------------------------

CLUSTER_SCHEMA = pa.schema([
    ("key", pa.string()), ("cluster", pa.int64()), ("keep", pa.bool_()), ("centre", pa.string()),
    ("similarity", pa.float64()),
])
PAIR_SCHEMA = pa.schema([
    ("a", pa.string()), ("b", pa.string()), ("jaccard", pa.float64()), ("hamming", pa.int32()), ("exact", pa.bool_()),
    ("a_content", pa.int64()), ("b_content", pa.int64()),
])
# A cluster row as the job handles it: with its document's input and record id, by which --unique drops it (a
# key alone cannot tell them apart: a record id may hold '#').
CLUSTER_ROW_SCHEMA = pa.schema([*CLUSTER_SCHEMA, ("input", pa.int32()), ("record", pa.string())])
JOB_KEEP_RULES = ("first", "last", "longest", "shortest")  # export --unique's


@dataclass(frozen=True)
class _Document:
    """A document as the keep rules see it (grouping.Decidable): its place in the input stands for its id."""

    id: int
    key: str
    path: str
    content_id: int
    bytes: int
    mtime_ns: int = 0
    input: int = 0
    record: str = ""


def cluster_partition(documents: pa.Table, pairs: dict[str, np.ndarray], settings: Settings, keep: str,
                      with_simhash: set[int]) -> tuple[pa.Table, pa.Table]:
    """(clusters (CLUSTER_ROW_SCHEMA), document pairs) of a partition holding every document of its clusters (documents with a
    `cluster` column, the smallest content of their connected component) and the verified pairs among them
    (arrays a, b, jaccard, hamming). A cluster is cut into stars as a store cuts it for its decisions; the pairs
    of documents are listed as `dedupdb pairs` lists them (every two copies of a text, exact; every document of
    one text with every document of the other). with_simhash: the contents that have a SimHash (an exact pair
    is at distance 0 then)."""
    order = keep_order(keep, dict(zip(documents.column("content").to_pylist(), documents.column("chars").to_pylist())))
    by_cluster: dict[int, list[_Document]] = {}
    for row in documents.to_pylist():
        path = row["key"][: -len(row["record"]) - 1]
        doc = _Document(row["ordinal"], row["key"], path, row["content"], row["bytes"], 0, row["input"], row["record"])
        by_cluster.setdefault(row["cluster"], []).append(doc)
    near_all = neighbours(zip(pairs["a"].tolist(), pairs["b"].tolist(), pairs["jaccard"].tolist()), settings.threshold)
    clusters: dict[str, list] = {name: [] for name in CLUSTER_ROW_SCHEMA.names}
    for cluster, members in by_cluster.items():
        contents = {d.content_id for d in members}
        if len(members) < 2:
            continue
        near = {c: near_all.get(c, {}) for c in contents}
        for star in stars(members, near, order):
            for doc, similarity, keep_it in [(star.centre, 1.0, True), *((d, s, False) for d, s, _ in star.members)]:
                clusters["key"].append(doc.key)
                clusters["cluster"].append(cluster)
                clusters["keep"].append(keep_it)
                clusters["centre"].append(star.centre.key)
                clusters["similarity"].append(similarity)
                clusters["input"].append(doc.input)
                clusters["record"].append(doc.record)
    keys_of: dict[int, list[str]] = {}
    for members in by_cluster.values():
        for doc in sorted(members, key=lambda d: d.id):
            keys_of.setdefault(doc.content_id, []).append(doc.key)
    out: dict[str, list] = {name: [] for name in PAIR_SCHEMA.names}

    def emit(x: str, y: str, jaccard: float, hamming, exact: bool, cx: int, cy: int) -> None:
        (x, cx), (y, cy) = sorted(((x, cx), (y, cy)))
        for name, value in zip(PAIR_SCHEMA.names, (x, y, jaccard, hamming, exact, cx, cy)):
            out[name].append(value)

    for content, keys in keys_of.items():
        for i, x in enumerate(keys):
            for y in keys[i + 1:]:
                emit(x, y, 1.0, 0 if content in with_simhash else None, True, content, content)
    for a, b, jaccard, hamming in zip(pairs["a"].tolist(), pairs["b"].tolist(), pairs["jaccard"].tolist(),
                                      pairs["hamming"].tolist()):
        for x in keys_of.get(a, ()):
            for y in keys_of.get(b, ()):
                emit(x, y, jaccard, None if hamming < 0 else hamming, False, a, b)
    return pa.table(clusters, schema=CLUSTER_ROW_SCHEMA), pa.table(out, schema=PAIR_SCHEMA)
