"""Settings, defaults and where things live on disk."""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from dedupdb.errors import OptionError, SettingValueError

APP_NAME = "dedupdb"
DB_ENV_VAR = "DEDUPDB_DB"
DEFAULT_DB_NAME = "dedupdb.sqlite"

# Bumped whenever a change to normalization, tokenizing or hashing would give
# different signatures for the same text: a database built by another version
# of the algorithm must be re-indexed rather than silently mixed.
# 2: each digit of a number is a token of its own, and hashtags and mentions are recognised only at the start of a token.
# 3: MinHash values are kept as their low 16 bits, and band keys hash those (migration 0007 converts a store of 2).
# 4: SimHash weighs words other than Chinese by a fixed table of word frequencies, not by an IDF learnt from the
#    store, so that a text's SimHash no longer depends on what else was added or where an add's batches began
#    (no migration can convert a store of 3: its texts must be read again, by reindex --from-sources).
# 5: short text not mostly CJK adds the character 5-grams of its tokens to its word bigrams (a view that fades
#    from 16 to 48 tokens), and the lowest bit of a shingle hash tells the views apart (texts read again, by
#    reindex --from-sources).
# 6: character 4-grams instead of 5-grams, and two short texts compared by their character n-grams alone
#    (texts read again, by reindex --from-sources).
# 7: Chinese words for SimHash segmented by jieba-rs, not jieba's Python code: the same words (as SimHash counts
#    them) in every one of 102,525 real Chinese texts measured, twelve times quicker.
ALGORITHM_VERSION = 7
# The versions whose stores this code still adds to and queries, sketching each as its version did: a store of 6
# keeps jieba's Python segmenting until reindex --from-sources moves it to 7, since so few of its fingerprints
# would change that making every store be read again would cost more than it gives.
ALGORITHMS_KEPT = (6, 7)


# How candidate pairs are found (lsh.py): LSH bands chosen for the threshold, or Broder's super-shingles
# (6 groups of 14 MinHash values, candidates on 2 equal groups), which suit near-identical texts only.
PRESET_BANDING = "banding"
PRESET_SUPER_SHINGLES = "super-shingles"
PRESETS = (PRESET_BANDING, PRESET_SUPER_SHINGLES)
SUPER_SHINGLE_VALUES = 84

# Least share of a query's shingles a document must hold to be listed for it (besides its near-duplicates).
QUERY_CONTAINMENT = 0.5


def default_db_path() -> Path:
    """The database used when neither --db nor DEDUPDB_DB says otherwise."""
    env = os.environ.get(DB_ENV_VAR)
    if env:
        return Path(env).expanduser()
    import platformdirs  # here, not at the top: a command given --db never needs it

    return Path(platformdirs.user_data_dir(APP_NAME)) / DEFAULT_DB_NAME


def cache_dir() -> Path:
    """Where tables derived from installed data are kept (keep_table), and jieba its dictionary cache (never the
    working directory)."""
    import platformdirs

    return Path(platformdirs.user_cache_dir(APP_NAME))


def installed_stamp(package: str) -> str:
    """Names the copy of a package installed: its first file's path, time and size, which another version installed
    over it changes. Found without importing it, or importlib.metadata (25-50 ms a process)."""
    import importlib.util

    spec = importlib.util.find_spec(package)
    if spec is None or not spec.origin:
        return f"{package}:absent"
    try:
        stat = os.stat(spec.origin)
    except OSError:
        return f"{spec.origin}:0:0"
    return f"{spec.origin}:{stat.st_mtime_ns}:{stat.st_size}"


# What reading a kept table may raise when the file is not one (empty, cut short, another's bytes): the table is then
# derived again, never the add or query it serves made to fail.
UNREADABLE_TABLE = (OSError, ValueError, EOFError, KeyError)


def kept_table(path: Path, derive, fits):
    """A table derived from installed data (a numpy array): the one kept at path in the cache folder where it reads
    back whole and fits(table) says it is the one asked for, else derive()'s, kept there (keep_table)."""
    import numpy as np

    try:
        table = np.load(path, allow_pickle=False)
        # A zip file at the path loads as an archive of arrays, not one: another's file, as unreadable ones are.
        if isinstance(table, np.ndarray) and fits(table):
            return table
    except UNREADABLE_TABLE:
        pass
    table = derive()
    keep_table(path, table)
    return table


def keep_table(path: Path, table) -> None:
    """Write a table derived from installed data (a numpy array) to the cache folder, whole or not at all (another
    process may be reading it)."""
    import numpy as np

    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(partial, "wb") as f:
            np.save(f, table, allow_pickle=False)
        os.replace(partial, path)
    except OSError:
        # A cache that cannot be written (a full disk, a folder in the way): the table is derived again next time,
        # and no partial copy is left behind by each process that tried.
        with contextlib.suppress(OSError):
            partial.unlink(missing_ok=True)


