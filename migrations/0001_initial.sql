-- dedupdb schema, version 1.
-- A document (a file, or a record inside a record file) points at its
-- content: the normalized text it holds, identified by a 128-bit hash. Exact
-- copies share one content row, so signatures, index rows, pairs and clusters
-- all live at the content level and are computed once per distinct text.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- Larger values that belong to the database as a whole (the corpus IDF table).
CREATE TABLE blobs (
    name TEXT PRIMARY KEY,
    data BLOB NOT NULL
);

CREATE TABLE files (
    id         INTEGER PRIMARY KEY,
    path       TEXT NOT NULL UNIQUE,
    size       INTEGER NOT NULL,             -- record files read part-way: the bytes read so far
    mtime_ns   INTEGER NOT NULL,             -- 0 while a record file is read part-way
    digest     TEXT NOT NULL,                -- hash of the raw bytes (of the part read, for record files)
    status     TEXT NOT NULL CHECK (status IN ('indexed', 'empty', 'missing')),
    kind       TEXT NOT NULL DEFAULT 'file' CHECK (kind IN ('file', 'records')),
    records    INTEGER NOT NULL DEFAULT 0,   -- record files: records read so far (lines for the line counter)
    options    TEXT,                         -- record files: JSON of how they are read (format, fields)
    indexed_at REAL NOT NULL
);

CREATE TABLE contents (
    id        INTEGER PRIMARY KEY,
    hash      BLOB NOT NULL UNIQUE,          -- xxh3-128 of the normalized text
    chars     INTEGER NOT NULL,
    shingles  INTEGER NOT NULL,              -- distinct shingles
    minhash   BLOB NOT NULL,                 -- num_perm little-endian uint32
    sketch    BLOB NOT NULL,                 -- bottom-k shingle hashes, little-endian uint32, sorted
    simhash   INTEGER,                       -- signed 64-bit; NULL when too short to trust
    cluster   INTEGER NOT NULL,              -- smallest content id of its connected component
    documents INTEGER NOT NULL DEFAULT 0     -- how many documents hold this content
);
CREATE INDEX contents_cluster ON contents (cluster);

CREATE TABLE documents (
    id         INTEGER PRIMARY KEY,
    key        TEXT NOT NULL UNIQUE,         -- the path, or path#record for a record file
    file_id    INTEGER NOT NULL REFERENCES files (id) ON DELETE CASCADE,
    record     TEXT,
    content_id INTEGER NOT NULL REFERENCES contents (id),
    bytes      INTEGER NOT NULL,
    mtime_ns   INTEGER NOT NULL,
    snippet    TEXT NOT NULL
);
CREATE INDEX documents_content ON documents (content_id);
CREATE INDEX documents_file ON documents (file_id);

-- One row per content per LSH band: a lookup is an index probe on (band, key).
-- Rows are deleted by recomputing their keys from the stored signature, so no
-- second index on content_id is needed.
CREATE TABLE lsh_bands (
    band       INTEGER NOT NULL,
    key        INTEGER NOT NULL,
    content_id INTEGER NOT NULL,
    PRIMARY KEY (band, key, content_id)
) WITHOUT ROWID;

-- One row per content per SimHash block (k + 1 blocks for distance k).
CREATE TABLE simhash_blocks (
    block      INTEGER NOT NULL,
    value      INTEGER NOT NULL,
    content_id INTEGER NOT NULL,
    PRIMARY KEY (block, value, content_id)
) WITHOUT ROWID;

-- Verified near-duplicate pairs between distinct contents (a < b).
CREATE TABLE pairs (
    a       INTEGER NOT NULL REFERENCES contents (id) ON DELETE CASCADE,
    b       INTEGER NOT NULL REFERENCES contents (id) ON DELETE CASCADE,
    jaccard REAL NOT NULL,
    hamming INTEGER,
    PRIMARY KEY (a, b),
    CHECK (a < b)
) WITHOUT ROWID;
CREATE INDEX pairs_b ON pairs (b);
