"""dedupdb import: load the output folder of a scale-out job (layout.py) into a new local store, so that `query`,
`report`, `pairs` and `clean` work on it without sketching a text again.

The store is made with the job's settings and candidate scheme and filled as `add` would have filled it:

    files       one row per input of the manifest (kind "records", its options as the job read it)
    contents    one per row of signatures/, numbered 1, 2, ... in the order of their first documents (each part file
                in order, part files by their smallest first ordinal: as the job writes them); the job's content
                numbers (62-bit hashes) are mapped to these through two sorted arrays, not a dictionary
    index rows  LSH bands (or super-shingles) and SimHash blocks computed from the signatures as Indexer does, and
                the containment rows of their fingerprints, written without probing: the pairs are known already
    documents   one per row of documents/, in the order of their ordinals where the part files allow it (each
                part file in order, part files by their smallest ordinal: as the job writes them), so that
                document ids, and with them the keep rules 'first' and 'last', follow the inputs as `add` would
    pairs       the distinct pairs of different texts of pairs/, renumbered (a < b)
    clusters    each content's cluster, the smallest content id of its connected component over those pairs

(idf.bin, the job's corpus IDF, is not read: SimHash weighs words by fixed tables, weights.py.)

Everything is read in batches of BATCH_ROWS rows, each batch stored in a transaction of its own: memory stays
bounded by a few arrays over the contents and the pairs' two id columns. The store says `import.pending = 1` in
its meta until the import is finished. An import cut short (Ctrl-C, a crash, a full disk) leaves a partial store
behind, which a second import refuses as not empty: delete that file (and its -wal and -shm files) and import
again. Merging a job into a store that holds documents is not supported.

A file row has the size, time and digest the manifest's input gives (keys "size", "mtime_ns", "digest" and
"records", as `add` stores them; a job gives them for local record files, with no content digest): a later
`dedupdb add` of the unchanged file finds it unchanged, one of a changed file reads it again whole (its records
replace the imported ones), and `export` reads its records back. Without them (URIs, Parquet) the row has none,
and `export` leaves its records out.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from dedupdb.config import ALGORITHM_VERSION, Settings
from dedupdb.errors import DedupError, InputError, SettingsError
from dedupdb.index.indexer import template_pairs
from dedupdb.index.lsh import scheme_from_meta, scheme_meta
from dedupdb.ingest.records import RecordOptions
from dedupdb.scaleout.layout import DOCUMENTS, PAIRS, SIGNATURES, Manifest
from dedupdb.storage.entries import CONTENT_ID_BITS
from dedupdb.storage.rows import ContentRow
from dedupdb.text.hashing import distinct, distinct_counts, distinct_first_counts

if TYPE_CHECKING:
    from dedupdb.database import Database

# Rows read and stored at once (a transaction each).
BATCH_ROWS = 50_000
PENDING = "import.pending"  # meta: "1" from the first write of an import until its last
SOURCE = "import.source"    # meta: the folder a store was imported from

_SIGNATURE_COLUMNS = ("content", "hash", "chars", "shingles", "minhash", "sketch", "simhash", "fingerprints")
_DOCUMENT_COLUMNS = ("key", "input", "record", "content", "bytes", "ordinal", "snippet")
_PAIR_COLUMNS = ("jaccard", "hamming", "a_content", "b_content")
_MASK = (1 << CONTENT_ID_BITS) - 1

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class ImportSummary:
    documents: int  # documents stored
    contents: int   # distinct texts stored
    pairs: int      # verified pairs of different texts stored
    clusters: int   # connected components holding two documents or more (duplicate groups in the related view)
    seconds: float

    def to_json(self) -> dict:
        return {**asdict(self), "seconds": round(self.seconds, 3)}


# --- opening -------------------------------------------------------------------------------------------------------


def read_manifest(out: Path) -> Manifest:
    """The manifest of a job's output folder, checked far enough to start an import (InputError otherwise)."""
    out = Path(out).expanduser()
    if not out.is_dir():
        raise InputError(f"{out}: no such folder")
    manifest = Manifest.read(out)
    if not isinstance(manifest.settings, dict) or not isinstance(manifest.scheme, dict):
        raise InputError(f"{out}: malformed manifest (settings and scheme must be objects)")
    if not isinstance(manifest.inputs, list) or not all(isinstance(i, dict) and "uri" in i for i in manifest.inputs):
        raise InputError(f"{out}: malformed manifest (each input needs a uri)")
    if not isinstance(manifest.idf_documents, int) or manifest.idf_documents < 0:
        raise InputError(f"{out}: malformed manifest (idf_documents must be a count)")
    return manifest


