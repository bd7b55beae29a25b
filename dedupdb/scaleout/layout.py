"""What a scale-out job writes into its output folder, read back by `dedupdb import` and by anyone with pyarrow.

    OUT/manifest.json   format, version, settings (as a store's meta), candidate scheme, inputs, counts, stages
    OUT/idf.bin         the corpus document frequencies of SimHash's word weights (weights.CorpusIdf bytes)
    OUT/documents/      one row per record: key, input, record, content, bytes, ordinal, snippet
    OUT/signatures/     one row per distinct text: content, hash, chars, shingles, minhash, sketch, simhash,
                        fingerprints (the arrays as little-endian bytes, as a store keeps them), first (the
                        ordinal of its first document, which the files are sorted by)
    OUT/pairs/          one row per pair of documents, as `dedupdb pairs` lists them: a, b (keys, a < b), jaccard,
                        hamming, exact, and the contents a_content, b_content
    OUT/clusters/       one row per document of a cluster: key, cluster (the smallest content of its connected
                        component), keep (the keep rule keeps it), centre (the key it is judged against),
                        similarity (to the centre)
    OUT/unique/         with --unique: the records kept, as shards in their input's format

Content numbers are the first 62 bits of a text's content hash (the job checks that no two texts share one), so
every stage can name a text without a lookup; `dedupdb import` renumbers them densely.

A document's input is its input's position in the manifest's inputs, and its key is that input's uri, '#', its
record id, as `add` keys a record. Rows may lie in any number of part files in any order, except that `dedupdb
import` numbers documents as `add` would (in ordinal order, which the keep rules 'first' and 'last' follow) only
when each part file of documents/ is in ordinal order: it reads the part files by their smallest ordinal.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

FORMAT = "dedupdb-scaleout"
VERSION = 1
MANIFEST = "manifest.json"
IDF = "idf.bin"
DOCUMENTS, SIGNATURES, PAIRS, CLUSTERS, UNIQUE = "documents", "signatures", "pairs", "clusters", "unique"

DOCUMENT_COLUMNS = ("key", "input", "record", "content", "bytes", "ordinal", "snippet")
SIGNATURE_COLUMNS = ("content", "hash", "chars", "shingles", "minhash", "sketch", "simhash", "fingerprints")
PAIR_COLUMNS = ("a", "b", "jaccard", "hamming", "exact", "a_content", "b_content")
CLUSTER_COLUMNS = ("key", "cluster", "keep", "centre", "similarity")

_CONTENT_MASK = (1 << 62) - 1
# A record's place in the input, for the keep rules "first" and "last": its input's position, then its line.
ORDINAL_LINE_BITS = 40


def content_number(content_hash: bytes) -> int:
    """The number a job gives a text: the first 62 bits of its content hash (positive in any signed 64-bit type)."""
    return int.from_bytes(content_hash[:8], "little") & _CONTENT_MASK


def ordinal(input_index: int, line: int) -> int:
    return (input_index << ORDINAL_LINE_BITS) | line


@dataclass
class Manifest:
    settings: dict[str, str]              # Settings.to_meta()
    scheme: dict[str, str]                # lsh.scheme_meta()
    inputs: list[dict]                    # {"uri", "format", "options"} in the order given
    idf_documents: int                    # texts the document frequencies in idf.bin count
    keep: str = "first"                   # the keep rule of clusters/keep and unique/
    counts: dict[str, int] = field(default_factory=dict)
    stages: list[dict] = field(default_factory=list)  # {"stage", "seconds", "rows", "bytes"} in order
    bad_records: list[dict] = field(default_factory=list)  # {"where", "reason"}: the first hundred
    failed_inputs: list[dict] = field(default_factory=list)  # {"path", "reason"}: shards that could not be read

    def write(self, out: Path) -> None:
        body = {"format": FORMAT, "version": VERSION, **self.__dict__}
        (out / MANIFEST).write_text(json.dumps(body, indent=2, sort_keys=True) + "\n", encoding="utf-8")

    @classmethod
    def read(cls, out: Path) -> "Manifest":
        from dedupdb.errors import InputError

        path = out / MANIFEST
        try:
            body = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise InputError(f"{out}: not the output of a finished 'dedupdb ray' job (no {MANIFEST})") from None
        except (OSError, ValueError, RecursionError) as exc:
            raise InputError(f"{path}: cannot be read ({exc})") from None
        if body.get("format") != FORMAT or body.get("version") != VERSION:
            raise InputError(f"{path}: not a dedupdb job manifest of version {VERSION}")
        body.pop("format"), body.pop("version")
        try:
            return cls(**body)
        except TypeError as exc:
            raise InputError(f"{path}: malformed manifest ({exc})") from None
