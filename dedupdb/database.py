"""The library's front door: open a database, add files, query, list clusters and pairs."""

from __future__ import annotations

import functools
import io
import os
import time
from numbers import Integral, Real
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from dedupdb import compiled
from dedupdb.config import (
    ALGORITHM_VERSION,
    ALGORITHMS_KEPT,
    PRESET_BANDING,
    PRESET_SUPER_SHINGLES,
    QUERY_CONTAINMENT,
    SUPER_SHINGLE_VALUES,
    Settings,
    default_db_path,
)
from dedupdb.errors import DatabaseError, InputError, OptionError, SettingsError
from dedupdb.index.containment import shares_in, shares_of
from dedupdb.index.grouping import DEFAULT_KEEP, keep_order, neighbours, stars
from dedupdb.index.indexer import Indexer
from dedupdb.index.lsh import (
    Banding,
    Candidates,
    SuperShingles,
    curve,
    optimal_banding,
    scheme_for,
    scheme_from_meta,
    scheme_meta,
    scheme_stats,
)
from dedupdb.sketch.fingerprint import Fingerprinter, numpy_seconds, query_runs
from dedupdb.sketch.minhash import sketch_jaccard
from dedupdb.sketch.winnowing import Side
from dedupdb.sketch.winnowing import pair_scores, pair_similarity
from dedupdb.storage.rows import DocumentRow, HitDocument
from dedupdb.storage.store import Store
from dedupdb.text.normalize import normalize, valid_utf8

if TYPE_CHECKING:  # the ingest and export machinery loads when first used: a query never needs it
    from dedupdb.index.check import CheckReport
    from dedupdb.ingest.export import ExportedRecord
    from dedupdb.ingest.records import RecordOptions
    from dedupdb.ingest.summary import AddSummary, Progress

_IDF_BLOB = "corpus_idf"  # SimHash's word weights in stores of algorithm 3 (now a fixed table: weights.py)
_IDF_META = "idf.documents"
_REINDEX_PENDING = "reindex.pending"  # set while reindex --from-sources rebuilds the store
# A process answering single queries turns to the compiled code once it has sketched this long with numpy (some
# hundreds of queries): loaded aside (ingest.workers.compiled_for_queries), no query waits for it, so it is earned
# sooner than a batch earns it (Sketcher.FAST_AFTER_SECONDS).
QUERIES_COMPILED_AFTER_SECONDS = 0.2


@dataclass(frozen=True)
class QueryHit:
    key: str
    path: str
    record: str | None
    jaccard: float
    hamming: int | None
    exact: bool
    bytes: int
    snippet: str
    containment: float | None = None  # share of the query's shingles this document holds (None: not known)


@dataclass(frozen=True)
class QueryResult:
    """What one text of a batch query (query_many, query_records) matches: the hits query() gives for it."""

    id: str                   # the record's id (its line number without an id field), the id given, or the position
    hits: list[QueryHit]
    line: int | None = None   # where the record starts in its file
    error: str | None = None  # why the text was not compared (a bad record, an empty text); hits is then empty


@dataclass(frozen=True)
class Member:
    key: str
    path: str
    record: str | None
    bytes: int
    mtime_ns: int
    similarity: float  # Jaccard to the document kept (the group's first member)
    exact: bool        # same normalized text as the document kept
    snippet: str
    document_id: int   # order of arrival: a smaller id was stored earlier
    content_id: int
    linked_to: str | None = None  # a hard link of this earlier member's file: removing it frees no space


@dataclass(frozen=True)
class Cluster:
    """A group of documents that are the same or nearly the same as its first member, the one to keep.

    In the default view every other member is an exact copy of the first or at least `threshold` similar
    to it (a star: see grouping.py), so it can be removed on its own merit. In the related view a group
    is a whole connected component of verified pairs, whose members may be only indirectly alike."""

    id: int                # the connected component (the smallest content id in it); stable across keep rules
    members: list[Member]  # the document to keep first
    kind: str              # "exact" when every member holds the same text, "template" when a template pair joins
                           # it (clusters(templates=True)), else "near"
    group: int = 1         # which star of its component, in keep-rule order (always 1 in the related view)

    @property
    def representative(self) -> Member:
        return self.members[0]

    @property
    def total_bytes(self) -> int:
        return sum(m.bytes for m in self.members)

    @property
    def reclaimable_bytes(self) -> int:
        """Bytes freed by keeping only the first member (hard links of a kept file free nothing)."""
        return sum(m.bytes for m in self.members[1:] if m.linked_to is None)


@dataclass(frozen=True)
class Pair:
    """Two documents that are the same or alike (listed by content: two texts, each by its first document key)."""

    a: str                            # document key, a < b
    b: str
    jaccard: float
    hamming: int | None
    exact: bool                       # the same normalized text (jaccard 1.0)
    containment: float | None = None  # share of the smaller text's shingles found in the larger; None: not computed
    # exact, near (a verified near-duplicate), template (one that differs only in numbers or one slot of a frame:
    # text/templates.py), or contained (found by --containment alone)
    kind: str = "near"


@dataclass
class IgnoreOutcome:
    added: int = 0   # pairs remembered now
    already: int = 0  # pairs remembered before
    same_text: list[tuple[str, str]] = field(default_factory=list)  # copies of one text: not remembered


@dataclass(frozen=True)
class IgnoredPair:
    a: str  # document key, a < b
    b: str
    created_at: float
    in_store: bool  # both documents are stored now (a forgotten one's declaration waits for it to come back)


PAIRS_BY = ("document", "content")


@dataclass(frozen=True)
class OptimizeSummary:
    """What Database.optimize did, by index (index, containment): its sorted runs before and after, and how many
    it wrote again as one run of small blocks (0: it was one already)."""

    runs_before: dict[str, int]
    runs_after: dict[str, int]
    rewritten: dict[str, int]
    seconds: float

    @property
    def merged(self) -> bool:
        return any(self.rewritten.values())


@functools.lru_cache(maxsize=16)
def _banding(threshold: float, num_perm: int) -> Banding:
    return optimal_banding(threshold, num_perm)


