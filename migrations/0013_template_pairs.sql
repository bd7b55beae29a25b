-- A pair of texts that differ only in numbers or in one slot of a shared frame (text/templates.py) is marked a
-- template pair: still listed by pairs, left out of groups (and so of clean and export --unique) unless asked.
ALTER TABLE pairs ADD COLUMN template INTEGER NOT NULL DEFAULT 0;
