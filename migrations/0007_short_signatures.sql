-- MinHash signatures are kept as the low 16 bits of each value (b-bit MinHash, Li and Koenig 2010): half the
-- bytes, and as good for LSH, whose band keys hash four values at once (two texts agreeing on the low 16 bits
-- of a value they do not share happens once in 65,536). A text whose sketch holds all its shingle hashes (fewer
-- than sketch_size, almost every text) keeps no signature at all: it is the MinHash of exactly those hashes, and
-- is computed again when its index rows are (store.py). The stored values become what this version computes, so
-- the store keeps its algorithm version, one up. The band keys change, and the blocks of sorted runs are now
-- packed (runs.py), so the index and containment rows are dropped here and rebuilt when the database is next
-- opened.

UPDATE contents SET minhash = CASE
    WHEN shingles > 0 AND length(sketch) = 4 * shingles THEN x''
    ELSE low_halves(minhash)
END
WHERE length(minhash) = 4 * (SELECT CAST(value AS INTEGER) FROM meta WHERE key = 'setting.num_perm');

UPDATE meta SET value = '3' WHERE key = 'setting.algorithm' AND value = '2';

DELETE FROM run_blocks;
DELETE FROM runs;
UPDATE meta SET value = hex(randomblob(8)) WHERE key LIKE 'runs.token.%';

INSERT OR REPLACE INTO meta (key, value)
SELECT 'index.rebuild', '1' WHERE EXISTS (SELECT 1 FROM contents);