def candidate_scheme(settings: Settings) -> Candidates:
    """How a store with these settings finds candidates: its preset's scheme (bands chosen for the threshold)."""
    return scheme_for(settings.preset, _banding(settings.threshold, settings.num_perm))


class Database:
    def __init__(self, store: Store, settings: Settings, banding: Candidates) -> None:
        self.store = store
        self.settings = settings
        self.banding = banding
        meta = store.read_meta()
        self.fingerprinter = Fingerprinter(settings)
        self.indexer = Indexer(store, settings, banding, self.fingerprinter)
        # Signatures of another version of the algorithm cannot be mixed with new ones: such a store answers
        # what it holds (report, pairs, clean) but takes no new text until it is rebuilt from its sources.
        self.outdated = settings.algorithm not in ALGORITHMS_KEPT or meta.get(_REINDEX_PENDING) == "1"

    def adopt_scheme(self, scheme: Candidates) -> None:
        """Go on with another candidate scheme (a scale-out job's, which found the pairs being imported): the
        caller has written it to the store's meta in the same transaction as what it found."""
        if scheme_meta(scheme) != scheme_meta(self.banding):
            self.banding = scheme
            self.indexer = Indexer(self.store, self.settings, scheme, self.fingerprinter)

    def _refuse_newer(self) -> None:
        """A store of a newer algorithm than this dedupdb's is neither read nor rebuilt (rebuilt, it would be
        taken back to the older one)."""
        if self.settings.algorithm > ALGORITHM_VERSION:
            raise SettingsError(
                f"{self.path} holds fingerprints of a newer version of dedupdb's algorithm ({self.settings.algorithm}, "
                f"this dedupdb knows up to {ALGORITHM_VERSION}); use a newer dedupdb with it"
            )

    def _require_current(self) -> None:
        self._refuse_newer()
        if self.outdated:
            raise SettingsError(
                f"{self.path} holds fingerprints of an older version of dedupdb's algorithm "
                f"({self.settings.algorithm}, now {ALGORITHM_VERSION}) or an unfinished rebuild; "
                "run 'dedupdb reindex --from-sources' to rebuild it from its files"
            )

    @classmethod
    def open(
        cls, path: str | Path | None = None, create: bool = True, readonly: bool = False,
        **settings: float | int | str | None,
    ) -> "Database":
        """Open (or with create, make) a database. Settings given here must match those it was created with.

        Processes may open and create one database at once: the settings are written under the write lock, by
        the first to take it; the others find them there and take them (or, if they asked for different ones,
        get a SettingsError). With readonly, or when this process cannot write the database (its file or
        folder read-only), it is opened for reading: questions are answered, writes raise DatabaseError."""
        requested = {k: v for k, v in settings.items() if v is not None}
        unknown = set(requested) - {f.name for f in fields(Settings)}
        if unknown:
            raise InputError(f"unknown setting(s): {', '.join(sorted(unknown))}")
        Settings(**requested)  # a value out of its range is refused before a new database file is made
        store = Store.open(Path(path) if path else default_db_path(), create=create, readonly=readonly)
        try:
            meta = store.read_meta()
            if "setting.threshold" not in meta:
                fresh = Settings(**requested)
                banding = candidate_scheme(fresh)
                if not create:
                    # Another process is creating it, or its creation was cut short before the settings: nothing
                    # is stored yet. Read it as empty, and leave the settings to whoever creates it.
                    return cls(store, fresh, banding)
                with store.transaction():
                    meta = store.read_meta()  # again, under the lock: another process may have created it since
                    if "setting.threshold" not in meta:
                        meta = {
                            **fresh.to_meta(),
                            **scheme_meta(banding),
                            "created_at": str(time.time()),
                        }
                        store.write_meta(meta)
            stored = Settings.from_meta(meta)
            _check_compatible(stored, requested)
            banding = scheme_from_meta(stored.preset, meta)
            db = cls(store, stored, banding)
            if meta.get("index.rebuild") == "1":  # a migration changed how index rows are laid out
                with store.transaction():
                    if store.read_meta().get("index.rebuild") == "1":  # not done meanwhile by another process
                        db.indexer.rebuild()
                        store.write_meta({"index.rebuild": "0"})
            return db
        except BaseException:
            store.close()
            raise

    @property
    def path(self) -> Path:
        return self.store.path

    def close(self) -> None:
        self.store.close()

    def __enter__(self) -> "Database":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- ingest ----------------------------------------------------------------

    def add(
        self,
        paths: list[str | Path],
        include: tuple[str, ...] = (),
        exclude: tuple[str, ...] = (),
        progress: Progress | None = None,
        records: RecordOptions | None = None,
        stdin: BinaryIO | None = None,
        workers: int | None = None,
        max_file_size: int | str | None = None,
        max_record_size: int | str | None = None,
        only: tuple[str, ...] = (),
        follow_symlinks: bool = False,
        extract_timeout: float | None = None,
    ) -> AddSummary:
        """Index files and folders incrementally; returns what was added, updated, skipped and missing.

        In folders, files of a text type are taken, and files of another type or none that read as text; include
        globs add files whatever their type, only globs replace that choice. follow_symlinks follows links to
        files and folders (each link by its own path; loops are skipped); without it, links are skipped.

        With records, files in a record format (by suffix, or all of them with an explicit format) hold one
        document per record, keyed 'path#id'; the path '-' reads records from stdin (or the given stream).
        workers: processes that sketch texts beside this one (default: one per core; 0: none).
        max_file_size: a larger file is reported as failed, not read (default 64 MiB); max_record_size: a longer
        record is reported as a bad record (default 16 MiB). Bytes, or a size such as '200K', '64M', '1G'.

        Documents (PDF, DOCX, ODT, EPUB, RTF) are read as their text; one that is locked, damaged, has no text
        layer or takes longer than extract_timeout seconds (default 60) to read is reported as failed. Mail
        (.eml, mbox, Maildir) holds one document per message, keyed 'path#MESSAGE-ID', and one per readable
        attachment, keyed 'path#MESSAGE-ID/NAME'."""
        if not paths:
            raise InputError("nothing to add: give at least one file or folder")
        self._require_current()
        from dedupdb.ingest.pipeline import Ingest, add_targets
        from dedupdb.ingest.sources import WalkRules
        from dedupdb.ingest.workers import bulk_collections

        targets = add_targets(paths, records)
        ingest = Ingest(self.store, self.indexer, workers, max_file_size, max_record_size, extract_timeout)
        rules = WalkRules(tuple(include), tuple(only), follow_symlinks)
        with bulk_collections():
            return ingest.run(targets, rules, tuple(exclude), progress, records, stdin)

    def reindex(self, threshold: float | None = None, progress: Progress | None = None) -> Candidates:
        """Rebuild bands, pairs and clusters from stored signatures, optionally for a new threshold (the preset
        stays: a super-shingles store stays one)."""
        self._refuse_newer()
        settings = self.settings
        if threshold is not None and threshold != settings.threshold:
            settings = Settings(**{**{f.name: getattr(settings, f.name) for f in fields(Settings)}, "threshold": threshold})
        banding = candidate_scheme(settings)
        self.settings, self.banding = settings, banding
        self.fingerprinter.settings = settings
        self.indexer = Indexer(self.store, settings, banding, self.fingerprinter)
        with self.store.transaction():
            self.store.write_meta({**settings.to_meta(), **scheme_meta(banding)})
            self.indexer.rebuild(progress)
        return banding

    def optimize(self) -> OptimizeSummary:
        """Merge each index's sorted runs into one of small blocks (the index rows', the containment rows'): a query
        then reads and decodes one small block a key instead of a large one a key and run. Matches stay the same. Each index is merged in a
        transaction of its own, so an interrupted optimize keeps the indexes it finished and loses nothing, and
        another process waits for it as for an add. An add afterwards starts new runs, merged as they grow."""
        self._require_current()
        started = time.perf_counter()
        before = self.store.run_counts()
        with self.store.transaction():
            rewritten = {"index": self.store.compact_index()}
        with self.store.transaction():
            rewritten["containment"] = self.store.compact_containment()
        return OptimizeSummary(before, self.store.run_counts(), rewritten, time.perf_counter() - started)

    def reindex_from_sources(self, progress: Progress | None = None) -> tuple[AddSummary, list[str]]:
        """Rebuild every signature with this version's algorithm by reading the indexed files and record files
        again (stored signatures cannot be re-shingled). Returns the add's summary and the paths that could not
        be read back (gone, or standard input): their documents are forgotten.

        Safe to interrupt: the store says a rebuild is pending until one finishes, and running it again
        starts it over."""
        self._refuse_newer()
        from dedupdb.ingest.summary import STDIN_NAME, AddSummary

        rows = [r for r in self.store.all_files() if r.path != STDIN_NAME]
        present = [r.path for r in rows if Path(r.path).is_file()]
        gone = sorted({r.path for r in rows} - set(present)) + ([STDIN_NAME] if self.store.file_by_path(STDIN_NAME) else [])
        settings = replace(self.settings, algorithm=ALGORITHM_VERSION)
        with self.store.transaction():
            self.store.write_meta({**settings.to_meta(), _REINDEX_PENDING: "1"})
            # Every file reads as changed; the corpus IDF of an older store weighs nothing any more.
            self.store.forget_signatures()
            self.store.delete_files([r.id for r in rows if r.path in set(gone)])
            self.store.forget_meta([_IDF_META], [_IDF_BLOB])
        self.settings = settings
        self.fingerprinter = Fingerprinter(settings)
        self.indexer = Indexer(self.store, settings, self.banding, self.fingerprinter)
        self.outdated = False
        summary = self.add(present, progress=progress) if present else AddSummary()
        with self.store.transaction():
            self.store.write_meta({_REINDEX_PENDING: "0"})
        return summary, gone

    # --- questions ---------------------------------------------------------------

    def query(
        self, text: str, threshold: float | None = None, top: int = 10, containment: float | None = QUERY_CONTAINMENT
    ) -> list[QueryHit]:
        """Stored documents that are near-duplicates of text, or hold at least `containment` of its shingles (a
        passage remembered from a longer text; None: near-duplicates only): exact copies first, then by containment."""
        self._check_query(containment, threshold, top)
        normalized = _comparable(text, "the query text")
        if not normalized:
            raise InputError("the query text is empty")
        if numpy_seconds(self.settings) >= QUERIES_COMPILED_AFTER_SECONDS and not compiled.loaded_aside():
            from dedupdb.ingest.workers import compiled_for_queries

            compiled_for_queries()
        fp = self.fingerprinter.one(normalized)
        if fp.shingles == 0:
            raise InputError("the query has no words or characters to compare (only punctuation or symbols)")
        matches = self.indexer.search(fp, threshold)
        mine = Side(fp.shingles, fp.sketch, fp.fingerprints, fp.simhash)
        finder = self.indexer.containment
        held: dict[int, float] = {}
        sides: dict[int, Side] = {}  # read once for both searches
        if containment is not None:
            # A query shorter than two windows looks up every run it has: its few fingerprints need not be the ones
            # a longer text holding it keeps.
            short = fp.shingles < 2 * self.settings.winnow_window
            probe = query_runs(self.settings, normalized) if short else fp.fingerprints
            held = finder.search(mine, probe, containment, sides)
        scores = _near_scores(matches)
        finder.read_sides(_sides_wanted(scores, held), sides)
        holding = _holding(scores, held, sides)
        shares = dict(zip(holding, shares_in(mine, [sides[cid] for cid in holding], self.settings.sketch_size)))
        scores = _scores(mine, scores, held, sides, self.settings.sketch_size, shares)
        return _hits(scores, self.store.documents_of_contents(list(scores)), top)

    def query_many(
        self,
        texts: Iterable[str | tuple[str, str]],
        threshold: float | None = None,
        top: int = 10,
        containment: float | None = QUERY_CONTAINMENT,
        workers: int | None = None,
    ) -> Iterator[QueryResult]:
        """query() of each text of a corpus, in order, without storing any: one QueryResult each, streamed. Texts are
        strings (each's id is its position, from 0) or (id, text) pairs. They are answered in batches, each looked up
        in the store together; past the first batch, by worker processes (default: one per core; 0: none, all here)
        that read the store as committed, each a batch or a part of one. A text query() refuses (empty, nothing to
        compare) comes back with its error."""
        from dedupdb.ingest.querying import GIVEN, given_texts

        if isinstance(texts, (str, bytes)) or not isinstance(texts, Iterable):
            raise InputError(f"query_many takes an iterable of texts (strings, or (id, text) pairs), not "
                             f"{type(texts).__name__}" + (": query() looks for one text" if isinstance(texts, str) else ""))
        return self._answer_all(given_texts(texts), threshold, top, containment, workers, GIVEN)

    def query_records(
        self,
        path: str | Path,
        records: RecordOptions | None = None,
        threshold: float | None = None,
        top: int = 10,
        containment: float | None = QUERY_CONTAINMENT,
        workers: int | None = None,
        progress: Progress | None = None,
        stdin: BinaryIO | None = None,
    ) -> Iterator[QueryResult]:
        """query_many() of the records of a file (JSON Lines, CSV or one text per line, compressed or not; its format
        by suffix unless records says, lines for another suffix) or of standard input ('-', whose format must be
        given), read as add reads them. A bad record comes back with its reason as error. progress(bytes read,
        bytes in all) is called as batches are answered (bytes in all is 0 when not known)."""
        from dedupdb.ingest import querying
        from dedupdb.ingest.records import RecordOptions

        self._check_query(containment, threshold, top)
        if not isinstance(path, (str, os.PathLike)):
            raise InputError(f"query_records takes a file's path (or '-'), not {type(path).__name__}")
        if stdin is not None and isinstance(stdin, io.TextIOBase):
            raise InputError("stdin must be read as bytes (such as sys.stdin.buffer), not as text")
        if records is not None and not isinstance(records, RecordOptions):
            raise InputError(f"records must be RecordOptions (such as RecordOptions('jsonl')), not {type(records).__name__}")
        items, size, streamed = querying.query_records_of(path, records or RecordOptions(), stdin)
        report = None
        if progress is not None:
            report = lambda last: progress(last.end_offset, size or 0)  # noqa: E731
        if streamed:
            source = querying.STREAM
        else:
            large = size is None or size >= querying.POOL_AT_ONCE_BYTES
            source = querying.FILE if large else querying.GIVEN
        return self._answer_all(items, threshold, top, containment, workers, source, report)

    def _check_query(self, containment: float | None, threshold: float | None, top: int) -> None:
        """The store is current, and the options are numbers in their ranges (NaN is in none): else an OptionError, a
        usage error."""
        self._require_current()
        _check_containment(containment)
        if threshold is not None and not (isinstance(threshold, Real) and 0.0 <= threshold <= 1.0):
            raise OptionError(f"threshold must be in [0, 1], got {threshold!r}")
        if top is not None and (isinstance(top, bool) or not isinstance(top, Integral) or top < 0):
            raise OptionError(f"top must be a whole number, 0 or more (0 or None for all), got {top!r}")

    def _answer_all(self, items, threshold, top, containment, workers, source,
                    progress=None) -> Iterator[QueryResult]:
        from dedupdb.ingest.querying import answered_batches, query_batch

        self._check_query(containment, threshold, top)  # here too: before the first result is asked for
        # Workers answer from a read of the store of their own: the file this one is, as committed.
        workers = (os.cpu_count() or 1) if workers is None else workers
        there = functools.partial(_answer_in_worker, str(self.store.absolute_path), threshold, top, containment)
        here = functools.partial(self._answer_here, threshold=threshold, top=top, containment=containment)
        batches = answered_batches(self.settings, items, workers, here, there, source, progress,
                                   query_batch(self.store.content_id_bound()))
        return (answer for answers in batches for answer in answers)

    def _answer_here(self, items, threshold, top, containment) -> list[QueryResult]:
        from dedupdb.ingest.querying import sketch_items

        batch = sketch_items(self.settings, items)
        with self.store.snapshot():  # a batch is answered from one state of the store
            return self._answer_batch(batch, threshold, top, containment)

    def _answer_batch(self, batch, threshold, top, containment) -> list[QueryResult]:
        """query() of a batch of sketched texts: each lookup of the index made for all of them at once (at a million
        texts, the keys of a few thousand texts reach most of its blocks), their candidates then scored
        QUERIES_SCORED_AT_ONCE texts at a time, the stored texts each part needs read for it alone."""
        from dedupdb.ingest.querying import QUERIES_SCORED_AT_ONCE

        asked = [(item, sketched) for item, sketched in batch if sketched is not None and sketched.error is None]
        fps = self.fingerprinter.batch([sketched.sketch for _, sketched in asked])
        mines = [Side(fp.shingles, fp.sketch, fp.fingerprints, fp.simhash) for fp in fps]
        best = None
        if containment is not None:
            probes = [fp.fingerprints if sketched.runs is None else sketched.runs for fp, (_, sketched) in zip(fps, asked)]
            best = self.indexer.containment.candidates_many(mines, probes, containment)
        found = self.indexer.candidates_many(fps)
        answered: dict[int, list[QueryHit]] = {}
        for start in range(0, len(asked), QUERIES_SCORED_AT_ONCE):
            stop = start + QUERIES_SCORED_AT_ONCE
            scores = self._scored(mines[start:stop], fps[start:stop], None if best is None else best[start:stop],
                                  found.part(start, stop), threshold, containment)
            documents: dict[int, list[HitDocument]] = {}
            for doc in self.store.documents_of_contents(sorted({cid for s in scores for cid in s})):
                documents.setdefault(doc.content_id, []).append(doc)
            answered.update((id(item), _hits(s, [d for cid in s for d in documents.get(cid, ())], top))
                            for (item, _), s in zip(asked[start:stop], scores))
        out = []
        for item, sketched in batch:
            error = item.error if sketched is None else sketched.error
            out.append(QueryResult(item.id, answered.get(id(item), []), item.line, error))
        return out

    def _scored(self, mines, fps, best, found, threshold, containment) -> list[dict[int, tuple]]:
        """The scores of each of these queries' hits (_scores), from the candidates their lookups found: the
        containment candidates' sides read first, whose sketches then serve verifying most near-duplicates."""
        finder = self.indexer.containment
        sides: dict[int, Side] = {}
        held: list[dict[int, float]] = [{} for _ in mines]
        if best is not None:
            held = finder.scored_many(mines, best, containment, sides)
        matches = self.indexer.verified_many(fps, found, threshold, sides)
        near = [_near_scores(m) for m in matches]
        finder.read_sides((cid for n, h in zip(near, held) for cid in _sides_wanted(n, h)), sides)
        # How much of each query its near-duplicates hold, counted for the whole part at once.
        holding = [_holding(n, h, sides) for n, h in zip(near, held)]
        shares = shares_of([(mine, [sides[cid] for cid in cids]) for mine, cids in zip(mines, holding)],
                           self.settings.sketch_size)
        return [_scores(mine, n, h, sides, self.settings.sketch_size, dict(zip(cids, shared)))
                for mine, n, h, cids, shared in zip(mines, near, held, holding, shares)]

    def parts_in_groups(self) -> list[tuple[str, str]]:
        """(key, file path) of the grouped documents that are parts of a file (a message in a mail file, an
        attachment, a record): a cleanup acts on whole files only and passes these over."""
        listing = self.store.duplicate_clusters()
        docs = self.store.cluster_documents([c for c, _, _ in listing])
        return sorted((d.key, d.path) for d in docs if d.record is not None)

    def clusters(
        self,
        min_size: int = 0,
        keep: str = DEFAULT_KEEP,
        prefer: Path | None = None,
        related: bool = False,
        files_only: bool = False,
        templates: bool = False,
    ) -> list[Cluster]:
        """Groups of two or more documents holding the same or nearly the same text, most waste first.

        Each group's first member is the one the keep rule (see grouping.KEEP_RULES; `prefer` puts documents
        under that folder first) keeps, and every other member is an exact copy of it or a verified pair with
        it at or above the threshold. With related, each group is a whole connected component instead, its
        members scored against the first (some may be below the threshold). files_only leaves out records.
        Template pairs (texts that differ only in numbers or one slot of a frame: text/templates.py) group
        nobody unless templates is set; a group one of them joins is then of the kind "template"."""
        out = self.groups_of(
            [c for c, _, _ in self.store.duplicate_clusters()], min_size, keep, prefer, related, files_only, templates
        )
        out.sort(key=group_order)
        return out

    def groups_of(
        self,
        clusters: list[int],
        min_size: int = 0,
        keep: str = DEFAULT_KEEP,
        prefer: Path | None = None,
        related: bool = False,
        files_only: bool = False,
        templates: bool = False,
    ) -> list[Cluster]:
        """The groups of clusters() that these stored clusters (connected components) hold, unsorted: what a
        screen showing a few groups at a time reads (see group_bounds)."""
        prefer = prefer.expanduser().resolve() if prefer else None
        docs = self.store.cluster_documents(clusters)
        if files_only:
            docs = [d for d in docs if d.record is None]
        by_cluster: dict[int, list[DocumentRow]] = {}
        for doc in docs:
            by_cluster.setdefault(doc.cluster, []).append(doc)
        content_ids = sorted({d.content_id for d in docs})
        order = keep_order(keep, self.store.content_chars(content_ids), prefer)
        # Pairs declared not duplicates leave the pair graph before anything is grouped (ignore()).
        # Template pairs too, unless asked for (clusters()).
        ignored = self.store.ignored_content_pairs()
        framed = self.store.template_pairs(content_ids)
        left_out = ignored if templates else ignored | framed
        scores = {pair: score for pair, score in self.store.pair_scores(content_ids).items() if pair not in left_out}
        if left_out:
            by_cluster = _split_components(by_cluster, scores)
        if related:
            groups = self._components(by_cluster, content_ids, order)
        else:
            near = neighbours(((a, b, j) for (a, b), (j, _) in scores.items()), self.settings.threshold)
            groups = [
                (cluster_id, number, [(star.centre, 1.0, True), *star.members])
                for cluster_id, members in by_cluster.items()
                for number, star in enumerate(
                    (s for s in stars(members, near, order) if s.members), 1
                )
            ]
        out = []
        for cluster_id, number, members in groups:
            built = _with_links([
                Member(d.key, d.path, d.record, d.bytes, d.mtime_ns, round(similarity, 4), exact, d.snippet, d.id,
                       d.content_id)
                for d, similarity, exact in members
            ])
            kind = "exact" if all(m.exact for m in built) else "near"
            if templates and framed:
                held = sorted({m.content_id for m in built})
                if any((a, b) in framed for i, a in enumerate(held) for b in held[i + 1 :]):
                    kind = "template"
            cluster = Cluster(cluster_id, built, kind, number)
            if cluster.total_bytes >= min_size:
                out.append(cluster)
        return out

    def group_bounds(self, matching: str | None = None) -> list[tuple[int, int]]:
        """(cluster, bound) of every stored cluster of two documents or more, the largest bound first: no group
        that groups_of() finds in a cluster frees more bytes than its bound (all its documents but the smallest),
        so groups can be listed in clusters()' order reading only the clusters that may come next. With matching,
        only clusters with a document whose key or snippet holds that text."""
        sizes = self.store.duplicate_cluster_sizes(matching)
        return sorted(((c, total - smallest) for c, _, total, smallest in sizes), key=lambda b: (-b[1], b[0]))

    def _components(self, by_cluster: dict[int, list[DocumentRow]], content_ids: list[int], order) -> list:
        """Whole components, each member scored by its sketch against the first (the related view)."""
        sketches = {cid: row.sketch for cid, row in self.store.contents(content_ids).items()}
        groups = []
        for cluster_id, members in by_cluster.items():
            if len(members) < 2:
                continue
            ranked = sorted(members, key=order)
            first = ranked[0]
            scored = [
                (d, 1.0 if d.content_id == first.content_id else
                 sketch_jaccard(sketches[first.content_id], sketches[d.content_id], self.settings.sketch_size),
                 d.content_id == first.content_id)
                for d in ranked
            ]
            groups.append((cluster_id, 1, [scored[0], *sorted(scored[1:], key=lambda s: (-s[1], s[0].key))]))
        return groups

    def unfingerprinted(self) -> int:
        """Texts stored before containment fingerprints existed (schema 4): containment cannot find them until
        reindex_from_sources() reads them again."""
        return self.store.count_without_fingerprints()

    def is_empty(self) -> bool:
        return not self.store.holds_contents()

    def journal(self) -> list[tuple]:
        """Cleanup batches, newest first: (id, created_at, action, target, undone_at, {status: count})."""
        return self.store.journal_batches()

    def document_text(self, key_or_path: str) -> tuple[str, str]:
        """(label, text) of a stored document, read back from its source, or of any file on disk."""
        found = self.store.documents_by_keys([key_or_path])
        if not found:
            resolved = str(Path(key_or_path).expanduser().resolve())
            found = self.store.documents_by_keys([resolved])
        if found:
            key = found[0][2]
            from dedupdb.ingest.export import export_records

            for record in export_records(self, unique=False, keep="first", only={key}):
                return key, record.text
            raise InputError(f"{key} cannot be read back from its source (changed or gone since it was indexed)")
        path = Path(key_or_path).expanduser()
        if path.is_file():
            from dedupdb.ingest.readers import decode_file

            return str(path), decode_file(path)
        raise InputError(f"{key_or_path} is neither a stored document nor a file")

    def sources_beside(self, path: str | Path) -> int | None:
        """How many other files this database holds documents of, where path (resolved, as stored) is one of
        them; None where it holds none of path's."""
        known = self.store.file_by_path(str(path))
        if known is None or known.status == "missing":
            return None
        return sum(1 for row in self.store.all_files() if row.status != "missing" and row.path != known.path)

    def similarity(self, text_a: str, text_b: str) -> float:
        """Jaccard similarity of two texts' shingles, as dedupdb judges documents."""
        a = self.fingerprinter.one(_comparable(text_a, "text_a"))
        b = self.fingerprinter.one(_comparable(text_b, "text_b"))
        return round(sketch_jaccard(a.sketch, b.sketch, self.settings.sketch_size), 4)

    # --- not duplicates --------------------------------------------------------

    def ignore(self, keys: list[str]) -> IgnoreOutcome:
        """Declare the documents with these keys (or paths) not duplicates of each other: every pair of them that
        holds two different texts is remembered, and grouping (clusters(), clean, export --unique, pairs) leaves
        it out of the pair graph, so the two texts are never judged against each other. Copies of one text
        cannot be told apart: such pairs are named in the outcome, not remembered."""
        found = self._documents_named(keys, must_exist=True)
        outcome = IgnoreOutcome()
        pairs = []
        for i, (key_a, content_a) in enumerate(found):
            for key_b, content_b in found[i + 1 :]:
                pair = (min(key_a, key_b), max(key_a, key_b))
                if content_a == content_b:
                    outcome.same_text.append(pair)
                else:
                    pairs.append(pair)
        if not pairs:
            raise InputError("these documents hold the same text: exact copies are always duplicates")
        with self.store.transaction():
            outcome.added = self.store.ignore_pairs(pairs)
        outcome.already = len(pairs) - outcome.added
        return outcome

    def unignore(self, keys: list[str]) -> int:
        """Take back ignore() for every pair of these keys (or paths); returns how many pairs were remembered."""
        names = [key for key, _ in self._documents_named(keys, must_exist=False)]
        pairs = [(min(a, b), max(a, b)) for i, a in enumerate(names) for b in names[i + 1 :]]
        with self.store.transaction():
            return self.store.unignore_pairs(pairs)

    def ignored(self) -> list[IgnoredPair]:
        """Every pair of documents declared not duplicates, by key; in_store says both are stored now."""
        rows = self.store.ignored_pairs()
        stored = {key for _, _, key in self.store.documents_by_keys(sorted({k for a, b, _ in rows for k in (a, b)}))}
        return [IgnoredPair(a, b, at, a in stored and b in stored) for a, b, at in rows]

    def _documents_named(self, items: list[str], must_exist: bool) -> list[tuple[str, int | None]]:
        """(key, content id) of each document named by key or by path, once each; an item naming no document is
        an error with must_exist, else taken as a key (one forgotten since it was ignored)."""
        out: dict[str, int | None] = {}
        for item in items:
            found = self.store.documents_by_keys([item]) or self.store.documents_by_keys(
                [str(Path(item).expanduser().resolve())]
            )
            if found:
                out.setdefault(found[0][2], found[0][1])
            elif must_exist:
                raise InputError(f"{item} is not a document in the database ('dedupdb report' lists them)")
            else:
                out.setdefault(item, None)
        if len(out) < 2:
            raise InputError("name at least two different documents")
        return list(out.items())

    # --- forgetting ------------------------------------------------------------

    def forget_file(self, path: str, status: str | None = None) -> int:
        """Drop a file's documents from the index (inside the caller's transaction); with status, keep its row
        marked so ('missing' after a cleanup moved it away), else delete the row. Returns documents dropped."""
        return self.forget_files([path], status)

    def forget_files(self, paths: list[str], status: str | None = None) -> int:
        """forget_file for many files at once: one removal from the index for all of them."""
        rows = [row for row in (self.store.file_by_path(p) for p in paths) if row is not None]
        documents = [d for row in rows for d in self.store.documents_of_file(row.id)]
        self.indexer.remove_documents(documents)
        if status:
            for row in rows:
                self.store.set_file_status(row.id, status)
        else:
            self.store.delete_files([row.id for row in rows])
        return len(documents)

    def forget(self, items: list[str]) -> tuple[int, list[str]]:
        """Forget documents by key, or every document of a file or of the files under a folder.
        Returns how many documents were forgotten and the items that matched nothing."""
        forgotten, unmatched = 0, []
        with self.store.transaction():
            for item in items:
                by_key = self.store.documents_by_keys([item])
                whole_file = self.store.file_by_path(item)
                if by_key and whole_file is None:  # a record: the rest of its file stays
                    self.indexer.remove_documents([(d, c) for d, c, _ in by_key])
                    forgotten += len(by_key)
                    continue
                path = str(Path(item).expanduser().resolve())
                rows = self.store.files_under(path)
                if not rows:
                    unmatched.append(item)
                for row in rows:
                    forgotten += self.forget_file(row.path)
        return forgotten, unmatched

    def prune(self) -> list[str]:
        """Forget files gone from disk (marked missing by an add, or found gone now); returns their paths."""
        gone = []
        with self.store.transaction():
            for row in self.store.missing_files() + [
                f for f in self.store.indexed_files() + self.store.empty_files() if not Path(f.path).exists()
            ]:
                if row.path == "<stdin>":
                    continue
                self.forget_file(row.path)
                gone.append(row.path)
        return gone

    def export(self, unique: bool = True, keep: str = DEFAULT_KEEP, warn=None,
               templates: bool = False) -> Iterator[ExportedRecord]:
        """Every stored document's text read back from its source; with unique, one per cluster (see export.py),
        template pairs counting as duplicates only with templates."""
        from dedupdb.ingest.export import export_records

        return export_records(self, unique, keep, warn, templates=templates)

    def template_pair_count(self) -> int:
        """How many stored pairs are template pairs (text/templates.py), which groups leave apart by default."""
        return self.store.count_template_pairs()

    def pairs(self, by: str = "document", containment: float | None = None) -> Iterator[Pair]:
        """Every pair of documents that are exact copies (exact, Jaccard 1.0) or verified near-duplicates, and with
        containment, also those where the smaller text holds at least that share of its shingles in the larger (and
        the containment of every pair listed). Streams, content by content in order of arrival: a text held by k
        documents gives k(k-1)/2 exact pairs. by="content" lists texts instead, each by its first document key (no
        exact pairs then)."""
        if by not in PAIRS_BY:
            raise InputError(f"pairs are listed by {' or '.join(PAIRS_BY)}, not {by!r}")
        _check_containment(containment)
        with self.store.snapshot():  # one consistent state however long the listing takes
            ignored = self.store.ignored_content_pairs()  # declared not duplicates: never listed
            for chunk in self.store.content_id_chunks():
                yield from self._pairs_of_chunk(chunk, by, containment, ignored)

    def _pairs_of_chunk(
        self, chunk: list[int], by: str, containment: float | None, ignored: set[tuple[int, int]]
    ) -> Iterator[Pair]:
        """The pairs of pairs() whose first text is one of these contents (ascending)."""
        stored = [pair for pair in self.store.pairs_from(chunk) if pair[:2] not in ignored]
        templates = self.store.template_pairs_from(chunk)
        verified_pairs = {(a, b) for a, b, _, _ in stored}
        scored: dict[int, list[tuple[int, float, int | None, float | None]]] = {}
        if containment is None:
            for a, b, jaccard, distance in stored:
                scored.setdefault(a, []).append((b, jaccard, distance, None))
        else:
            finder = self.indexer.containment
            sides = finder.sides(chunk)
            verified = {(a, b): (jaccard, distance) for a, b, jaccard, distance in stored}
            extra = [
                pair for pair in finder.pairs_from(sides, containment) if pair not in verified and pair not in ignored
            ]
            finder.read_sides((b for _, b in [*verified, *extra]), sides)
            for a, b in sorted([*verified, *extra]):
                if a in sides and b in sides:
                    jaccard, distance, share = pair_scores(sides[a], sides[b], self.settings.sketch_size)
                    jaccard, distance = verified.get((a, b), (jaccard, distance))  # as it was verified
                    scored.setdefault(a, []).append((b, jaccard, distance, share))
        keys = self.store.document_keys(set(chunk) | {b for rows in scored.values() for b, *_ in rows})
        copies = {a for a in chunk if len(keys.get(a, ())) > 1} if by == "document" else set()
        hashed = self.store.with_simhash(copies)
        for a in chunk:
            mine = keys.get(a, [])
            if a in copies:
                distance = 0 if a in hashed else None
                for i, x in enumerate(mine):
                    for y in mine[i + 1 :]:
                        yield Pair(x, y, 1.0, distance, True, 1.0, "exact")
            for b, jaccard, distance, share in scored.get(a, ()):
                theirs = keys.get(b, [])
                kind = "template" if (a, b) in templates else "near" if (a, b) in verified_pairs else "contained"
                for x in mine[:1] if by == "content" else mine:
                    for y in theirs[:1] if by == "content" else theirs:
                        yield Pair(min(x, y), max(x, y), jaccard, distance, False, share, kind)

    def stats(self) -> dict:
        counts = self.store.counts()
        clusters = self.clusters()
        return {
            "database": str(self.store.path),
            **counts,
            "clusters": len(clusters),
            "exact_clusters": sum(1 for c in clusters if c.kind == "exact"),
            "near_clusters": sum(1 for c in clusters if c.kind == "near"),
            "reclaimable_bytes": sum(c.reclaimable_bytes for c in clusters),
            "database_bytes": self.store.size_bytes(),
            "settings": {f.name: getattr(self.settings, f.name) for f in fields(Settings)},
            "current_algorithm": ALGORITHM_VERSION,  # a store of an older one kept says so (reindex --from-sources)
            "lsh": scheme_stats(self.banding),
            "candidate_probability": curve(self.banding),  # by Jaccard similarity: the scheme's S-curve
        }

    def candidate_curves(self) -> list[dict]:
        """The chance that a pair of each Jaccard similarity becomes a candidate, under this store's scheme and
        under the other preset's for the same threshold and permutations (super-shingles only with the 84 MinHash
        values they need): one dict per preset, with its scheme, its curve, the probability at the threshold,
        and whether this store uses it."""
        s = self.settings
        schemes = {PRESET_BANDING: _banding(s.threshold, s.num_perm)}
        if s.num_perm >= SUPER_SHINGLE_VALUES:
            schemes[PRESET_SUPER_SHINGLES] = SuperShingles()
        schemes[s.preset] = self.banding
        return [
            {"preset": preset, "scheme": scheme.describe(), "probability": curve(scheme),
             "at_threshold": float(f"{float(scheme.probability(s.threshold)):.3g}"), "this_store": preset == s.preset}
            for preset, scheme in schemes.items()
        ]

    # --- checking ----------------------------------------------------------------

    def check(self) -> "CheckReport":
        """SQLite's integrity check and the store's own invariants (index rows, document counts and links,
        pairs, clusters), read in one snapshot; report.sound is True when all hold (see check.py)."""
        from dedupdb.index.check import check_database

        return check_database(self)


