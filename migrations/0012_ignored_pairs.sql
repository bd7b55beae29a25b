-- Pairs of documents the user declared "not duplicates" (dedupdb ignore, or the review screen). They are kept by
-- document key, which outlives a reindex that renumbers contents; grouping drops the pair between the two texts
-- the keys hold from the pair graph (database.py). A key may name a document forgotten since: the declaration
-- stays, and applies again if the document is added back.
CREATE TABLE IF NOT EXISTS ignored_pairs (
    a          TEXT NOT NULL,              -- document key, a < b
    b          TEXT NOT NULL,
    created_at REAL NOT NULL,
    PRIMARY KEY (a, b),
    CHECK (a < b)
) WITHOUT ROWID;