def job_settings(manifest: Manifest) -> Settings:
    """The settings a job ran with, which the store it is imported into must have."""
    try:
        settings = Settings.from_meta({k: str(v) for k, v in manifest.settings.items()})
    except (ValueError, TypeError, SettingsError) as exc:
        raise InputError(f"the job's manifest holds unusable settings ({exc})") from None
    if settings.algorithm != ALGORITHM_VERSION:
        raise SettingsError(
            f"the job's signatures were made by version {settings.algorithm} of dedupdb's algorithm, this dedupdb "
            f"uses version {ALGORITHM_VERSION}: run the job again with this version"
        )
    return settings


def open_for_import(path: str | Path | None, out: Path) -> "Database":
    """The database at path (None: the default one), made with the settings of the job in out if it does not exist;
    one that exists must be empty and have those settings (InputError, SettingsError otherwise, one line each)."""
    from dedupdb.database import Database

    settings = job_settings(read_manifest(out))
    try:
        return Database.open(path, create=True, **asdict(settings))
    except SettingsError:
        with Database.open(path, create=False) as existing:  # why not: it holds something, or other settings
            _require_empty(existing)
            raise SettingsError(
                f"{existing.path} was made with other settings than the job ({_difference(existing.settings, settings)}); "
                "import into a new --db"
            ) from None


def _difference(have: Settings, want: Settings) -> str:
    changed = [f"{name}={value}, the job's {getattr(want, name)}"
               for name, value in asdict(have).items() if value != getattr(want, name)]
    return "; ".join(changed)


def _require_empty(db: "Database") -> None:
    pending = db.store.read_meta().get(PENDING) == "1"
    counts = db.store.counts()
    if pending:
        raise InputError(
            f"{db.path} is not empty: it holds an import that was cut short; delete it (with its -wal and -shm "
            "files, if any) and import again"
        )
    if counts["documents"] or counts["contents"] or counts["files"] or counts["missing_files"]:
        raise InputError(
            f"{db.path} is not empty ({counts['documents']} documents): a job is imported into a new store only; "
            "give another --db"
        )


# --- importing -----------------------------------------------------------------------------------------------------


def import_job(db: "Database", out: Path, progress: Progress | None = None) -> ImportSummary:
    """Load the output folder of a scale-out job into db, an empty store with the job's settings (open_for_import
    opens one). See the module's note for what is stored and what an interrupted import leaves."""
    started = time.perf_counter()
    out = Path(out).expanduser()
    manifest = read_manifest(out)
    settings = job_settings(manifest)
    if db.settings != settings:
        raise SettingsError(
            f"{db.path} has other settings than the job ({_difference(db.settings, settings)}); import into a new --db"
        )
    try:
        scheme = scheme_from_meta(settings.preset, {k: str(v) for k, v in manifest.scheme.items()})
    except (KeyError, ValueError) as exc:
        raise InputError(f"{out}: the manifest's candidate scheme is malformed ({exc})") from None
    parts = _Parts(out)
    parts.check_counts(manifest.counts)
    files = _file_rows(manifest)
    total = sum(parts.rows[name] for name in (SIGNATURES, DOCUMENTS, PAIRS))
    done = 0

    def advance(rows: int) -> None:
        nonlocal done
        done += rows
        if progress:
            progress(done, total)

    store = db.store
    with store.transaction():
        _require_empty(db)
        # The job's scheme, which found its candidates: the store goes on with it (the same as this dedupdb
        # chooses for these settings, unless the job's dedupdb chose otherwise).
        store.write_meta({**scheme_meta(scheme), PENDING: "1", SOURCE: str(out.resolve())})
        ids = store.save_files([row for row, _ in files])
    db.adopt_scheme(scheme)
    input_files = np.array([ids[row[0]] for row, _ in files], np.int64)
    input_mtimes = np.array([mtime for _, mtime in files], np.int64)
    try:
        documents, contents, pairs, clusters = _load(db, parts, input_files, input_mtimes, advance)
    except DedupError as exc:  # malformed rows met on the way, a full disk: said with what it leaves behind
        exc.args = (f"{exc}; {db.path} holds a partial import: delete it before importing again",)
        raise
    with store.transaction():
        store.write_meta({PENDING: "0"})
    return ImportSummary(documents, contents, pairs, clusters, time.perf_counter() - started)


