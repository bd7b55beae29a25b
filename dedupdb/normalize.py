"""Text normalization for comparison: width, case, whitespace and Chinese script variants must not make two
texts differ."""

from __future__ import annotations

import unicodedata
from functools import lru_cache

# Zero-width characters and the BOM survive NFKC but are invisible to a reader.
_INVISIBLE = dict.fromkeys(map(ord, "\u200b\u200c\u200d\u2060\ufeff\u00ad"), None)
_CJK_FIRST, _CJK_LAST = 0x3400, 0x9FFF


@lru_cache(maxsize=1)
def _simplified_table() -> dict[int, str]:
    """Traditional -> simplified, one character at a time, built from OpenCC's t2s conversion on first use."""
    import opencc

    chars = [chr(code) for code in range(_CJK_FIRST, _CJK_LAST + 1)]
    converted = opencc.OpenCC("t2s").convert("\n".join(chars)).split("\n")
    if len(converted) != len(chars):  # never seen; keep the text as it is rather than misalign
        return {}
    return {ord(t): s for t, s in zip(chars, converted) if t != s and len(s) == 1}


def normalize(text: str) -> str:
    """NFKC (full-width and half-width agree), case folding, invisible characters removed, traditional Chinese
    characters mapped to simplified, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).translate(_INVISIBLE).casefold()
    if not text.isascii():
        text = text.translate(_simplified_table())
    return " ".join(text.split())