# The stores a worker process answers batch queries from, by path: opened once, for reading.
_WORKER_STORES: dict[str, Database] = {}


def _answer_in_worker(path: str, threshold, top, containment, settings: Settings, items) -> list[QueryResult]:
    """A batch query's batch, or a part of one, answered in a worker process (querying.answered_batches) from its
    own read of the store."""
    db = _WORKER_STORES.get(path)
    if db is None:
        db = _WORKER_STORES[path] = Database.open(path, create=False, readonly=True)
    return db._answer_here(items, threshold, top, containment)


def _comparable(text: str, what: str) -> str:
    """text normalized, as a query or a comparison takes it: an InputError where it is not a string, or holds half
    a surrogate pair (which a Python string can, and no encoding takes)."""
    if not isinstance(text, str):
        raise InputError(f"{what} must be a string, not {type(text).__name__}")
    normalized = normalize(text)
    if not normalized.isascii() and not valid_utf8(normalized):
        raise InputError(f"{what} is not valid Unicode (it holds half a surrogate pair)")
    return normalized


def _check_containment(containment: float | None) -> None:
    """A containment asked of a query or a listing is a number in (0, 1] (NaN is in none): else a usage error."""
    if containment is not None and not (isinstance(containment, Real) and 0.0 < containment <= 1.0):
        raise OptionError(f"containment must be in (0, 1], got {containment!r}")


