"""dedupdb: a local near-duplicate database for text.

    import dedupdb
    with dedupdb.open("notes.db") as db:
        db.add(["~/notes"])
        for cluster in db.clusters():
            print(cluster.representative.path, [m.path for m in cluster.members[1:]])
        print(db.query("some text"))
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from dedupdb.errors import DatabaseError, DedupError, InputError, OptionError, ReadError, SettingsError

if TYPE_CHECKING:
    from dedupdb.config import Settings, default_db_path
    from dedupdb.database import Cluster, Database, Member, Pair, QueryHit
    from dedupdb.ingest.summary import AddSummary

__version__ = "0.1.0"

# Loaded when first used: the command line imports this package, and most commands need few of these (the
# database module brings numpy and the whole index).
_LAZY = {
    "AddSummary": "ingest.summary",
    "Cluster": "database",
    "Database": "database",
    "Member": "database",
    "Pair": "database",
    "QueryHit": "database",
    "Settings": "config",
    "default_db_path": "config",
}


def __getattr__(name: str):
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))


def open(path: str | Path | None = None, create: bool = True, **settings) -> Database:  # noqa: A001
    """Open the database at path (default: the user data dir, or $DEDUPDB_DB)."""
    from dedupdb.database import Database

    return Database.open(path, create=create, **settings)


__all__ = [
    "AddSummary",
    "Cluster",
    "Database",
    "DatabaseError",
    "DedupError",
    "InputError",
    "Member",
    "OptionError",
    "Pair",
    "QueryHit",
    "ReadError",
    "Settings",
    "SettingsError",
    "default_db_path",
    "open",
]
