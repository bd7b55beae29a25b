-- Pairs name their contents without foreign keys. Enforcing them looked up both contents of every pair inserted:
-- on a million-document store 17 of the 26 microseconds an insert took, each lookup a page of the content rows
-- read at random. The store deletes a content's pairs itself (store.delete_content), and 'dedupdb check'
-- reports any pair whose content is missing.
--
-- SQLite cannot drop a constraint in place: the table is copied. legacy_alter_table keeps the rename from
-- checking the views, which name "pairs" and find it again once it is back.
PRAGMA legacy_alter_table = ON;

CREATE TABLE pairs_unchecked (
    a       INTEGER NOT NULL,              -- contents (id)
    b       INTEGER NOT NULL,              -- contents (id)
    jaccard REAL NOT NULL,
    hamming INTEGER,
    PRIMARY KEY (a, b),
    CHECK (a < b)
) WITHOUT ROWID;

INSERT INTO pairs_unchecked (a, b, jaccard, hamming) SELECT a, b, jaccard, hamming FROM pairs ORDER BY a, b;
DROP TABLE pairs;
ALTER TABLE pairs_unchecked RENAME TO pairs;
CREATE INDEX pairs_b ON pairs (b);

PRAGMA legacy_alter_table = OFF;
