-- The cleanup journal: every file action is written here before it happens and
-- marked done after, so an interrupted batch can be read back and undone.

CREATE TABLE journal_batches (
    id         INTEGER PRIMARY KEY,
    created_at REAL NOT NULL,
    action     TEXT NOT NULL CHECK (action IN ('move', 'trash', 'hardlink')),
    target     TEXT,                          -- the folder moved into, for 'move'
    undone_at  REAL
);

CREATE TABLE journal_entries (
    id          INTEGER PRIMARY KEY,
    batch_id    INTEGER NOT NULL REFERENCES journal_batches (id) ON DELETE CASCADE,
    source      TEXT NOT NULL,                -- the file acted on, where it was
    destination TEXT,                         -- where it went ('move'), or the copy it now links to ('hardlink')
    size        INTEGER NOT NULL,
    mtime_ns    INTEGER NOT NULL,
    digest      TEXT NOT NULL,
    status      TEXT NOT NULL CHECK (status IN ('planned', 'done', 'failed', 'skipped', 'undone')),
    message     TEXT
);
CREATE INDEX journal_entries_batch ON journal_entries (batch_id);
