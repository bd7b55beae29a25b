"""Text normalization for comparison: width, case, whitespace and Chinese script variants must not make two
texts differ."""

from __future__ import annotations

import re
import sys
import unicodedata
from functools import lru_cache

import xxhash

from dedupdb import compiled

# Zero-width characters and the BOM survive NFKC but are invisible to a reader.
_INVISIBLE = "\u200b\u200c\u200d\u2060\ufeff\u00ad"
_CJK_FIRST, _CJK_LAST = 0x3400, 0x9FFF


# Bump when what _simplified_pairs keeps changes.
_PAIRS_VERSION = 1


@lru_cache(maxsize=1)
def _fold_table() -> tuple[dict[int, str | None], re.Pattern[str]]:
    """Invisible characters dropped and traditional Chinese characters mapped to simplified (one character at
    a time, from OpenCC's t2s conversion), with a pattern that finds any character the table changes."""
    table: dict[int, str | None] = dict.fromkeys(map(ord, _INVISIBLE), None)
    table.update((traditional, chr(simplified)) for traditional, simplified in _simplified_pairs().tolist())
    pattern = re.compile("[" + "".join(re.escape(chr(c)) for c in sorted(table)) + "]")
    return table, pattern


def _simplified_pairs():
    """(traditional, simplified) code points, uint32, of the characters OpenCC's t2s maps one to one. Kept in the
    cache folder for the OpenCC installed: importing it and loading its dictionaries took every process that
    normalized a text beyond ASCII (a query's among them) 10-15 ms more and 7 MB."""
    import numpy as np

    from dedupdb.config import cache_dir, kept_table

    stamp = xxhash.xxh64_hexdigest(_pairs_source().encode())
    # A table cut short to a whole number of rows would still load: the pair every OpenCC has must be in it.
    return kept_table(cache_dir() / f"t2s-pairs-{stamp}.npy", _converted_pairs,
                      lambda pairs: pairs.dtype == np.uint32 and pairs.ndim == 2 and pairs.shape[1] == 2
                      and bool(np.any((pairs[:, 0] == ord("氣")) & (pairs[:, 1] == ord("气")))))


def _pairs_source() -> str:
    """What the t2s pairs follow from: this code's version of them and the OpenCC installed."""
    from dedupdb.config import installed_stamp

    return repr((_PAIRS_VERSION, _CJK_FIRST, _CJK_LAST, installed_stamp("opencc")))


def _converted_pairs():
    import numpy as np
    import opencc

    chars = [chr(code) for code in range(_CJK_FIRST, _CJK_LAST + 1)]
    converted = opencc.OpenCC("t2s").convert("\n".join(chars)).split("\n")
    if len(converted) != len(chars):  # never seen; then the text is left as it is rather than misaligned
        return np.empty((0, 2), np.uint32)
    return np.array([(ord(t), ord(s)) for t, s in zip(chars, converted) if t != s and len(s) == 1],
                    dtype=np.uint32).reshape(-1, 2)


def valid_utf8(text: str) -> bool:
    """Whether text holds no lone surrogate, which the store cannot hold (nor UTF-8 encode): names that are not valid
    UTF-8 reach Python with them, and a JSON escape can name one ("\\ud800")."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def normalize(text: str) -> str:
    """NFKC (full-width and half-width agree), case folding, invisible characters removed, traditional Chinese
    characters mapped to simplified, whitespace collapsed."""
    text = unicodedata.normalize("NFKC", text).casefold()
    if not text.isascii():
        table, pattern = _fold_table()
        if pattern.search(text):  # most text has nothing to fold: searching is far cheaper than translating
            text = text.translate(table)
    return " ".join(text.split())


_FULL_WIDTH_FIRST, _FULL_WIDTH_LAST, _FULL_WIDTH_OFFSET = 0xFF01, 0xFF5E, 0xFEE0
# Marks, in the block path, a character that needs normalize() itself (invisible, or case-folding to several
# characters): those lines take the careful path.
_NEEDS_CARE = "\uffff"


# Bump when how _mapped_code_points maps changes.
_TABLE_VERSION = 2


@lru_cache(maxsize=1)
def _code_point_table():
    """_mapped_code_points(), kept in the cache folder for this Unicode database and these t2s pairs: deriving it
    takes 30-40 ms, a process's first batch of lines beyond ASCII."""
    import numpy as np

    from dedupdb.config import cache_dir, kept_table

    # What the table follows from: this code's version of it, the characters it maps by hand, the Unicode database
    # and the t2s pairs.
    source = (_TABLE_VERSION, _INVISIBLE, _FULL_WIDTH_FIRST, _FULL_WIDTH_LAST, _FULL_WIDTH_OFFSET, _NEEDS_CARE,
              unicodedata.unidata_version, _pairs_source())
    stamp = xxhash.xxh64_hexdigest(repr(source).encode())
    return kept_table(cache_dir() / f"code-points-{stamp}.npy", _mapped_code_points,
                      lambda table: table.dtype == np.uint32 and table.shape == (0x10000,)
                      and table[ord("A")] == ord("a") and table[0x3000] == ord(" ") and table[ord("氣")] == ord("气"))


