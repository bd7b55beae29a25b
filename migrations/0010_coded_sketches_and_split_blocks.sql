-- Sketches may now be stored Elias-Fano coded (sketchpack.py: 4 * n + 1 bytes and so on, never a multiple of 4)
-- and index blocks split 4, 5 or 6 bytes an entry between key gap and content id (runs.py: a leading byte,
-- then the entries). Both are read beside what stores of before hold, so nothing here converts: this version
-- marks the store, so that a dedupdb that cannot read the new formats refuses it as newer than it understands
-- instead of failing on its first coded sketch. It changes nothing when run again.
UPDATE meta SET value = value WHERE key = 'setting.algorithm';
