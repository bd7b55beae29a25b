"""One exception family: the CLI turns any DedupError into a one-line message and exit status 1 (2 for an
OptionError, a usage error)."""

from __future__ import annotations


class DedupError(Exception):
    """Base class for every error dedupdb reports to the user."""


class DatabaseError(DedupError):
    """The database cannot be opened, is locked, corrupt, or newer than this code."""


class SettingsError(DedupError):
    """Requested settings conflict with the ones the database was created with."""


class InputError(DedupError):
    """A path, text or option given by the user cannot be used."""


class OptionError(InputError):
    """A value given for an option or setting is malformed or out of its range: a usage error (exit status 2)."""


class SettingValueError(SettingsError, OptionError):
    """A setting's value is out of its range (a threshold of 1.5), caught as either kind."""


class ReadError(DedupError):
    """One file could not be read; a folder ingest reports it and goes on."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason
