"""One exception family: the CLI turns any DedupError into a one-line message and exit status 1."""

from __future__ import annotations


class DedupError(Exception):
    """Base class for every error dedupdb reports to the user."""


class DatabaseError(DedupError):
    """The database cannot be opened, is locked, corrupt, or newer than this code."""


class SettingsError(DedupError):
    """Requested settings conflict with the ones the database was created with."""


class InputError(DedupError):
    """A path, text or option given by the user cannot be used."""


class ReadError(DedupError):
    """One file could not be read; a folder ingest reports it and goes on."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