def _load(
    db: "Database", parts: "_Parts", input_files: np.ndarray, input_mtimes: np.ndarray, advance: Callable[[int], None]
) -> tuple[int, int, int, int]:
    """Store contents, documents, pairs and clusters; returns how many of each."""
    contents = _import_contents(db, parts, advance)
    held = np.zeros(len(contents), np.int64)  # documents holding each content, by position
    documents = 0
    for batch in parts.batches(DOCUMENTS, _DOCUMENT_COLUMNS, order_by="ordinal"):
        with db.store.transaction():
            documents += _import_documents(db, batch, contents, input_files, input_mtimes, held)
        advance(batch.num_rows)
    orphans = np.flatnonzero(held == 0)
    if len(orphans):
        raise InputError(
            f"{parts.out}: {len(orphans)} texts of {SIGNATURES}/ are held by no document of {DOCUMENTS}/ (the "
            "folder is incomplete)"
        )
    a, b = _import_pairs(db, parts, contents, advance)
    clusters = _set_clusters(db, contents, a, b, held)
    return documents, len(contents), len(a), clusters


def _file_rows(manifest: Manifest) -> list[tuple[tuple, int]]:
    """(files row, mtime_ns) of each input, in the manifest's order."""
    out = []
    for position, given in enumerate(manifest.inputs):
        uri = str(given["uri"])
        options = given.get("options")
        try:
            if isinstance(options, str):
                options = RecordOptions.from_json(options).to_json()  # as the job read it, in add's spelling
            elif isinstance(options, dict):
                options = RecordOptions(**options).to_json()
            else:
                options = RecordOptions(str(given.get("format") or "auto")).to_json()
        except (TypeError, ValueError, DedupError) as exc:
            raise InputError(f"the manifest's input {position + 1} ({uri}) has unusable options ({exc})") from None
        # What add stores to tell an unchanged file, when the job knew it; else nothing, so that the next add of
        # the file reads it again whole rather than trust it.
        known = all(isinstance(given.get(k), int) for k in ("size", "mtime_ns", "records")) and isinstance(
            given.get("digest"), str)
        size, mtime, digest, records = (
            (given["size"], given["mtime_ns"], given["digest"], given["records"]) if known else (0, 0, "", 0)
        )
        out.append(((uri, size, mtime, digest, "indexed", "records", records, options), mtime))
    return out


