"""`dedupdb filter`: streaming deduplication without a database.

Stage one is exact: the normalized text's 128-bit hash goes through a Bloom
filter, so memory stays bounded whatever the stream's length. Stage two
(optional) is near-duplicate detection with MinHash LSH held in memory. A
database may be consulted as well, so a stream can be checked against a store.
"""

from __future__ import annotations

import json
import re
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import BinaryIO, TextIO

import numpy as np
import xxhash

from dedupdb.config import Settings
from dedupdb.errors import InputError
from dedupdb.index.lsh import band_keys, optimal_banding
from dedupdb.ingest.records import (
    BadRecord,
    Record,
    RecordOptions,
    csv_layout,
    picked_record,
    read_records,
    sniff_encoding,
)
from dedupdb.sketch.bloom import BloomFilter
from dedupdb.sketch.fingerprint import Fingerprinter
from dedupdb.sketch.minhash import sketch_jaccard
from dedupdb.text.normalize import normalize, normalize_lines

_BLANK_LINES = re.compile(r"^(?:[ \t]*\r?\n)+")  # before a CSV header
_BATCH = 8192
_MASK64 = (1 << 64) - 1


@dataclass(frozen=True)
class FilterOptions:
    records: RecordOptions = RecordOptions("lines")
    capacity: int = 10_000_000
    error_rate: float = 0.001
    near: bool = False
    threshold: float | None = None


@dataclass
class FilterReport:
    read: int = 0
    kept: int = 0
    exact_duplicates: int = 0
    near_duplicates: int = 0
    stored_duplicates: int = 0
    bad_records: list[tuple[int, str]] = field(default_factory=list)  # the first ones; all are counted
    bad_record_count: int = 0
    bloom_bits: int = 0
    bloom_hashes: int = 0
    capacity: int = 0
    capacity_exceeded: bool = False
    false_positive_rate: float = 0.0  # estimated from the filter's fill at the end

    def note_bad(self, line: int, reason: str) -> None:
        self.bad_record_count += 1
        if len(self.bad_records) < 1000:
            self.bad_records.append((line, reason))


class _NearIndex:
    """MinHash LSH in memory: band key -> first record holding it, with sketches to verify candidates."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.fingerprinter = Fingerprinter(settings)
        self.banding = optimal_banding(settings.threshold, settings.num_perm)
        self.buckets: list[dict[int, int]] = [{} for _ in range(self.banding.bands)]
        self.sketches: list[np.ndarray] = []
        self.keys: list[str] = []

    def fingerprints(self, texts: list[str]):
        return self.fingerprinter.texts(texts)

    def check_and_add(self, key: str, fp, bands: list[int]) -> str | None:
        """The key of an earlier near-duplicate, or None after remembering this record."""
        if fp.shingles:
            seen: set[int] = set()
            for band, value in enumerate(bands):
                other = self.buckets[band].get(value)
                if other is not None and other not in seen:
                    seen.add(other)
                    if sketch_jaccard(fp.sketch, self.sketches[other], self.settings.sketch_size) >= self.settings.threshold:
                        return self.keys[other]
        index = len(self.keys)
        self.keys.append(key)
        self.sketches.append(fp.sketch)
        if fp.shingles:
            for band, value in enumerate(bands):
                self.buckets[band].setdefault(value, index)
        return None


@dataclass
class _Batch:
    """Parallel lists: a record's key, its normalized text, and the record as it was read."""

    keys: list = field(default_factory=list)
    texts: list[str] = field(default_factory=list)
    raws: list[str] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.raws)


def _first_sightings(digests: list[int], bloom: BloomFilter) -> tuple[dict[int, int], dict[int, bool]]:
    """The index of each digest's first occurrence in a batch, and whether the Bloom filter saw it before."""
    first: dict[int, int] = {}
    for i, d in enumerate(digests):
        first.setdefault(d, i)
    firsts = list(first)
    h1 = np.fromiter((d & _MASK64 for d in firsts), np.uint64, len(firsts))
    h2 = np.fromiter((d >> 64 for d in firsts), np.uint64, len(firsts))
    return first, dict(zip(firsts, bloom.add_new(h1, h2).tolist()))