def _near_scores(matches) -> dict[int, tuple]:
    """content id -> (jaccard, hamming, exact, containment) of a query's near-duplicates (containment of an exact
    copy is 1; of the others not known yet)."""
    return {m.content_id: (m.jaccard, m.hamming, m.exact, 1.0 if m.exact else None) for m in matches}


def _sides_wanted(scores: dict[int, tuple], held: dict[int, float]) -> list[int]:
    """The stored texts whose sides scoring a query needs: near-duplicates whose containment is not known, and
    texts found only by containment."""
    return [c for c, s in scores.items() if s[3] is None] + [c for c in held if c not in scores]


def _holding(scores: dict[int, tuple], held: dict[int, float], sides: dict[int, Side]) -> list[int]:
    """The near-duplicates of a query whose share of it is still to be counted, of those whose sides were read."""
    return [cid for cid in _sides_wanted(scores, held) if cid in sides and cid in scores]


def _scores(mine: Side, scores: dict[int, tuple], held: dict[int, float], sides: dict[int, Side],
            sketch_size: int, shares: dict[int, float | None]) -> dict[int, tuple]:
    """A query's scores completed from the sides read: how much of the query each near-duplicate holds (shares, of
    those _holding names), and the Jaccard of each text found only by containment."""
    scores = dict(scores)
    wanted = [cid for cid in _sides_wanted(scores, held) if cid in sides]
    for cid, share in shares.items():
        scores[cid] = (*scores[cid][:3], None if share is None else round(share, 4))
    for cid in wanted:
        if cid not in scores:
            scores[cid] = (*pair_similarity(mine, sides[cid], sketch_size), False, held[cid])
    return scores


