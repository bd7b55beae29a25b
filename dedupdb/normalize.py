"""Text normalization for comparison: width, case, whitespace and Chinese script variants must not make two
texts differ."""

from __future__ import annotations

import re
import unicodedata
from functools import lru_cache

# Zero-width characters and the BOM survive NFKC but are invisible to a reader.
_INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad"
_CJK_FIRST, _CJK_LAST = 0x3400, 0x9FFF


@lru_cache(maxsize=1)
def _fold_table() -> tuple[dict[int, str | None], re.Pattern[str]]:
    """Invisible characters dropped and traditional Chinese characters mapped to simplified (one character at
    a time, from OpenCC's t2s conversion), with a pattern that finds any character the table changes."""
    import opencc

    chars = [chr(code) for code in range(_CJK_FIRST, _CJK_LAST + 1)]
    converted = opencc.OpenCC("t2s").convert("\n".join(chars)).split("\n")
    table: dict[int, str | None] = dict.fromkeys(map(ord, _INVISIBLE), None)
    if len(converted) == len(chars):  # never seen otherwise; then the text is left as it is rather than misaligned
        table.update((ord(t), s) for t, s in zip(chars, converted) if t != s and len(s) == 1)
    pattern = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(table)) + "]")
    return table, pattern


def normalize(text: str) -> str:
    """NFKC (full-width and half-width agree), case folding, invisible characters removed, traditional Chinese
    characters mapped to simplified, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    if not text.isascii():
        table, pattern = _fold_table()
        if pattern.search(text):  # most text has nothing to fold: searching is far cheaper than translating
            text = text.translate(table)
    return " ".join(text.split())