class _ContentMap:
    """The job's content numbers -> store ids (first, first + 1, ... in the order they were stored), as a sorted
    array of the numbers and the positions they were stored at: 16 bytes a text."""

    def __init__(self, numbers: np.ndarray, first: int, out: Path) -> None:
        self.order = np.argsort(numbers, kind="stable")
        self.numbers = numbers[self.order]
        self.first = first
        self.out = out
        repeated = np.flatnonzero(self.numbers[1:] == self.numbers[:-1])
        if len(repeated):
            raise InputError(f"{out}: content {int(self.numbers[repeated[0]])} has two rows in {SIGNATURES}/")

    def __len__(self) -> int:
        return len(self.numbers)

    def positions(self, numbers: np.ndarray, where: str) -> np.ndarray:
        """Where each of these content numbers was stored (0 for the first); InputError for one never stored."""
        if len(self.numbers) == 0:
            if len(numbers):
                raise InputError(f"{self.out}: {where} names content {int(numbers[0])}, which {SIGNATURES}/ lacks")
            return np.empty(0, np.int64)
        at = np.minimum(np.searchsorted(self.numbers, numbers), len(self.numbers) - 1)
        unknown = np.flatnonzero(self.numbers[at] != numbers)
        if len(unknown):
            raise InputError(
                f"{self.out}: {where} names content {int(numbers[unknown[0]])}, which {SIGNATURES}/ lacks"
            )
        return self.order[at]

    def ids(self, numbers: np.ndarray, where: str) -> np.ndarray:
        return self.positions(numbers, where) + self.first


def _import_contents(db: "Database", parts: "_Parts", advance: Callable[[int], None]) -> _ContentMap:
    store, indexer = db.store, db.indexer
    numbers: list[np.ndarray] = []
    first = None
    # In the order of each text's first document, as add numbers texts: a key's first texts are the job's too.
    for batch in parts.batches(SIGNATURES, _SIGNATURE_COLUMNS, order_by="first"):
        rows, hashes = _content_rows(batch, db.settings.num_perm, parts.out)
        with store.transaction():
            fingerprints = indexer.stored_fingerprints(rows)  # with the signatures a store leaves out computed
            ids = store.insert_contents([
                replace(fp, content_hash=content_hash) for fp, content_hash in zip(fingerprints.values(), hashes)
            ])
            if first is None and ids:
                first = ids[0]
            stored = dict(zip(ids, fingerprints.values()))
            indexer.containment.add({cid: fp.fingerprints for cid, fp in stored.items()})
            store.insert_index(*indexer.rows_of(stored))
        numbers.append(batch.column("content").to_numpy(zero_copy_only=False).astype(np.int64))
        advance(batch.num_rows)
    return _ContentMap(np.concatenate(numbers) if numbers else np.empty(0, np.int64), first or 1, parts.out)


def _content_rows(batch, num_perm: int, out: Path) -> tuple[dict[int, ContentRow], list[bytes]]:
    """The rows of a batch of signatures/ as a store reads its contents back, by a provisional id (0, 1, ... in
    batch order), and their content hashes. Indexer.stored_fingerprints takes them: it computes a MinHash signature
    left out (the file may keep one as a store does: empty when the sketch holds every shingle), and turns the
    SimHash, signed in the file as in a store, unsigned."""
    column = lambda name: batch.column(name).to_pylist()  # noqa: E731
    rows: dict[int, ContentRow] = {}
    hashes: list[bytes] = []
    for i, (content_hash, chars, shingles, minhash, sketch, simhash, fingerprints) in enumerate(zip(
        column("hash"), column("chars"), column("shingles"), column("minhash"), column("sketch"), column("simhash"),
        column("fingerprints"),
    )):
        minhash, sketch = minhash or b"", sketch or b""
        whole = 0 < (shingles or 0) == len(sketch) // 4  # the sketch holds every shingle: it gives the signature
        if (
            not isinstance(content_hash, bytes) or len(content_hash) != 16 or chars is None or shingles is None
            or len(sketch) % 4 or (fingerprints is not None and len(fingerprints) % 4)
            or not _sorted_distinct(sketch)
            or len(minhash) not in ((0, 2 * num_perm) if whole or not shingles else (2 * num_perm,))
        ):
            number = batch.column("content")[i].as_py()
            raise InputError(f"{out}: the signature of content {number} in {SIGNATURES}/ is malformed")
        rows[i] = ContentRow(
            i, chars, shingles, np.frombuffer(minhash, "<u2").astype(np.uint16),
            np.frombuffer(sketch, "<u4").astype(np.uint32), simhash, 0, 0,
            None if fingerprints is None else np.frombuffer(fingerprints, "<u4").astype(np.uint32),
        )
        hashes.append(content_hash)
    return rows, hashes