def _hits(scores: dict[int, tuple], documents: list[HitDocument], top: int) -> list[QueryHit]:
    """The documents holding the scored texts, exact copies first, then by containment (or Jaccard)."""
    hits = []
    for doc in documents:
        jaccard, distance, exact, share = scores[doc.content_id]
        hits.append(QueryHit(doc.key, doc.path, doc.record, jaccard, distance, exact, doc.bytes, doc.snippet, share))
    hits.sort(key=lambda h: (not h.exact, -(h.jaccard if h.containment is None else h.containment), -h.jaccard,
                             h.hamming if h.hamming is not None else 65, h.key))
    return hits[:top] if top else hits


def _check_compatible(stored: Settings, requested: dict) -> None:
    for name, value in requested.items():
        have = getattr(stored, name)
        if (have != value) if isinstance(have, str) else float(have) != float(value):
            hint = (
                f"run 'dedupdb reindex --threshold {value}' to rebuild for it"
                if name == "threshold"
                else "use a new --db for different settings"
            )
            raise SettingsError(f"this database was created with {name}={have}, not {value}; {hint}")


def _with_links(members: list[Member]) -> list[Member]:
    """Mark each file that is a hard link of an earlier member's file (one inode, two names): it holds no
    space of its own. Looked up on disk now, so links made since the add count too."""
    from dedupdb.ingest.sources import file_identity

    seen: dict[tuple[int, int], str] = {}
    out = []
    for m in members:
        identity = file_identity(m.path) if m.record is None else None
        if identity is not None and identity in seen:
            m = replace(m, linked_to=seen[identity])
        elif identity is not None:
            seen[identity] = m.path
        out.append(m)
    return out


