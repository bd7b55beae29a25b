"""What differs between two texts: characters for Chinese, words for space-separated text."""

from __future__ import annotations

import difflib
import os
import re
from dataclasses import dataclass

from dedupdb.text.tokens import is_mostly_cjk

_WORDS = re.compile(r"\s+|\w+|[^\w\s]")


@dataclass(frozen=True)
class Opcode:
    op: str  # equal, replace, delete, insert
    a_start: int
    a_end: int
    b_start: int
    b_end: int
    a_text: str
    b_text: str


@dataclass(frozen=True)
class TextDiff:
    unit: str  # "character" or "word"
    opcodes: list[Opcode]
    ratio: float  # difflib's similarity of the two unit sequences

    @property
    def changes(self) -> list[Opcode]:
        return [o for o in self.opcodes if o.op != "equal"]


def units(text: str, by_character: bool) -> list[str]:
    return list(text) if by_character else _WORDS.findall(text)


# Units (words or characters) of the two texts up to which they are matched unit by unit, as difflib does with every
# unit against every other: two documents of 2 MB (330,000 words each) took over a minute, and a document may be
# 64 MiB. Past it, the common start and end are set aside, and what lies between is matched line by line first.
WHOLE_UNITS = 20_000
# Lines that differ are matched unit by unit where each side holds at most this many units; more, they are shown
# replaced whole.
BLOCK_UNITS = 5_000


def diff_texts(a: str, b: str) -> TextDiff:
    by_character = is_mostly_cjk(a) or is_mostly_cjk(b)
    ua, ub = units(a, by_character), units(b, by_character)
    if len(ua) + len(ub) <= WHOLE_UNITS:
        opcodes = _matched(ua, ub, 0, 0)
    else:
        start = len(os.path.commonprefix([ua, ub]))
        end = len(os.path.commonprefix([ua[start:][::-1], ub[start:][::-1]]))  # of what follows the common start
        head = "".join(ua[:start])
        opcodes = [Opcode("equal", 0, start, 0, start, head, head)] if start else []
        opcodes += _by_lines(ua[start : len(ua) - end], ub[start : len(ub) - end], start, start)
        if end:
            tail = "".join(ua[len(ua) - end :])
            opcodes.append(Opcode("equal", len(ua) - end, len(ua), len(ub) - end, len(ub), tail, tail))
    matched = sum(o.a_end - o.a_start for o in opcodes if o.op == "equal")
    ratio = 2.0 * matched / (len(ua) + len(ub)) if ua or ub else 1.0  # difflib's ratio()
    return TextDiff("character" if by_character else "word", opcodes, round(ratio, 4))


def _matched(ua: list[str], ub: list[str], at_a: int, at_b: int) -> list[Opcode]:
    """difflib's opcodes of two unit lists, placed at these unit positions."""
    matcher = difflib.SequenceMatcher(None, ua, ub, autojunk=False)
    return [Opcode(tag, at_a + i1, at_a + i2, at_b + j1, at_b + j2, "".join(ua[i1:i2]), "".join(ub[j1:j2]))
            for tag, i1, i2, j1, j2 in matcher.get_opcodes()]


def _by_lines(ua: list[str], ub: list[str], at_a: int, at_b: int) -> list[Opcode]:
    """Opcodes of two long unit lists: their lines matched first (_lines), then each run of differing lines unit by
    unit where it is short enough (BLOCK_UNITS), else replaced whole."""
    if len(ua) + len(ub) <= WHOLE_UNITS:
        return _matched(ua, ub, at_a, at_b)
    lines_a, lines_b = _lines(ua), _lines(ub)
    texts_a, texts_b = ["".join(ua[i:j]) for i, j in lines_a], ["".join(ub[i:j]) for i, j in lines_b]
    out = []
    # autojunk: a line repeated throughout (a blank one) anchors nothing, and would make the matching quadratic.
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, texts_a, texts_b).get_opcodes():
        a0, a1 = _span(lines_a, i1, i2, len(ua))
        b0, b1 = _span(lines_b, j1, j2, len(ub))
        if tag != "equal" and a1 - a0 <= BLOCK_UNITS and b1 - b0 <= BLOCK_UNITS:
            out += _matched(ua[a0:a1], ub[b0:b1], at_a + a0, at_b + b0)
        else:
            out.append(Opcode(tag, at_a + a0, at_a + a1, at_b + b0, at_b + b1, "".join(texts_a[i1:i2]),
                              "".join(texts_b[j1:j2])))
    return out


# Units that end a line for matching, besides those holding a newline: a sentence's end, so that a long text of
# one line (Chinese text often has none) is matched sentence by sentence rather than replaced whole.
_SENTENCE_ENDS = frozenset("。！？；.!?")


def _lines(unit_list: list[str]) -> list[tuple[int, int]]:
    """(start, end) of each line of a unit list: a line ends with a unit holding a newline or ending a sentence, or
    at the end."""
    ends = [i + 1 for i, unit in enumerate(unit_list) if "\n" in unit or unit in _SENTENCE_ENDS]
    if not ends or ends[-1] != len(unit_list):
        ends.append(len(unit_list))
    return list(zip([0, *ends[:-1]], ends))


def _span(lines: list[tuple[int, int]], first: int, last: int, total: int) -> tuple[int, int]:
    """The units of lines[first:last] (an empty run of lines: where it would begin)."""
    if first < last:
        return lines[first][0], lines[last - 1][1]
    at = lines[first][0] if first < len(lines) else total
    return at, at


# An unchanged run longer than this is shown by its start and its end (SHOWN_AROUND characters each) around a note
# of how much is left out: side by side, two documents of 2 MB were laid out whole, for 13 s.
ELIDE_EQUAL_CHARS = 2_000
SHOWN_AROUND = 400


def shown_equal(text: str) -> str:
    """An unchanged run of text as a view shows it: whole, or its start and end around what is left out."""
    if len(text) <= ELIDE_EQUAL_CHARS:
        return text
    return f"{text[:SHOWN_AROUND]} [… {len(text) - 2 * SHOWN_AROUND:,} characters the same …] {text[-SHOWN_AROUND:]}"


def unified_lines(a: str, b: str, label_a: str, label_b: str, context: int = 3) -> list[str]:
    """The two texts as 'diff -u' shows them: a '---' and a '+++' header, then hunks of lines, each line marked
    ' ' (the same), '-' (only in a) or '+' (only in b). Empty when the texts' lines are the same."""
    return list(difflib.unified_diff(a.splitlines(), b.splitlines(), label_a, label_b, n=context, lineterm=""))
