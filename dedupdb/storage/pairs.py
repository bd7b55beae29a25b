"""The pairs and their clusters."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from dedupdb.storage.connection import chunks, marks
from dedupdb.storage.rows import DocumentRow


class PairTables:
    """The pairs and clusters tables, as Store's methods (store.py): they run in its connection and transactions."""

    # --- pairs ---------------------------------------------------------------

    def insert_pairs(self, rows: list[tuple[int, int, float, int | None]]) -> None:
        """rows: (a, b, jaccard, hamming) with a < b."""
        self.conn.executemany(
            "INSERT OR REPLACE INTO pairs (a, b, jaccard, hamming) VALUES (?, ?, ?, ?)", rows
        )

    def mark_templates(self, pairs: list[tuple[int, int]]) -> None:
        """Mark stored pairs (a < b) as template pairs (text/templates.py)."""
        self.conn.executemany("UPDATE pairs SET template = 1 WHERE a = ? AND b = ?", pairs)

    def template_pairs(self, content_ids: list[int]) -> set[tuple[int, int]]:
        """The template pairs among these contents."""
        members = set(content_ids)
        return {(a, b) for a, b in self.template_pairs_from(content_ids) if b in members}

    def template_pairs_from(self, content_ids: list[int]) -> set[tuple[int, int]]:
        """The template pairs whose a is one of these contents."""
        out = set()
        for chunk in chunks(content_ids):
            out.update(self._q(f"SELECT a, b FROM pairs WHERE template = 1 AND a IN ({marks(len(chunk))})", chunk))
        return out

    def count_template_pairs(self) -> int:
        return self.conn.execute("SELECT COUNT(*) FROM pairs WHERE template = 1").fetchone()[0]

    def short_snippets(self, content_ids: list[int], shorter_than: int) -> dict[int, str]:
        """A snippet of each of these contents whose snippets are shorter than this (held whole)."""
        out: dict[int, str] = {}
        for chunk in chunks(content_ids):
            out.update(self._q(
                f"SELECT content_id, MIN(snippet) FROM documents WHERE content_id IN ({marks(len(chunk))}) "
                "AND length(snippet) < ? GROUP BY content_id", [*chunk, shorter_than]))
        return out

    def pairs_among(self, content_ids: list[int]) -> list[tuple[int, int]]:
        members = set(content_ids)
        edges = []
        for chunk in chunks(content_ids):
            rows = self.conn.execute(f"SELECT a, b FROM pairs WHERE a IN ({marks(len(chunk))})", chunk)
            edges.extend((a, b) for a, b in rows if b in members)
        return edges

    def content_id_chunks(self, size: int = 1000) -> Iterator[list[int]]:
        """Every content id, ascending, size of them at a time (read from the documents' content index, not from
        the wide content rows)."""
        last = 0
        while True:
            ids = [r[0] for r in self._q(
                "SELECT DISTINCT content_id FROM documents WHERE content_id > ? ORDER BY content_id LIMIT ?", (last, size)
            )]
            if not ids:
                return
            yield ids
            last = ids[-1]

    def pairs_from(self, content_ids: list[int]) -> list[tuple[int, int, float, int | None]]:
        """(a, b, jaccard, hamming) of the stored pairs whose a is one of these contents, by a then b."""
        out = []
        for chunk in chunks(content_ids):
            out += self._q(
                f"SELECT a, b, jaccard, hamming FROM pairs WHERE a IN ({marks(len(chunk))}) ORDER BY a, b", chunk
            ).fetchall()
        return sorted(out)

    def pairs_with(self, content_ids: list[int]) -> list[tuple[int, int, float, int | None]]:
        """(a, b, jaccard, hamming) of the stored pairs one of whose contents is one of these, by a then b."""
        out = set()
        for chunk in chunks(content_ids):
            where = marks(len(chunk))
            out.update(self._q(f"SELECT a, b, jaccard, hamming FROM pairs WHERE a IN ({where}) "
                               f"UNION SELECT a, b, jaccard, hamming FROM pairs WHERE b IN ({where})", chunk + chunk))
        return sorted(out)

    def document_keys(self, content_ids: Iterable[int]) -> dict[int, list[str]]:
        """The keys of each content's documents, sorted."""
        out: dict[int, list[str]] = {}
        for chunk in chunks(list(content_ids)):
            rows = self._q(
                f"SELECT content_id, key FROM documents WHERE content_id IN ({marks(len(chunk))}) ORDER BY content_id, key",
                chunk,
            )
            for content_id, key in rows:
                out.setdefault(content_id, []).append(key)
        return out

    def with_simhash(self, content_ids: Iterable[int]) -> set[int]:
        """Those of these contents that have a SimHash."""
        out: set[int] = set()
        for chunk in chunks(list(content_ids)):
            out.update(r[0] for r in self._q(
                f"SELECT id FROM contents WHERE simhash IS NOT NULL AND id IN ({marks(len(chunk))})", chunk
            ))
        return out

    def pair_scores(self, content_ids: list[int]) -> dict[tuple[int, int], tuple[float, int | None]]:
        members = set(content_ids)
        out = {}
        for chunk in chunks(content_ids):
            rows = self._q(f"SELECT a, b, jaccard, hamming FROM pairs WHERE a IN ({marks(len(chunk))})", chunk)
            out.update(((a, b), (j, h)) for a, b, j, h in rows if b in members)
        return out

    # --- clusters ------------------------------------------------------------

    def cluster_members(self, cluster: int) -> list[int]:
        return [r[0] for r in self.conn.execute("SELECT id FROM contents WHERE cluster = ?", (cluster,))]

    def clusters_of(self, content_ids: list[int]) -> dict[int, int]:
        out = {}
        for chunk in chunks(content_ids):
            rows = self.conn.execute(f"SELECT id, cluster FROM contents WHERE id IN ({marks(len(chunk))})", chunk)
            out.update(rows.fetchall())
        return out

    def relabel_clusters(self, mapping: dict[int, int]) -> None:
        """Move every content of cluster old to cluster new."""
        self.conn.executemany("UPDATE contents SET cluster = ? WHERE cluster = ?", [(n, o) for o, n in mapping.items()])

    def set_clusters(self, assignment: dict[int, int]) -> None:
        """Set the cluster of individual contents."""
        self.conn.executemany("UPDATE contents SET cluster = ? WHERE id = ?", [(c, i) for i, c in assignment.items()])

    def duplicate_clusters(self) -> list[tuple[int, int, int]]:
        """(cluster, documents, contents) of every cluster holding two documents or more."""
        return self._q(
            "SELECT cluster, sum(documents), count(*) FROM contents GROUP BY cluster HAVING sum(documents) >= 2"
        ).fetchall()

    def duplicate_cluster_sizes(self, matching: str | None = None) -> list[tuple[int, int, int, int]]:
        """(cluster, documents, their bytes, the smallest document's bytes) of every cluster holding two documents
        or more; with matching, only clusters with a document whose key or snippet holds that text (any case).
        Read from the clusters' documents alone: no signature, pair or group is read."""
        sql = (
            "SELECT c.cluster, count(*), sum(d.bytes), min(d.bytes) FROM documents d "
            "JOIN contents c ON c.id = d.content_id "
            "WHERE c.cluster IN (SELECT cluster FROM contents GROUP BY cluster HAVING sum(documents) >= 2) "
        )
        params: list = []
        if matching:
            pattern = "%" + matching.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            sql += (
                "AND c.cluster IN (SELECT c2.cluster FROM documents d2 JOIN contents c2 ON c2.id = d2.content_id "
                "WHERE d2.key LIKE ? ESCAPE '\\' OR d2.snippet LIKE ? ESCAPE '\\') "
            )
            params = [pattern, pattern]
        return self._q(sql + "GROUP BY c.cluster", params).fetchall()

    def cluster_documents(self, clusters: list[int]) -> list[DocumentRow]:
        out = []
        for chunk in chunks(clusters):
            rows = self._q(self._DOCUMENT_SELECT + f"WHERE c.cluster IN ({marks(len(chunk))})", chunk).fetchall()
            out.extend(DocumentRow(*r) for r in rows)
        return out
