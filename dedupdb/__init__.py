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

from .config import Settings, default_db_path
from .database import Cluster, Database, Member, Pair, QueryHit
from .errors import DatabaseError, DedupError, InputError, ReadError, SettingsError
from .summary import AddSummary

__version__ = "0.1.0"


def open(path: str | Path | None = None, create: bool = True, **settings) -> Database:  # noqa: A001
    """Open the database at path (default: the user data dir, or $DEDUPDB_DB)."""
    return Database.open(path, create=create, **settings)


__all__ = [
    "AddSummary",
    "Cluster",
    "Database",
    "DatabaseError",
    "DedupError",
    "InputError",
    "Member",
    "Pair",
    "QueryHit",
    "ReadError",
    "Settings",
    "SettingsError",
    "default_db_path",
    "open",
]
