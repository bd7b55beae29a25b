-- Views for people who open a store with sqlite3 or datasette: documents, duplicate pairs, clusters and the
-- cleanup journal by keys and paths, with times as ISO 8601 in UTC instead of nanoseconds. dedupdb itself reads
-- none of them. Each is dropped first, so that this migration can run again on a store whose version was reset.
--
-- Left out because the store does not hold them: containment (computed from fingerprints by
-- 'dedupdb pairs --containment'), and which document of a cluster is kept and how clusters split into groups
-- (computed by the keep rules in Python; 'dedupdb report' shows them).

DROP VIEW IF EXISTS documents_readable;
CREATE VIEW documents_readable AS
SELECT
    d.id AS document,
    d.key,
    f.path,
    d.record,
    d.bytes,
    strftime('%Y-%m-%dT%H:%M:%SZ', d.mtime_ns / 1e9, 'unixepoch') AS modified,
    strftime('%Y-%m-%dT%H:%M:%SZ', f.indexed_at, 'unixepoch') AS indexed,
    d.content_id,
    c.cluster,
    c.documents AS documents_with_this_text,
    d.snippet
FROM documents d
JOIN files f ON f.id = d.file_id
JOIN contents c ON c.id = d.content_id;

-- Every pair of documents that are exact copies (the same normalized text) or verified near-duplicates: the
-- rows of 'dedupdb pairs', a < b, without containment.
DROP VIEW IF EXISTS duplicate_pairs;
CREATE VIEW duplicate_pairs AS
WITH near (x, y, jaccard, hamming) AS (
    SELECT a, b, jaccard, hamming FROM pairs
    UNION ALL
    SELECT b, a, jaccard, hamming FROM pairs
)
SELECT da.key AS a, db.key AS b, fa.path AS a_path, fb.path AS b_path,
       near.jaccard, near.hamming, 0 AS exact
FROM near
JOIN documents da ON da.content_id = near.x
JOIN documents db ON db.content_id = near.y
JOIN files fa ON fa.id = da.file_id
JOIN files fb ON fb.id = db.file_id
WHERE da.key < db.key
UNION ALL
SELECT da.key, db.key, fa.path, fb.path,
       1.0, CASE WHEN c.simhash IS NULL THEN NULL ELSE 0 END, 1
FROM documents da
JOIN documents db ON db.content_id = da.content_id AND da.key < db.key
JOIN contents c ON c.id = da.content_id
JOIN files fa ON fa.id = da.file_id
JOIN files fb ON fb.id = db.file_id;

-- Connected components of exact copies and verified pairs holding two documents or more: the clusters of
-- 'dedupdb report --related', by the same id. keys is a JSON array.
DROP VIEW IF EXISTS clusters;
CREATE VIEW clusters AS
SELECT
    c.cluster,
    CASE WHEN count(DISTINCT c.id) = 1 THEN 'exact' ELSE 'near' END AS kind,
    count(*) AS documents,
    count(DISTINCT c.id) AS texts,
    sum(d.bytes) AS total_bytes,
    json_group_array(d.key) AS keys
FROM contents c
JOIN documents d ON d.content_id = c.id
GROUP BY c.cluster
HAVING count(*) >= 2;

DROP VIEW IF EXISTS journal_readable;
CREATE VIEW journal_readable AS
SELECT
    b.id AS batch,
    strftime('%Y-%m-%dT%H:%M:%SZ', b.created_at, 'unixepoch') AS created,
    b.action,
    b.target,
    strftime('%Y-%m-%dT%H:%M:%SZ', b.undone_at, 'unixepoch') AS undone,
    e.source,
    e.destination,
    e.size,
    strftime('%Y-%m-%dT%H:%M:%SZ', e.mtime_ns / 1e9, 'unixepoch') AS modified,
    e.status,
    e.message
FROM journal_batches b
JOIN journal_entries e ON e.batch_id = b.id;