def _unseen_raw_lines(block: list[bytes], numbers: list[int], bloom: BloomFilter,
                      report: FilterReport) -> tuple[list[bytes], list[int]]:
    """Drop lines whose exact bytes came before: a repeat needs no decoding or normalizing at all. The lines kept
    come back with their numbers (numbers: those of the block's lines), which bad records are reported by."""
    kept = [(raw, n) for raw, n in zip(block, numbers) if not raw.isspace()]
    digests = [xxhash.xxh3_128_intdigest(raw) for raw, _ in kept]
    first, seen = _first_sightings(digests, bloom)
    fresh = [(raw, n) for i, ((raw, n), d) in enumerate(zip(kept, digests)) if first[d] == i and not seen[d]]
    report.read += len(kept) - len(fresh)
    report.exact_duplicates += len(kept) - len(fresh)
    return [raw for raw, _ in fresh], [n for _, n in fresh]


def _line_items(
    stream: BinaryIO, options: RecordOptions, report: FilterReport, raw_bloom: BloomFilter | None = None
) -> Iterator[_Batch]:
    """Batches of records from a line-oriented stream (lines or JSON Lines), read without seeking. With
    raw_bloom, byte-for-byte repeats are dropped first (their keys are then not kept exactly)."""
    read = 0  # lines read before this block
    batch = _Batch()
    encoding = None
    while True:
        block = stream.readlines(1 << 20)
        if not block:
            break
        if encoding is None:  # judged from the start of the stream, as for record files
            encoding = sniff_encoding(b"".join(block)[: 64 * 1024], "standard input")
        numbers = list(range(read + 1, read + len(block) + 1))
        read += len(block)
        if raw_bloom is not None:
            block, numbers = _unseen_raw_lines(block, numbers, raw_bloom, report)
            if not block:
                continue
        data = b"".join(block).decode(encoding, errors="replace")
        if numbers[0] == 1:
            data = data.lstrip("\ufeff")
        raws = data.split("\n")
        if raws[-1] == "":
            raws.pop()
        if len(raws) != len(numbers):  # a line whose bytes decode to a newline more: each decoded by itself
            raws = [raw.decode(encoding, errors="replace").rstrip("\n") for raw in block]
            if numbers[0] == 1:
                raws[0] = raws[0].lstrip("\ufeff")
        if "\r" in data:
            raws = [raw.rstrip("\r") for raw in raws]
        if options.format == "lines":
            kept = [(n, raw) for n, raw in zip(numbers, raws) if raw and not raw.isspace()]
            batch.keys += [n for n, _ in kept]
            batch.raws += [raw for _, raw in kept]
            batch.texts += normalize_lines([raw for _, raw in kept])
        else:
            for n, raw in zip(numbers, raws):
                if not raw.strip():
                    continue
                # Read as a record file's lines are: a bad record for the same reasons, an id and a text alike.
                picked = picked_record(raw, options, n)
                if isinstance(picked, str):
                    report.note_bad(n, picked)
                    continue
                key, text = picked
                batch.keys.append(key if options.id_field else n)
                batch.texts.append(" ".join(text.split()))  # normalized below, a batch at a time
                batch.raws.append(raw)
        if len(batch) >= _BATCH:
            if options.format != "lines":
                batch.texts = normalize_lines(batch.texts)
            yield batch
            batch = _Batch()
    if len(batch):
        if options.format != "lines":
            batch.texts = normalize_lines(batch.texts)
        yield batch


def _csv_items(stream: BinaryIO, options: RecordOptions, report: FilterReport, header_out: Callable[[str], None]):
    with tempfile.SpooledTemporaryFile(max_size=32 * 1024 * 1024) as spool:
        while chunk := stream.read(1 << 20):
            spool.write(chunk)
        spool.seek(0)
        encoding = sniff_encoding(spool.read(64 * 1024), "standard input")
        # The header is read (or refused, lacking a column asked for) before anything is written; a stream without
        # one has nothing to copy.
        layout = csv_layout(spool, options, encoding)
        if layout is None:
            return
        spool.seek(0)
        header = spool.read(layout.header_end[0]).decode(encoding, errors="replace").lstrip("\ufeff")
        header_out(_BLANK_LINES.sub("", header).rstrip("\r\n"))
        batch = _Batch()
        for item in read_records(spool, options, 0, 0, encoding):
            if isinstance(item, BadRecord):
                report.note_bad(item.line, item.reason)
                continue
            if not isinstance(item, Record):
                continue
            batch.keys.append(item.record_id)
            batch.texts.append(normalize(item.text))
            batch.raws.append(item.raw)
            if len(batch) >= _BATCH:
                yield batch
                batch = _Batch()
        if len(batch):
            yield batch


