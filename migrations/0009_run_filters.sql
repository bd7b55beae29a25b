-- Each run keeps its key filter (runs.KeyBits: which keys it may hold, two to four bits an entry). It is built as
-- a run is written; without it a process that adds to a store read every block of the store's runs to build the
-- filters again, about a second a million documents, gigabytes at ten million, however little it added. Runs
-- written before have none: theirs is built by reading them once, then kept.
CREATE TABLE IF NOT EXISTS run_filters (
    run  INTEGER PRIMARY KEY REFERENCES runs (id) ON DELETE CASCADE,
    bits BLOB NOT NULL
);