def _mapped_code_points():
    """A uint32 map over the Basic Multilingual Plane of what normalize() does one character at a time without
    changing NFKC's outcome: case folding (where a character folds to one), full-width ASCII to ASCII, the
    ideographic space to a space, traditional to simplified Chinese, and every other character str.split() takes for
    whitespace (the newline aside: it parts lines) to a space; invisible characters, and those that fold to
    several, go to a marker."""
    import numpy as np

    after_folding = np.arange(0x10000, dtype=np.uint32)
    after_folding[_FULL_WIDTH_FIRST : _FULL_WIDTH_LAST + 1] -= _FULL_WIDTH_OFFSET
    after_folding[0x3000] = ord(" ")
    fold, _ = _fold_table()
    for code, target in fold.items():
        if code < 0x10000:
            after_folding[code] = ord(_NEEDS_CARE) if target is None else ord(target)
    # Case folding comes first, as in normalize(): a character's entry is that of what it folds to.
    # Folded all at once, parted by a character that folds to itself (surrogates too fold to themselves).
    folded = "\x00".join(map(chr, range(1, 0x10000))).casefold().split("\x00")
    single = np.array([True] + [len(f) == 1 for f in folded])
    targets = np.array([0] + [ord(f[0]) for f in folded], np.uint32)
    table = np.full(0x10000, ord(_NEEDS_CARE), np.uint32)
    inside = single & (targets < 0x10000)
    table[inside] = after_folding[targets[inside]]
    table[single & ~inside] = targets[single & ~inside]  # none today: a character of this plane folding beyond it
    # Folding comes before NFKC here, after it in normalize(): a mark folding to a character of another combining
    # class would be left where NFKC puts it in order (U+0345 folds to a letter, iota), so its line takes normalize().
    for code in np.flatnonzero(single & (targets != np.arange(0x10000, dtype=np.uint32))).tolist():
        if unicodedata.combining(chr(code)) != unicodedata.combining(chr(targets[code])):
            table[code] = ord(_NEEDS_CARE)
    table[0xD800:0xE000] = ord(_NEEDS_CARE)  # half a surrogate pair: normalize() keeps it as it is
    spaces = [ord(c) for c in re.findall(r"\s", "".join(map(chr, range(0x10000)))) if c != "\n"]  # str.isspace()'s
    table[np.isin(table, np.array(spaces, np.uint32))] = ord(" ")
    return table


@lru_cache(maxsize=256)
def _folds(code: int) -> bool:
    """Whether a character beyond the Basic Multilingual Plane changes when case-folded (Deseret, Osage, ...:
    the block path leaves such lines to normalize())."""
    return chr(code).casefold() != chr(code)


# Characters from which a line beyond ASCII is collapsed with the others rather than by itself (_normalized_other).
_LONG_LINE = 128

