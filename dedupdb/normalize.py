"""Text normalization for comparison: width, case and whitespace must not make two texts differ."""

from __future__ import annotations

import unicodedata

# Zero-width characters and the BOM survive NFKC but are invisible to a reader.
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)


def normalize(text: str) -> str:
    """NFKC (full-width and half-width agree), case folding, invisible characters removed, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).translate(_INVISIBLE).casefold()
    return " ".join(text.split())
