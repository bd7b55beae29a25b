-- Each content keeps a checksum of its stored sketch, SimHash, MinHash signature and fingerprints (checksums.py),
-- which reading them and 'dedupdb check' verify. Contents stored before have none (NULL): nothing is computed
-- here, so upgrading a large store stays instant; check verifies what their bytes allow, and 'dedupdb reindex'
-- fills them in. Run again over a store that has the column, it adds nothing (migrate.py).
ALTER TABLE contents ADD COLUMN checksum INTEGER;