# What str.split() takes for whitespace among ASCII characters, besides the space and the newline.
_ASCII_SPACES = b"\t\x0b\x0c\r\x1c\x1d\x1e\x1f"
_UPPER, _LOWER = bytes(range(65, 91)), bytes(range(97, 123))
_TO_SPACE_LOWER = bytes.maketrans(_ASCII_SPACES + _UPPER, b" " * len(_ASCII_SPACES) + _LOWER)  # casefold, for ASCII


_SPACES = re.compile(rb"  +")
# The compiled sketching, which holds the one-pass collapse: taken where a process has loaded it, never imported
# from here (it lies in a layer above). Named in full: a name made from this package's missed it once it moved.
_COMPILED = "dedupdb.sketch.fastsketch"


def collapsed_ascii(data: bytes) -> list[str]:
    """The lines of data (ASCII lines joined by newlines, with no whitespace but spaces left in them), each with
    its runs of spaces made one and none at either end: " ".join(line.split()) of each, without a string per
    word. Where the compiled sketching is loaded (a worker, a large add) it does this in one pass, several times
    faster than these bytes methods."""
    return _collapsed(data, "ascii")


def _collapsed(data: bytes, encoding: str) -> list[str]:
    """collapsed_ascii() of lines in ASCII or UTF-8 (no byte of a character beyond ASCII is a space or a newline)."""
    fast = sys.modules.get(_COMPILED)
    if fast is not None and not compiled.loading():  # not while a thread imports it (compiled.load_aside)
        import numpy as np

        return fast.collapse_spaces(np.frombuffer(data, np.uint8)).tobytes().decode(encoding).split("\n")
    if b"  " in data:
        data = _SPACES.sub(b" ", data)
    data = data.replace(b" \n", b"\n").replace(b"\n ", b"\n").strip(b" ")
    return data.decode(encoding).split("\n")


def normalize_lines(lines: list[str]) -> list[str]:
    """normalize() of each line (none may contain a newline), several times faster for many short lines. ASCII
    lines are folded and their whitespace collapsed together as bytes. For the others, case folding and the
    one-to-one character maps run once over those lines joined, in numpy, and only lines that still are not in
    NFKC after that go through normalize() itself."""
    out = [""] * len(lines)
    ascii_lines, other_lines = [], []
    for i, line in enumerate(lines):
        (ascii_lines if line.isascii() else other_lines).append(i)
    if ascii_lines:
        block = "\n".join([lines[i] for i in ascii_lines]).encode("ascii").translate(_TO_SPACE_LOWER)
        for i, line in zip(ascii_lines, collapsed_ascii(block)):
            out[i] = line
    if other_lines:
        originals = [lines[i] for i in other_lines]
        for i, line in zip(other_lines, _normalized_other(originals)):
            out[i] = line
    return out


def _normalized_other(lines: list[str]) -> list[str]:
    import numpy as np

    points = np.frombuffer("\n".join(lines).encode("utf-32-le", "surrogatepass"), dtype="<u4")
    mapped = _code_point_table()[points & 0xFFFF]
    beyond = points >= 0x10000
    if beyond.any():  # emoji and the like, kept; the few that case-fold send their line to normalize()
        kept = points[beyond]
        mapped[beyond] = np.where(np.fromiter(map(_folds, kept.tolist()), bool, len(kept)), ord(_NEEDS_CARE), kept)
    out = mapped.astype("<u4").tobytes().decode("utf-32-le").split("\n")
    quick = unicodedata.is_normalized
    easy = [i for i, text in enumerate(out) if _NEEDS_CARE not in text and quick("NFKC", text)]
    # Whitespace is all spaces now: of the lines normalize() is not needed for, the long are collapsed together, as
    # ASCII lines are (a review with an accent: 4 us against 24), the short each by itself (a shorter way for them).
    long = []
    for i in easy:
        if len(out[i]) > _LONG_LINE:
            long.append(i)
        else:
            out[i] = " ".join(out[i].split())
    if long:
        for i, text in zip(long, _collapsed("\n".join([out[i] for i in long]).encode("utf-8"), "utf-8")):
            out[i] = text
    if len(easy) < len(out):
        taken = set(easy)
        for i, original in enumerate(lines):
            if i not in taken:
                out[i] = normalize(original)
    return out