def _sorted_distinct(sketch: bytes) -> bool:
    """Whether a sketch's values rise (a store keeps them so, and codes them on that)."""
    values = np.frombuffer(sketch, "<u4")
    return bool((values[1:] > values[:-1]).all())


def _import_documents(
    db: "Database", batch, contents: _ContentMap, input_files: np.ndarray, input_mtimes: np.ndarray, held: np.ndarray,
) -> int:
    inputs = batch.column("input").to_numpy(zero_copy_only=False).astype(np.int64)
    bad = np.flatnonzero((inputs < 0) | (inputs >= len(input_files)))
    if len(bad):
        raise InputError(f"{contents.out}: a document of {DOCUMENTS}/ names input {int(inputs[bad[0]])}, which the "
                         "manifest lacks")
    positions = contents.positions(batch.column("content").to_numpy(zero_copy_only=False).astype(np.int64),
                                   f"{DOCUMENTS}/")
    ids = positions + contents.first
    file_ids, mtimes = input_files[inputs], input_mtimes[inputs]
    db.store.insert_documents(list(zip(
        batch.column("key").to_pylist(), file_ids.tolist(), batch.column("record").to_pylist(), ids.tolist(),
        batch.column("bytes").to_pylist(), mtimes.tolist(), batch.column("snippet").to_pylist(),
    )))
    distinct_ids, counts = distinct_counts(ids)
    db.store.change_document_counts(dict(zip(distinct_ids.tolist(), counts.tolist())))
    np.add.at(held, positions, 1)
    return batch.num_rows


def _import_pairs(
    db: "Database", parts: "_Parts", contents: _ContentMap, advance: Callable[[int], None]
) -> tuple[np.ndarray, np.ndarray]:
    """Store the distinct pairs of different texts; returns them as (a, b) id arrays."""
    codes: list[np.ndarray] = [np.empty(0, np.int64)]
    for batch in parts.batches(PAIRS, _PAIR_COLUMNS):
        a = contents.ids(batch.column("a_content").to_numpy(zero_copy_only=False).astype(np.int64), f"{PAIRS}/")
        b = contents.ids(batch.column("b_content").to_numpy(zero_copy_only=False).astype(np.int64), f"{PAIRS}/")
        near = np.flatnonzero(a != b)  # a pair of copies of one text is no stored pair
        low, high = np.minimum(a, b)[near], np.maximum(a, b)[near]
        packed, first, _ = distinct_first_counts((low << CONTENT_ID_BITS) | high)
        rows = near[first]
        jaccard = batch.column("jaccard").to_numpy(zero_copy_only=False)[rows]
        hamming = batch.column("hamming").take(rows).to_pylist()
        if len(jaccard) and not ((jaccard >= 0) & (jaccard <= 1)).all():
            raise InputError(f"{parts.out}: a pair of {PAIRS}/ has a Jaccard outside [0, 1]")
        with db.store.transaction():
            pair_rows = list(zip(
                (packed >> CONTENT_ID_BITS).tolist(), (packed & _MASK).tolist(), jaccard.tolist(), hamming,
            ))
            db.store.insert_pairs(pair_rows)
            db.store.mark_templates(template_pairs(db.store, [(a, b) for a, b, _, _ in pair_rows], {}))
        codes.append(packed)
        advance(batch.num_rows)
    packed = distinct(np.concatenate(codes))
    return packed >> CONTENT_ID_BITS, packed & _MASK


