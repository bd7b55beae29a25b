"""The inputs of a scale-out job: which shards, in which format, and their records, read as `dedupdb add` reads
them (the same parsers, ids, limits and bad-record rules), from local paths or any URI pyarrow's filesystems open.

A record file is read by the engine's own reader (records.read_records), which needs a seekable local file: a
shard behind a URI is first copied to a temporary local file by the task that reads it. Parquet is read with
pyarrow, a record's id being its id field or its row number (1-based, as a line number is elsewhere).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from dedupdb.config import MAX_RECORD_BYTES
from dedupdb.errors import InputError
from dedupdb.ingest.records import (
    BadRecord,
    EndOfRecords,
    Record,
    RecordOptions,
    compression_of,
    inner_suffix,
    open_record_file,
    read_records,
    sniff_encoding,
    too_long,
)
from dedupdb.ingest.sources import Candidate, WalkRules, walk

PARQUET = "parquet"
_RECORD_SUFFIXES = {".jsonl": "jsonl", ".ndjson": "jsonl", ".csv": "csv", ".tsv": "csv", ".parquet": PARQUET}


@dataclass(frozen=True)
class Shard:
    uri: str      # a resolved local path, or the URI as given
    format: str   # jsonl, csv, lines or parquet
    options: str  # RecordOptions JSON (text and id fields, limit)
    # A local record file's size and time when the job found it, as `add` keeps them (a compressed file's size in
    # its digest, '@SIZE'), so that an imported store knows the file unchanged and reads it back for export; no
    # content digest, so a file grown since is read again whole, never resumed.
    facts: tuple[int, int, str] | None = None  # (size, mtime_ns, digest)

    def as_dict(self) -> dict:
        out = {"uri": self.uri, "format": self.format, "options": self.options}
        if self.facts is not None:
            out.update(size=self.facts[0], mtime_ns=self.facts[1], digest=self.facts[2], records=0)
        return out


def is_uri(text: str) -> bool:
    return "://" in text


def shards(inputs: list[str], options: RecordOptions) -> list[Shard]:
    """The record files of the inputs, in the order given, a folder's files in sorted order. A file's format is
    its suffix's (before a compression suffix) or options.format; a folder contributes the files it recognises.
    A missing input or one of no known format is an InputError."""
    out: list[Shard] = []
    seen: set[str] = set()
    for given in inputs:
        for uri, is_dir_member in _expand(given):
            fmt = _format_of(uri, options)
            if fmt is None:
                if is_dir_member:
                    continue
                raise InputError(f"{uri}: not a record file (use --records jsonl|csv|lines, or a .parquet file)")
            if uri not in seen:
                seen.add(uri)
                resolved = options.resolved(fmt) if fmt != PARQUET else RecordOptions(
                    "auto", options.text_field or "text", options.id_field, options.max_record_bytes)
                out.append(Shard(uri, fmt, resolved.to_json(), _facts(uri, fmt)))
    if not out:
        raise InputError("no record files among the inputs")
    return out


def _facts(uri: str, fmt: str) -> tuple[int, int, str] | None:
    if is_uri(uri) or fmt == PARQUET:
        return None  # add reads neither
    try:
        st = os.stat(uri)
    except OSError as exc:
        raise InputError(f"{uri}: cannot be read ({exc.strerror or exc})") from None
    if compression_of(uri):
        return 0, st.st_mtime_ns, f"@{st.st_size}"
    return st.st_size, st.st_mtime_ns, ""


def _format_of(uri: str, options: RecordOptions) -> str | None:
    suffix = inner_suffix(Path(uri.split("://", 1)[-1]))
    if suffix == ".parquet":
        return PARQUET
    if options.format != "auto":
        return options.format
    return _RECORD_SUFFIXES.get(suffix)


def _expand(given: str) -> Iterator[tuple[str, bool]]:
    """(uri, found in a folder) of each file an input names."""
    if is_uri(given):
        from pyarrow import fs

        try:
            filesystem, path = fs.FileSystem.from_uri(given)
            info = filesystem.get_file_info(path)
        except Exception as exc:  # pyarrow raises several kinds for a bad URI or an unreachable store
            raise InputError(f"{given}: cannot be opened ({exc})") from None
        if info.type == fs.FileType.NotFound:
            raise InputError(f"no such file or folder: {given}")
        if info.type == fs.FileType.Directory:
            scheme = given.split("://", 1)[0]
            entries = filesystem.get_file_info(fs.FileSelector(path, recursive=True))
            for entry in sorted((e for e in entries if e.type == fs.FileType.File), key=lambda e: e.path):
                yield f"{scheme}://{entry.path}", True
        else:
            yield given, False
        return
    path = Path(given).expanduser()
    if not path.exists():
        raise InputError(f"no such file or folder: {given}")
    path = path.resolve()
    if path.is_dir():
        # As add walks a folder (its own files first, hidden ones, links and special files passed over), so that
        # a job and a store read the same files in the same order; Parquet, which add never reads, too.
        for item in walk(path, WalkRules(include=("*.parquet",))):
            if isinstance(item, Candidate):
                yield str(item.path), True
    else:
        yield str(path), False


@contextmanager
def local_copy(uri: str) -> Iterator[Path]:
    """A local path holding the shard's bytes: the file itself, or a temporary copy of a remote one."""
    if not is_uri(uri):
        yield Path(uri)
        return
    from pyarrow import fs

    filesystem, path = fs.FileSystem.from_uri(uri)
    suffix = "".join(Path(path).suffixes[-2:])
    with tempfile.TemporaryDirectory(prefix="dedupdb-shard-") as folder:
        local = Path(folder) / f"shard{suffix}"
        with filesystem.open_input_stream(path, compression=None) as source, open(local, "wb") as target:
            shutil.copyfileobj(source, target, 1 << 20)
        yield local


