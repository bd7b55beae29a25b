"""Acting on what the database found: cleanup with its journal and undo, the streaming filter."""
