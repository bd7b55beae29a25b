"""The deduplicated corpus of a job: each shard's records but those its clusters drop, written as a shard of the
same format (uncompressed), each record as it stood in its input. Bad records are left out, as they were of the
job."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from dedupdb.ingest.records import compression_of
from dedupdb.scaleout.inputs import PARQUET, Shard, ShardRecord, header_line, local_copy, shard_records


def kept_name(index: int, shard: Shard) -> str:
    """The kept records' file: the shard's number in the job, then its name without a compression suffix."""
    name = Path(shard.uri.split("://", 1)[-1]).name
    if compression_of(name):
        name = Path(name).stem
    return f"{index:05d}-{name}"


def write_kept(index: int, shard: Shard, dropped: set[str], folder: Path) -> int:
    """Write the records of a shard whose ids are not in dropped; returns how many were written. A shard behind a
    URI is fetched once, and read from that copy however many times this takes."""
    target = folder / kept_name(index, shard)
    with local_copy(shard.uri) as path:
        local = replace(shard, uri=str(path))
        if shard.format == PARQUET:
            return _write_parquet(local, dropped, target)
        return _write_records(local, dropped, target)


def _write_records(shard: Shard, dropped: set[str], target: Path) -> int:
    kept = 0
    with open(target, "w", encoding="utf-8", newline="") as out:
        header = header_line(shard)
        if header is not None:
            out.write(header + "\n")
        for item in shard_records(shard):
            if isinstance(item, ShardRecord) and item.record_id not in dropped:
                out.write(item.raw + "\n")
                kept += 1
    return kept


def _write_parquet(shard: Shard, dropped: set[str], target: Path) -> int:
    """The shard's rows but the dropped ones and the bad ones, every column kept."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    good = {item.line for item in shard_records(shard) if isinstance(item, ShardRecord) and item.record_id not in dropped}
    with local_copy(shard.uri) as path:
        source = pq.ParquetFile(path)
        writer = None
        row = 0
        kept = 0
        try:
            for batch in source.iter_batches(batch_size=4096):
                rows = range(row + 1, row + 1 + batch.num_rows)
                mask = pa.array([r in good for r in rows], pa.bool_())
                row += batch.num_rows
                chosen = pa.Table.from_batches([batch]).filter(mask)
                writer = writer or pq.ParquetWriter(target, chosen.schema)
                writer.write_table(chosen)
                kept += chosen.num_rows
            if writer is None:
                pq.write_table(source.schema_arrow.empty_table(), target)
        finally:
            if writer is not None:
                writer.close()
    return kept
