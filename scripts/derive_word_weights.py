#!/usr/bin/env python
"""Write the table of SimHash word weights that the package ships (dedupdb/text/tables/): derived from the word
frequency lists of the pyspellchecker installed (dedupdb/text/weights.py). Run after the dependency on
pyspellchecker moves; tests/test_signatures.py fails until the shipped table matches the installed lists.

    python scripts/derive_word_weights.py
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402

from dedupdb.text import weights  # noqa: E402


def main() -> None:
    weights.SHIPPED_TABLES.mkdir(parents=True, exist_ok=True)
    for old in weights.SHIPPED_TABLES.glob("word-weights-*.npy"):
        old.unlink()
    path = weights.SHIPPED_TABLES / weights.word_table_name()
    table = weights._derived_table()
    with open(path, "wb") as out:
        np.save(out, table, allow_pickle=False)
    print(f"{path}: {len(table):,} words, {path.stat().st_size:,} bytes")


if __name__ == "__main__":
    main()
