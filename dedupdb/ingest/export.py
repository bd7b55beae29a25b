"""Reading stored documents back from their sources, optionally one per duplicate cluster.

The store keeps fingerprints, not texts, so an export re-reads each file (or
record file) and passes on the documents still as they were indexed; a source
changed since then is reported and left out rather than exported wrongly.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from dedupdb.errors import InputError, ReadError
from dedupdb.index.grouping import KEEP_RULES
from dedupdb.config import MAX_FILE_BYTES
from dedupdb.ingest.mail import MessageKeys, messages_of, parse_message
from dedupdb.ingest.records import (
    MAIL_FORMATS,
    Record,
    RecordOptions,
    compression_of,
    open_record_file,
    read_records,
    sniff_encoding,
)
from dedupdb.ingest.readers import file_text
from dedupdb.ingest.sources import read_bytes


@dataclass(frozen=True)
class ExportedRecord:
    key: str
    text: str
    raw: str          # the record as it stands in its source (the whole text for a file)
    source: str       # "file", "mail", or the record format: "jsonl", "csv", "lines"


def dropped_keys(clusters) -> set[str]:
    """Keys of every group member except the first, the one its keep rule keeps (each is an exact copy of
    it or at least the threshold similar to it, so nothing unlike what stays is dropped)."""
    return {m.key for cluster in clusters for m in cluster.members[1:]}


def export_records(
    db, unique: bool, keep: str, warn: Callable[[str], None] | None = None, only: set[str] | None = None,
    templates: bool = False,
) -> Iterator[ExportedRecord]:
    """Stored documents read back from their sources, in the order their files were indexed; only, if given,
    limits this to those keys. With unique, template pairs count as duplicates only with templates."""
    warn = warn or (lambda message: None)
    if keep not in KEEP_RULES:
        raise InputError(f"unknown keep rule {keep!r}; use one of {', '.join(KEEP_RULES)}")
    drop = dropped_keys(db.clusters(keep=keep, templates=templates)) if unique else set()
    rows = db.store.indexed_files()
    if only is not None:
        rows = [r for r in rows if r.path in only or any(k.startswith(r.path + "#") for k in only)]
    for row in rows:
        path = Path(row.path)
        try:
            st = os.stat(path)
        except OSError:
            warn(f"{row.path}: cannot be read back (gone or not a file); left out")
            continue
        if row.kind == "records" and compression_of(path):
            # A compressed record file stores the size of its decompressed bytes; its own size is in its digest.
            changed = not row.digest.endswith(f"@{st.st_size}")
        else:
            changed = st.st_size != row.size
        changed = changed or (row.mtime_ns and st.st_mtime_ns != row.mtime_ns)
        if changed or not row.mtime_ns:
            warn(f"{row.path}: changed since it was indexed; run 'dedupdb add' again; left out")
            continue
        if row.kind == "file":
            if row.path in drop or (only is not None and row.path not in only):
                continue
            try:
                text = file_text(path, read_bytes(path))
            except ReadError as exc:
                warn(f"{exc}; left out")
                continue
            yield ExportedRecord(row.path, text, text, "file")
            continue
        options = RecordOptions.from_json(row.options)
        stored = db.store.keys_of_file(row.id)
        if options.format in MAIL_FORMATS:
            wanted = {k for k in stored if k not in drop and (only is None or k in only)}
            yield from _mail_parts(row.path, options.format, wanted)
            continue
        emitted: set[str] = set()
        with open_record_file(path) as stream:
            encoding = sniff_encoding(stream.read(64 * 1024), row.path)
            for item in read_records(stream, options, 0, 0, encoding):
                if not isinstance(item, Record):
                    continue
                key = f"{row.path}#{item.record_id}"
                if key in stored and key not in drop and (only is None or key in only) and key not in emitted:
                    emitted.add(key)  # a repeated id was stored once, from its first record
                    yield ExportedRecord(key, item.text, item.raw, options.format)
        # A record edited in place (its file's size and time kept) is no longer found by its id: said, as a
        # changed file is, never left out unsaid.
        unfound = sum(1 for k in stored if k not in drop and (only is None or k in only) and k not in emitted)
        if unfound:
            warn(f"{row.path}: {unfound} of its stored records not found in it (changed since it was indexed); "
                 "run 'dedupdb add' again; left out")


def _mail_parts(path: str, fmt: str, wanted: set[str]) -> Iterator[ExportedRecord]:
    """The messages and attachments of a mail file whose keys are wanted, keyed as the add keyed them."""
    if not wanted:
        return
    seen: set[str] = set()
    keys = MessageKeys(path, seen.__contains__)
    with open(path, "rb") as stream:
        for message in messages_of(stream, fmt, 0, 0, None, MAX_FILE_BYTES):
            parsed = parse_message(message.data, MAX_FILE_BYTES)
            own_key, own_id = keys.message(parsed.message_id, message.position)
            seen.add(own_key)
            for part in parsed.parts:
                key = own_key if part.name is None else MessageKeys.attachment(own_key, own_id, part.name)[0]
                if key in wanted and part.text is not None:
                    yield ExportedRecord(key, part.text, part.text, "mail")
