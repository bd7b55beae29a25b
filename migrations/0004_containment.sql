-- Containment (containment.py): each content's winnowed fingerprints, and one row per fingerprint in a table
-- packed like index_keys: (32-bit hash << 30) | content id, so the texts holding a fingerprint are one rowid range.
-- They follow from the text, not from the stored signatures: contents stored before this migration have none
-- (fingerprints NULL, counted by the partial index below) until 'dedupdb reindex --from-sources' reads them again.

CREATE TABLE containment_keys (
    entry INTEGER PRIMARY KEY
);

ALTER TABLE contents ADD COLUMN fingerprints BLOB;  -- distinct winnowed hashes, little-endian uint32, sorted

CREATE INDEX contents_without_fingerprints ON contents (id) WHERE fingerprints IS NULL;