@dataclass(frozen=True)
class Settings:
    """Parameters fixed when a database is created and recorded in its meta table."""

    threshold: float = 0.5          # Jaccard similarity at or above which two documents are near-duplicates
    num_perm: int = 256             # MinHash permutations (53 bands x 4 rows at threshold 0.5)
    word_ngram: int = 2             # shingle size for space-separated text (words)
    char_ngram: int = 4             # character n-grams short space-separated text adds (text/tokens.py); 0: none
    cjk_ngram: int = 2              # shingle size for CJK text (characters)
    simhash_distance: int = 3       # Hamming distance for SimHash near-duplicates
    simhash_min_features: int = 60  # shorter documents are judged by MinHash only
    sketch_size: int = 1024         # bottom-k shingle hashes kept to verify candidates
    containment_ngram: int = 4      # tokens per hashed run winnowed for containment (see sketch/winnowing.py)
    winnow_window: int = 9          # runs per winnowing window: any shared run of 12 tokens is found
    seed: int = 1
    algorithm: int = ALGORITHM_VERSION
    preset: str = PRESET_BANDING    # candidate generation: PRESETS

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold <= 1.0:
            raise SettingValueError(f"threshold must be in (0, 1], got {self.threshold}")
        if not 16 <= self.num_perm <= 1024:
            raise SettingValueError(f"permutations must be between 16 and 1024, got {self.num_perm}")
        if not 1 <= self.word_ngram <= 10 or not 1 <= self.cjk_ngram <= 10 or not 0 <= self.char_ngram <= 10:
            raise SettingValueError("shingle sizes must be between 1 and 10 (character n-grams: 0 for words)")
        if not 0 <= self.simhash_distance <= 15:
            raise SettingValueError(f"SimHash distance must be between 0 and 15, got {self.simhash_distance}")
        if not 1 <= self.containment_ngram <= 10 or not 1 <= self.winnow_window <= 64:
            raise SettingValueError("containment n-grams must be 1 to 10 tokens and winnowing windows 1 to 64 of them")
        if self.preset not in PRESETS:
            raise SettingValueError(f"preset must be one of {', '.join(PRESETS)}, got {self.preset!r}")
        if self.preset == PRESET_SUPER_SHINGLES and self.num_perm < SUPER_SHINGLE_VALUES:
            raise SettingValueError(f"super-shingles need at least {SUPER_SHINGLE_VALUES} permutations, got {self.num_perm}")

    def to_meta(self) -> dict[str, str]:
        return {f"setting.{k}": str(v) for k, v in asdict(self).items()}

    @classmethod
    def from_meta(cls, meta: dict[str, str]) -> "Settings":
        values = {}
        for f in fields(cls):
            raw = meta.get(f"setting.{f.name}")
            if raw is not None:
                values[f.name] = (
                    raw if f.type in ("str", str) else float(raw) if f.type in ("float", float) else int(raw)
                )
        return cls(**values)


# Batch size for the ingest loop: large enough to amortize numpy and SQLite call overhead, and the reading of
# an index's large runs, which a batch of near-duplicates needs most blocks of whatever its size (4,000
# documents read them at a quarter of the cost per document of 1,000); small enough that an interrupt loses
# little work.
INGEST_BATCH = 4000
# On a large store a batch is this share of the texts it holds (up to MAX_INGEST_BATCH): the probes of a batch read
# nearly every block of the index's large runs, so a batch that grows with the store keeps that reading per
# document level instead of growing with the store (a million documents: 0.17 ms a document at 4,000, 0.055 ms at
# 16,000).
INGEST_BATCH_SHARE = 64
# The most documents a batch holds, however large the store: its texts, sketches and candidates are in memory, and
# the next batch's too while it is written (about 300 MB more at 15,000 documents onto a million than at 4,000).
MAX_INGEST_BATCH = 16384


def ingest_batch(stored_texts: int, floor: int = INGEST_BATCH) -> int:
    """Documents per ingest batch for a store holding this many distinct texts."""
    return max(floor, min(MAX_INGEST_BATCH, stored_texts // INGEST_BATCH_SHARE))


# Batches are committed together every few seconds: each commit rewrites the index pages its batches touched.
COMMIT_SECONDS = 3.0
# Files larger than this are not read whole into memory as one document.
MAX_FILE_BYTES = 64 * 1024 * 1024
# A longer record is reported as a bad record, never held in memory ('add --max-record-size' sets another).
MAX_RECORD_BYTES = 16 * 1024 * 1024
SNIPPET_CHARS = 160


_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([kmgt]?)(?:i?b)?\s*", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}


def parse_size(value: str | int, name: str = "size") -> int:
    """Bytes from a count ('1500') or a number with a binary suffix ('200K', '64M', '1.5G', '64MiB')."""
    if isinstance(value, bool):
        raise OptionError(f"{name}: {value!r} is not a size")
    if isinstance(value, int):
        size = value
    else:
        match = _SIZE.fullmatch(str(value))
        if not match:
            raise OptionError(f"{name}: {value!r} is not a size; give bytes or a number with K, M or G (200K, 64M, 1G)")
        size = int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])
    if size < 1:
        raise OptionError(f"{name}: the size must be at least 1 byte, got {value!r}")
    return size


def size_text(size: int) -> str:
    """A limit as people write it: '64 MiB', '200 KiB', '1000 bytes'."""
    for unit, name in ((1 << 40, "TiB"), (1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} bytes"