def group_order(cluster: Cluster) -> tuple:
    """The order of clusters(): the most reclaimable bytes first, then the larger group, then by key."""
    return (-cluster.reclaimable_bytes, -len(cluster.members), cluster.representative.key)


def _split_components(
    by_cluster: dict[int, list[DocumentRow]], scores: dict[tuple[int, int], tuple[float, int | None]]
) -> dict[int, list[DocumentRow]]:
    """The stored clusters cut again along these pairs only (the ignored ones left out), each part named by its
    smallest content id as stored clusters are."""
    from dedupdb.index.clusters import components

    roots = components({d.content_id for members in by_cluster.values() for d in members}, scores)
    out: dict[int, list[DocumentRow]] = {}
    for members in by_cluster.values():
        for d in members:
            out.setdefault(roots[d.content_id], []).append(d)
    return out


def check_path(path: str | Path | None) -> CheckReport:
    """The check (index/check.py) of the database at path; one too damaged to open gets a report of what SQLite
    finds wrong with it (an error that is not damage, such as a missing file or a lock, is raised as it is)."""
    from dedupdb.index.check import check_database, unopenable_report

    try:
        database = Database.open(path, create=False)
    except DatabaseError:
        target = Path(path).expanduser() if path else default_db_path()
        report = unopenable_report(target) if target.is_file() else None
        if report is None:
            raise
        return report
    with database:
        return check_database(database)
