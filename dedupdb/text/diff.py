"""What differs between two texts: characters for Chinese, words for space-separated text."""

from __future__ import annotations

import difflib
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


def diff_texts(a: str, b: str) -> TextDiff:
    by_character = is_mostly_cjk(a) or is_mostly_cjk(b)
    ua, ub = units(a, by_character), units(b, by_character)
    matcher = difflib.SequenceMatcher(None, ua, ub, autojunk=False)
    opcodes = [
        Opcode(tag, i1, i2, j1, j2, "".join(ua[i1:i2]), "".join(ub[j1:j2]))
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
    ]
    return TextDiff("character" if by_character else "word", opcodes, round(matcher.ratio(), 4))


def unified_lines(a: str, b: str, label_a: str, label_b: str, context: int = 3) -> list[str]:
    """The two texts as 'diff -u' shows them: a '---' and a '+++' header, then hunks of lines, each line marked
    ' ' (the same), '-' (only in a) or '+' (only in b). Empty when the texts' lines are the same."""
    return list(difflib.unified_diff(a.splitlines(), b.splitlines(), label_a, label_b, n=context, lineterm=""))
