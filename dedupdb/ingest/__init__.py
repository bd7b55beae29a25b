"""Files, records and streams in: walking, reading, worker processes, the ingest loop, export back out."""
