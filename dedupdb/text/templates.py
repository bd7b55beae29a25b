"""Templates: two short texts that are one frame filled in twice.

"Dividend 15 cts, pay May 18" and "Dividend 24 cts, pay May 15", "（新华社记者李永宏摄）" and "（新华社记者李刚摄）",
"10 signs you grew up in Midtown Vancouver" and "... in Orangeville" reach the Jaccard threshold, and are
still different documents: removing one loses what the other does not say. A pair of texts is a template
pair when they differ only in numbers, or only in one slot: a run of at most SLOT_TOKENS tokens replaced on
both sides (not a word added or dropped) by words that are not a misspelling of each other, the frame around
it (the common beginning and end) holding at least half the tokens of each text.

Such pairs stay near-duplicates (pairs lists them with the kind "template"), but grouping leaves them apart
unless asked, so that clean and export --unique never remove one text for the other by default. Only texts
short enough to be held whole by their snippet are compared (a template frame is a short text's problem:
headlines, credits, dates, notices); a longer pair is never a template.
"""

from __future__ import annotations

from dataclasses import dataclass
from sys import intern

from dedupdb.text.normalize import normalize
from dedupdb.text.tokens import text_tokens as tokens_of

# The longest slot, in tokens, on either side: a name of three words, a date's figures are digits (masked).
SLOT_TOKENS = 3
# Slots this few edits apart (letters changed, added, dropped or swapped) are one word misspelled, not another
# word: one edit in a slot of up to four characters, two in a longer one.
MISSPELLING_EDITS = (1, 2)


def text_tokens(raw_text: str) -> list[str]:
    """A text's tokens as shingling sees them (normalized, repost noise left out, one token a digit)."""
    return tokens_of(normalize(raw_text))


@dataclass(frozen=True)
class Frame:
    """What the template rule compares of one text, made once however many pairs it is in."""

    tokens: tuple[str, ...]
    merged: tuple[str, ...]  # every number one token "0"
    digits: tuple[str, ...]  # every digit a token "0"


def frame_of(tokens: list[str]) -> Frame:
    # Interned: frames are kept by the thousand, and a Chinese text's tokens are one-character strings.
    tokens = [intern(token) for token in tokens]
    digits = tuple(["0" if token.isdigit() else token for token in tokens])
    if "0" not in digits:
        return Frame(tuple(tokens), digits, digits)
    merged = tuple([t for i, t in enumerate(digits) if t != "0" or i == 0 or digits[i - 1] != "0"])
    return Frame(tuple(tokens), merged, digits)


def is_template(a: list[str], b: list[str]) -> bool:
    """Whether two token lists (text_tokens) are one frame filled in twice (the module docstring)."""
    return frames_are_templates(frame_of(a), frame_of(b))


def frames_are_templates(a: Frame, b: Frame) -> bool:
    if a.tokens == b.tokens:
        return False
    if a.merged == b.merged:  # only numbers differ
        return True
    # A number is a slot of one token ("15 cts" / "2,400 cts"), or of its digits, each masked ("November 13,
    # 2001" / "11/13/2001": the month is one slot beside the figures). Two slots of at most SLOT_TOKENS differ
    # in length by less than SLOT_TOKENS.
    return any(abs(len(x) - len(y)) < SLOT_TOKENS and _one_slot(x, y)
               for x, y in ((a.merged, b.merged), (a.digits, b.digits)))


def _one_slot(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    head = 0
    while head < min(len(a), len(b)) and a[head] == b[head]:
        head += 1
    tail = 0
    while tail < min(len(a), len(b)) - head and a[-1 - tail] == b[-1 - tail]:
        tail += 1
    slot_a, slot_b = a[head : len(a) - tail], b[head : len(b) - tail]
    if not slot_a or not slot_b or len(slot_a) > SLOT_TOKENS or len(slot_b) > SLOT_TOKENS:
        return False
    if 2 * (head + tail) < max(len(a), len(b)):
        return False
    x, y = " ".join(slot_a), " ".join(slot_b)
    allowed = MISSPELLING_EDITS[0] if min(len(x), len(y)) <= 4 else MISSPELLING_EDITS[1]
    return _edits(x, y, allowed) > allowed


def _edits(x: str, y: str, most: int) -> int:
    """The optimal string alignment distance of x and y (a swap of neighbours is one edit), or most + 1 once it
    is sure to exceed most."""
    if abs(len(x) - len(y)) > most:
        return most + 1
    before, row = None, list(range(len(y) + 1))
    for i in range(1, len(x) + 1):
        current = [i] + [0] * len(y)
        for j in range(1, len(y) + 1):
            cost = x[i - 1] != y[j - 1]
            current[j] = min(row[j] + 1, current[j - 1] + 1, row[j - 1] + cost)
            if before is not None and i > 1 and j > 1 and x[i - 1] == y[j - 2] and x[i - 2] == y[j - 1]:
                current[j] = min(current[j], before[j - 2] + 1)
        if min(current) > most:
            return most + 1
        before, row = row, current
    return row[-1]
