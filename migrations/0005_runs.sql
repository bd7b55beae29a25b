-- Index rows and containment rows move from one B-tree each into sorted runs of blocks (runs.py): a batch of new
-- rows is written as a run of its own and runs of a size are merged in bulk, so adding to a large index stays as
-- cheap as adding to a small one. The rows are rebuilt from the stored signatures and fingerprints when the
-- database is next opened ('index.rebuild' in meta asks for that).

CREATE TABLE runs (
    id      INTEGER PRIMARY KEY,
    family  INTEGER NOT NULL CHECK (family IN (0, 1)),  -- 0: LSH and SimHash rows, 1: containment rows
    level   INTEGER NOT NULL,                           -- runs of a level are merged FANOUT at a time
    entries INTEGER NOT NULL,
    fences  BLOB NOT NULL                               -- (block id, first entry) of each block, int64 pairs
);

CREATE TABLE run_blocks (
    id      INTEGER PRIMARY KEY,
    run     INTEGER NOT NULL REFERENCES runs (id),
    first   INTEGER NOT NULL,                           -- the smallest entry of the block
    entries INTEGER NOT NULL,
    data    BLOB NOT NULL                               -- sorted entries, little-endian int64
);
CREATE INDEX run_blocks_run ON run_blocks (run, first);

DROP TABLE index_keys;
DROP TABLE containment_keys;

INSERT OR REPLACE INTO meta (key, value)
SELECT 'index.rebuild', '1' WHERE EXISTS (SELECT 1 FROM contents);