def _set_clusters(db: "Database", contents: _ContentMap, a: np.ndarray, b: np.ndarray, held: np.ndarray) -> int:
    """Label every content with the smallest id of its connected component; returns how many components hold two
    documents or more."""
    from dedupdb.index.clusters import dense_components

    first, count = contents.first, len(contents)
    labels = dense_components(first + count, a, b)[first:]
    moved = np.flatnonzero(labels != np.arange(first, first + count))
    for start in range(0, len(moved), BATCH_ROWS):
        chunk = moved[start : start + BATCH_ROWS]
        with db.store.transaction():
            db.store.set_clusters(dict(zip((chunk + first).tolist(), labels[chunk].tolist())))
    documents = np.bincount(labels - first, weights=held, minlength=count) if count else np.empty(0)
    return int(np.count_nonzero(documents >= 2))


# --- the Parquet folders -------------------------------------------------------------------------------------------


class _Parts:
    """The Parquet part files of the job's folders, read in batches."""

    def __init__(self, out: Path) -> None:
        try:
            import pyarrow.parquet as pq
        except ImportError:
            raise InputError("dedupdb import reads Parquet and needs pyarrow: pip install pyarrow") from None
        self.pq = pq
        self.out = out
        self.files: dict[str, list[Path]] = {}
        self.rows: dict[str, int] = {}
        for name in (SIGNATURES, DOCUMENTS, PAIRS):
            folder = out / name
            if not folder.is_dir():
                raise InputError(f"{out}: no {name}/ folder (not the whole output of a finished job?)")
            self.files[name] = sorted(p for p in folder.rglob("*.parquet") if p.is_file())
            self.rows[name] = sum(self._metadata(p).num_rows for p in self.files[name])

    def _metadata(self, path: Path):
        try:
            return self.pq.ParquetFile(path).metadata
        except Exception as exc:  # pyarrow's errors for a file that is not Parquet, or cannot be read
            raise InputError(f"{path}: not a readable Parquet file ({exc})") from None

    def check_counts(self, counts: dict) -> None:
        """The folders hold as many rows as the manifest says the job wrote (where it says so): a folder copied
        in part is told before anything is stored."""
        for name, counted in ((DOCUMENTS, "records"), (SIGNATURES, "texts"), (PAIRS, "document_pairs")):
            expected = counts.get(counted) if isinstance(counts, dict) else None
            if isinstance(expected, int) and expected != self.rows[name]:
                raise InputError(
                    f"{self.out}: {name}/ holds {self.rows[name]} rows where the manifest counts {expected} "
                    f"{counted.replace('_', ' ')} (a folder copied in part?)"
                )

    def batches(self, name: str, columns: tuple[str, ...], order_by: str | None = None) -> Iterator:
        """A folder's rows in batches; with order_by, its part files in the order of their smallest value of that
        column (each written sorted by it, as the job writes them)."""
        files = self.files[name]
        if order_by:
            files = sorted(files, key=lambda path: self._smallest(path, order_by))
        for path in files:
            try:
                parquet = self.pq.ParquetFile(path)
                missing = [c for c in columns if c not in parquet.schema_arrow.names]
                if missing:
                    raise InputError(f"{path}: no column {missing[0]!r} (see dedupdb/scaleout/layout.py)")
                batches = parquet.iter_batches(batch_size=BATCH_ROWS, columns=list(columns))
                while True:
                    try:
                        batch = next(batches)
                    except StopIteration:
                        break
                    yield batch
            except DedupError:
                raise
            except Exception as exc:  # pyarrow's errors for a damaged file
                raise InputError(f"{path}: cannot be read ({exc})") from None

    def _smallest(self, path: Path, name: str) -> tuple[int, str]:
        """A part file's smallest value of a column, from its statistics (or its first row group), to order the
        files by."""
        metadata = self._metadata(path)
        try:
            column = metadata.schema.to_arrow_schema().get_field_index(name)
            stats = [metadata.row_group(i).column(column).statistics for i in range(metadata.num_row_groups)]
            if all(s is not None and s.has_min_max for s in stats):
                return (min((s.min for s in stats), default=0), str(path))
            first = self.pq.ParquetFile(path).read_row_group(0, columns=[name]).column(0)
            return (min(first.to_pylist(), default=0), str(path))
        except Exception:  # no such column (an older job's output): reading it fails with the file's own error
            return (0, str(path))