def run_filter(
    source: BinaryIO,
    out: TextIO,
    options: FilterOptions,
    dropped: TextIO | None = None,
    database=None,
    warn: Callable[[str], None] = lambda message: None,
) -> FilterReport:
    """Copy the records of source to out, leaving out those already seen (exactly, or nearly with near)."""
    records = options.records
    if records.format not in ("lines", "jsonl", "csv"):
        raise InputError("filter reads --format lines, jsonl or csv")
    report = FilterReport()
    # Without --dropped or --db nobody asks which record a repeat repeats, so byte-for-byte repeats can go
    # through a first, cheaper filter; each of the two filters then gets half the error rate.
    raw_stage = dropped is None and database is None and records.format != "csv"
    rate = options.error_rate / 2 if raw_stage else options.error_rate
    bloom = BloomFilter(options.capacity, rate)
    raw_bloom = BloomFilter(options.capacity, rate) if raw_stage else None
    report.bloom_bits, report.bloom_hashes, report.capacity = bloom.bits, bloom.hashes, bloom.capacity
    settings = database.settings if database is not None else Settings()
    if options.threshold is not None:
        settings = Settings(**{**settings.__dict__, "threshold": options.threshold})
    near = _NearIndex(settings) if options.near else None
    # Naming the record a dropped one duplicates needs the kept records' hashes; with that exact table the
    # Bloom filter's rare false positives are caught and kept, too.
    originals: dict[int, str] | None = {} if dropped is not None else None

    def drop(batch: _Batch, i: int, original, stage: str) -> None:
        if dropped is not None:
            record = {"key": str(batch.keys[i]), "duplicate_of": None if original is None else str(original),
                      "stage": stage, "record": batch.raws[i]}
            dropped.write(json.dumps(record, ensure_ascii=False) + "\n")

    if records.format == "csv":
        batches = _csv_items(source, records, report, lambda header: out.write(header + "\n"))
    else:
        batches = _line_items(source, records, report, raw_bloom)
    for batch in batches:
        report.read += len(batch)
        keys, texts = batch.keys, batch.texts
        digests = list(map(xxhash.xxh3_128_intdigest, map(str.encode, texts)))
        first, seen = _first_sightings(digests, bloom)
        if bloom.count > bloom.capacity and not report.capacity_exceeded:
            report.capacity_exceeded = True
            warn(f"more than {bloom.capacity:,} distinct records: the Bloom filter's false-positive rate now "
                 "exceeds the one asked for; raise --capacity")
        if dropped is None and database is None:
            survivors = [i for i, d in enumerate(digests) if first[d] == i and not seen[d]]
            report.exact_duplicates += len(batch) - len(survivors)
        else:
            stored = _stored_keys(database, [texts[i] for i in first.values()]) if database is not None else {}
            survivors = []
            for i, d in enumerate(digests):
                if first[d] != i:
                    report.exact_duplicates += 1
                    drop(batch, i, originals.get(d, keys[first[d]]) if originals is not None else keys[first[d]], "exact")
                elif seen[d] and (originals is None or d in originals):
                    report.exact_duplicates += 1
                    drop(batch, i, None if originals is None else originals[d], "exact")
                elif texts[i] in stored:
                    report.stored_duplicates += 1
                    drop(batch, i, stored[texts[i]], "database")
                else:
                    if originals is not None:
                        originals[d] = keys[i]
                    survivors.append(i)
        if near is not None and survivors:
            kept: list[int] = []
            fps = near.fingerprints([texts[i] for i in survivors])
            all_bands = band_keys(np.array([fp.minhash for fp in fps]), near.banding).tolist()
            for i, fp, bands in zip(survivors, fps, all_bands):
                original = near.check_and_add(keys[i], fp, bands)
                if original is None and database is not None:
                    hits = database.indexer.search(fp)
                    if hits:
                        original = database.store.documents_of_contents([hits[0].content_id])[0].key
                if original is not None:
                    report.near_duplicates += 1
                    drop(batch, i, original, "near")
                else:
                    kept.append(i)
            survivors = kept
        raws = batch.raws
        out.write("".join(raws[i] + "\n" for i in survivors))
        report.kept += len(survivors)
    report.false_positive_rate = bloom.false_positive_rate() + (raw_bloom.false_positive_rate() if raw_bloom else 0.0)
    return report


def _stored_keys(database, texts: list[str]) -> dict[str, str]:
    """Normalized text -> key of a stored document holding exactly that text."""
    from dedupdb.text.hashing import content_hash

    by_hash = {content_hash(t): t for t in texts}
    found = database.store.content_ids_by_hash(list(by_hash))
    if not found:
        return {}
    docs = database.store.documents_of_contents(list(found.values()))
    first_key = {}
    for doc in docs:
        first_key.setdefault(doc.content_id, doc.key)
    return {by_hash[h]: first_key[cid] for h, cid in found.items() if cid in first_key}