@dataclass(frozen=True)
class ShardRecord:
    record_id: str
    line: int
    text: str
    raw: str


def shard_records(shard: Shard) -> Iterator[ShardRecord | BadRecord]:
    """The records of one shard in order; a repeated id is a BadRecord after its first record, as in add."""
    options = RecordOptions.from_json(shard.options)
    seen: set[str] = set()
    for item in _records(shard, options):
        if isinstance(item, BadRecord):
            yield item
        elif item.record_id in seen:
            yield BadRecord(item.line, f"duplicate id {item.record_id!r}", 0)
        else:
            seen.add(item.record_id)
            yield item


def _records(shard: Shard, options: RecordOptions) -> Iterator[ShardRecord | BadRecord]:
    with local_copy(shard.uri) as path:
        if shard.format == PARQUET:
            yield from _parquet_records(path, options)
            return
        with open_record_file(path) as stream:
            encoding = sniff_encoding(stream.read(64 * 1024))
            for item in read_records(stream, options, 0, 0, encoding):
                if isinstance(item, Record):
                    yield ShardRecord(item.record_id, item.line, item.text, item.raw)
                elif isinstance(item, BadRecord):
                    yield item
                elif not isinstance(item, EndOfRecords):
                    raise AssertionError(f"unexpected item {item!r}")


def _parquet_records(path: Path, options: RecordOptions) -> Iterator[ShardRecord | BadRecord]:
    import pyarrow.parquet as pq

    try:
        table_file = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow's errors for a file that is not Parquet
        raise InputError(f"{path}: not a readable Parquet file ({exc})") from None
    names = table_file.schema_arrow.names
    for field in (options.text_field, options.id_field):
        if field and field not in names:
            raise InputError(f"{path}: no column {field!r} ({', '.join(names[:10])})")
    columns = [options.text_field] + ([options.id_field] if options.id_field else [])
    limit = options.max_record_bytes or MAX_RECORD_BYTES
    row = 0
    for batch in table_file.iter_batches(batch_size=4096, columns=columns):
        texts = batch.column(0).to_pylist()
        ids = batch.column(1).to_pylist() if options.id_field else None
        for i, text in enumerate(texts):
            row += 1
            if text is None:
                yield BadRecord(row, f"no value for {options.text_field!r}", 0)
                continue
            record_id = str(row) if ids is None else ids[i]
            if record_id is None or record_id == "":
                yield BadRecord(row, f"no value for {options.id_field!r}", 0)
                continue
            text = text if isinstance(text, str) else str(text)
            if len(text) > limit or len(text.encode("utf-8", errors="replace")) > limit:
                yield BadRecord(row, too_long(limit), 0)
                continue
            yield ShardRecord(str(record_id), row, text, "")


def header_line(shard: Shard) -> str | None:
    """The first line of a CSV shard (its header), for writing its kept records back as CSV."""
    if shard.format != "csv":
        return None
    with local_copy(shard.uri) as path, open_record_file(path) as stream:
        head = stream.read(64 * 1024)
        encoding = sniff_encoding(head)
        stream.seek(0)
        first = stream.readline()
    return first.decode(encoding, errors="replace").lstrip("\ufeff").rstrip("\r\n")


