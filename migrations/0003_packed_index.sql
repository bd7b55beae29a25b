-- LSH band rows and SimHash block rows move into one table whose rowid is the row itself:
-- (33-bit hash of slot and key) << 30 | content id. Slots are LSH bands (0 up to the number of
-- bands) and SimHash block pairs (1024 and up). A lookup is a rowid range probe, an insert adds one
-- bare integer to the table B-tree, and no second B-tree is kept beside it.
-- The new keys are hashes computed in Python, so the rows are rebuilt from the stored signatures
-- when the database is next opened ('index.rebuild' in meta asks for that).

CREATE TABLE index_keys (
    entry INTEGER PRIMARY KEY
);

DROP TABLE lsh_bands;
DROP TABLE simhash_blocks;

INSERT INTO meta (key, value)
SELECT 'index.rebuild', '1' WHERE EXISTS (SELECT 1 FROM contents);
