"""Sketching compiled with numba: for a batch of texts, the numbers Sketcher's numpy path computes, bit for bit.

Only the repost-noise regex stays in Python, and only for texts that may hold noise. The rest runs in one
compiled call over the whole batch, its texts concatenated as UTF-8: tokens are found with a table of character
classes taken from Python's own `re` (so they are those of tokens._TOKEN, for every code point), hashed with
xxh64 straight from the UTF-8 bytes, then shingled, MinHashed, winnowed and counted text by text, each text's
token hashes staying in a scratch buffer.

Compiled code is cached on disk (jit.py), so only the first run on a machine pays for compiling.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from bisect import bisect_right
from collections.abc import Callable
from functools import lru_cache

import numpy as np
import xxhash

from dedupdb.config import cache_dir, kept_table
from dedupdb.jit import njit, types
from dedupdb.sketch.simhash import ORDER_SLACK, fingerprints
from dedupdb.text.hashing import FMIX_C1, FMIX_C2
from dedupdb.text.tokens import (ASCII_NOISE_MARKS, CHAR_MULT, CHAR_VIEW_FULL, CHAR_VIEW_NONE, CHAR_VIEW_STEP, CJK, IS_CJK, NGRAM_MULT,
                                 REPOST_NOISE, TOKEN_SEED)
from dedupdb.text.weights import CHINESE_WORD_SEED, DF_BUCKETS, RARE_WEIGHT, chinese_word_hashes, word_table

# Character classes, one per code point: as tokens._TOKEN sees them.
_OTHER, _WORD, _DIGIT, _CJK_CHAR = 0, 1, 2, 3
_UNICODE = 0x110000

# Every match of REPOST_NOISE holds one of these, or the word "rt": a text without them is left as it is (the
# regex is the slowest part of sketching the texts that need it).
_NOISE_MARKS = ("//", "www.", "@", "#", "转发")
_ASCII_MARKS = tuple(mark.encode("ascii") for mark in ASCII_NOISE_MARKS)

_SEED = np.uint64(TOKEN_SEED)
_P1 = np.uint64(0x9E3779B185EBCA87)
_P2 = np.uint64(0xC2B2AE3D27D4EB4F)
_P3 = np.uint64(0x165667B19E3779F9)
_P4 = np.uint64(0x85EBCA77C2B2AE63)
_P5 = np.uint64(0x27D4EB2F165667C5)
_MULT = np.uint64(NGRAM_MULT)
_CHAR_MULT = np.uint64(CHAR_MULT)
_CHAR_VIEW_FULL = CHAR_VIEW_FULL
_CHAR_VIEW_STEP = CHAR_VIEW_STEP
_TOKEN_VIEW = np.uint64(0xFFFFFFFE)
_CHAR_VIEW = np.uint64(1)
_CHAR_VIEW_NONE = CHAR_VIEW_NONE
_C1 = np.uint64(FMIX_C1)
_C2 = np.uint64(FMIX_C2)
_BYTE = np.uint64(0xFF)
_NONE = np.uint32(0xFFFFFFFF)  # the MinHash of no shingles
# Shift amounts as uint64: numba types uint64 mixed with int64 as float64.
(_S1, _S7, _S8, _S11, _S12, _S16, _S18, _S23, _S24, _S27, _S29, _S31, _S32, _S33, _S37, _S41, _S46, _S52, _S53,
 _S57, _S63) = (np.uint64(s) for s in (1, 7, 8, 11, 12, 16, 18, 23, 24, 27, 29, 31, 32, 33, 37, 41, 46, 52, 53, 57, 63))
_EMPTY = np.empty(0, np.uint32)
_BUCKET_BITS = DF_BUCKETS.bit_length() - 1
_BUCKET_MASK = np.uint64(DF_BUCKETS - 1)


_CLASS_PATTERNS = ((rf"[^\W\d{CJK}]+", _WORD), (rf"[^\W\D{CJK}]+", _DIGIT), (rf"[{CJK}]+", _CJK_CHAR))


@lru_cache(maxsize=1)
def char_classes() -> np.ndarray:
    """The class of every code point (uint8), from the same character sets as tokens._TOKEN, matched by this
    Python's `re`, so the table follows its Unicode data. Kept in the cache folder under a name that says which
    Python made it and from which sets: matching every code point took a tenth of a second, before the first batch
    of every process that sketches (an add's workers, a batch query's)."""
    stamp = xxhash.xxh64_hexdigest(repr((sys.version, unicodedata.unidata_version, _CLASS_PATTERNS)).encode())
    return kept_table(cache_dir() / f"char-classes-{stamp}.npy", _matched_classes,
                      lambda table: table.dtype == np.uint8 and table.shape == (_UNICODE,) and _classes_look_right(table))


def _matched_classes() -> np.ndarray:
    table = np.zeros(_UNICODE, np.uint8)
    every = np.arange(_UNICODE, dtype="<u4").tobytes().decode("utf-32-le", "surrogatepass")
    # The CJK ranges (unassigned code points in them too) are kept out of the other classes, as in _TOKEN.
    for pattern, cls in _CLASS_PATTERNS:
        for match in re.finditer(pattern, every):
            table[match.start() : match.end()] = cls
    return table


def _classes_look_right(table: np.ndarray) -> bool:
    """A few code points of each class where they belong: a table read back is not another file's bytes."""
    return bool(table[ord("a")] == _WORD and table[ord("5")] == _DIGIT and table[0x4E2D] == _CJK_CHAR
                and table[ord(" ")] == _OTHER and table[0x00E9] == _WORD)


# --- kernels --------------------------------------------------------------------------------------
# Few functions, each with its one signature: every function costs a compilation (and a cache entry to load),
# and a signature given up front keeps numba from compiling again for other argument types or literal values.
# They are compiled, or loaded from the cache, on import.

_u64, _i64, _b1 = types.uint64, types.int64, types.boolean
_bytes = types.Array(types.uint8, 1, "C", readonly=True)
_u8s, _u32s, _u64s, _i64s = types.uint8[::1], types.uint32[::1], types.uint64[::1], types.int64[::1]
_i64x2 = types.int64[:, ::1]


def _jit(signature, inline="never"):
    return njit(signature, cache=True, inline=inline)


# Inlined where it is called (numba's own inlining): a call a token cost a seventh of tokenizing. No signature: it
# is compiled on its own only if called from Python (a test), not at every first import (1.5 s of a first add).
@njit(cache=True, inline="always")
def xxh64(data, start, length, seed):
    """xxHash64 of data[start:start + length], as xxhash.xxh64_intdigest gives it."""
    p = start
    end = start + length
    if length >= 32:
        v = np.empty(4, np.uint64)
        v[0] = seed + _P1 + _P2
        v[1] = seed + _P2
        v[2] = seed
        v[3] = seed - _P1
        while p + 32 <= end:
            for lane in range(4):
                word = np.uint64(0)
                for k in range(8):
                    word |= np.uint64(data[p + k]) << np.uint64(8 * k)
                acc = v[lane] + word * _P2
                v[lane] = ((acc << _S31) | (acc >> _S33)) * _P1
                p += 8
        h = (((v[0] << _S1) | (v[0] >> _S63)) + ((v[1] << _S7) | (v[1] >> _S57))
             + ((v[2] << _S12) | (v[2] >> _S52)) + ((v[3] << _S18) | (v[3] >> _S46)))
        for lane in range(4):
            acc = v[lane] * _P2
            h = (h ^ (((acc << _S31) | (acc >> _S33)) * _P1)) * _P1 + _P4
    else:
        h = seed + _P5
    h += np.uint64(length)
    while p + 8 <= end:
        word = np.uint64(0)
        for k in range(8):
            word |= np.uint64(data[p + k]) << np.uint64(8 * k)
        acc = word * _P2
        h ^= ((acc << _S31) | (acc >> _S33)) * _P1
        h = ((h << _S27) | (h >> _S37)) * _P1 + _P4
        p += 8
    return _xxh64_tail(data, p, end, h)


@njit(cache=True, inline="always")
def xxh64_short(data, start, length, seed):
    """xxh64() of fewer than eight bytes (a character, a digit): its last steps alone, a fraction of the code that
    each place inlining it compiles."""
    return _xxh64_tail(data, start, start + length, seed + _P5 + np.uint64(length))


@njit(cache=True, inline="always")
def _xxh64_tail(data, p, end, h):
    """The last steps of xxh64(): the fewer than eight bytes from p to end, then the final mixing."""
    if p + 4 <= end:
        word = (np.uint64(data[p]) | (np.uint64(data[p + 1]) << _S8) | (np.uint64(data[p + 2]) << _S16)
                | (np.uint64(data[p + 3]) << _S24))
        h ^= word * _P1
        h = ((h << _S23) | (h >> _S41)) * _P2 + _P3
        p += 4
    while p < end:
        h ^= np.uint64(data[p]) * _P5
        h = ((h << _S11) | (h >> _S53)) * _P1
        p += 1
    h ^= h >> _S33
    h *= _P2
    h ^= h >> _S29
    h *= _P3
    h ^= h >> _S32
    return h


@_jit(types.UniTuple(_i64, 3)(_bytes, _i64, _i64, _u8s, _b1, _u64s, _u64s))
def _tokenize(data, start, end, table, drop_rt, out, chars):
    """The token hashes of the UTF-8 text data[start:end] into out, as tokens.split_tokens and Tokenizer give them,
    and into chars the character hashes (tokens.char_hashes) of the tokens joined by single spaces: returns how
    many tokens, how many of them are CJK characters, and how many characters."""
    m = 0
    cjk = 0
    n = 0  # characters
    run = -1  # where the current run of word characters started
    run_chars = 0  # characters before it (a space follows them when any do)
    has_word = False  # whether it holds a character other than a digit
    p = start
    while p <= end:
        cls = _OTHER  # the end closes the last run
        size = 1
        code = 0
        if p < end:
            b = np.int64(data[p])
            if b < 0x80:
                code = b
            elif b < 0xE0:
                code = ((b & 0x1F) << 6) | (np.int64(data[p + 1]) & 0x3F)
                size = 2
            elif b < 0xF0:
                code = ((b & 0x0F) << 12) | ((np.int64(data[p + 1]) & 0x3F) << 6) | (np.int64(data[p + 2]) & 0x3F)
                size = 3
            else:
                code = (((b & 0x07) << 18) | ((np.int64(data[p + 1]) & 0x3F) << 12)
                        | ((np.int64(data[p + 2]) & 0x3F) << 6) | (np.int64(data[p + 3]) & 0x3F))
                size = 4
            cls = table[code]
        if cls == _WORD or cls == _DIGIT:
            if run < 0:
                run = p
                has_word = False
                run_chars = n
                if n > 0:
                    chars[n] = np.uint64(33) * _CHAR_MULT  # a space: code point 32, plus one
                    n += 1
            if cls == _WORD:
                has_word = True
            chars[n] = np.uint64(code + 1) * _CHAR_MULT
            n += 1
        else:
            if run >= 0:
                if has_word:  # a word
                    if not (drop_rt and p - run == 2 and data[run] == 114 and data[run + 1] == 116):  # "rt"
                        out[m] = xxh64(data, run, p - run, _SEED)
                        m += 1
                    else:
                        n = run_chars
                else:  # a number: a token per digit, and a space between its digits
                    q = run
                    while q < p:
                        b = data[q]
                        digit = 1 if b < 0x80 else 2 if b < 0xE0 else 3 if b < 0xF0 else 4
                        out[m] = xxh64_short(data, q, digit, _SEED)
                        m += 1
                        q += digit
                    first = run_chars + 1 if run_chars > 0 else 0  # its first digit
                    digits = n - first
                    for k in range(digits - 1, 0, -1):  # spread from the end: 2k is where digit k goes
                        chars[first + 2 * k] = chars[first + k]
                        chars[first + 2 * k - 1] = np.uint64(33) * _CHAR_MULT
                    n = first + 2 * digits - 1
                run = -1
            if cls == _CJK_CHAR:
                out[m] = xxh64_short(data, p, size, _SEED)
                m += 1
                cjk += 1
                if n > 0:
                    chars[n] = np.uint64(33) * _CHAR_MULT
                    n += 1
                chars[n] = np.uint64(code + 1) * _CHAR_MULT
                n += 1
        p += size
    return m, cjk, n


@njit(cache=True, inline="always")
def _fmix(x):
    """hashing.fmix64 of one value."""
    x ^= x >> _S33
    x *= _C1
    x ^= x >> _S33
    x *= _C2
    x ^= x >> _S33
    return x


@_jit(_i64(_u64s, _i64, _i64, _u64s))
def _grams(hashes, m, n, out):
    """tokens.shingle_hashes of hashes[:m] (m > 0) into out, as uint64: returns how many."""
    n = min(n, m)
    width = m - n + 1
    for p in range(width):
        acc = hashes[p]
        for j in range(1, n):
            acc = (acc * _MULT) ^ hashes[p + j]
        out[p] = _fmix(acc) >> _S32
    return width


# Up to this many values are sorted by spreading them over as many buckets by their top bits and putting the
# few in each bucket in order (an insertion sort of the whole, which then has little to move): hashes are spread
# evenly, and a text's few hundred take one pass, where a radix sort takes one per byte (eight for a word hash).
_FEW = 2048


@_jit(_u64s(_u64s, _i64, _i64, _u64s, _i64s))
def _sorted(values, n, bits, scratch, counts):
    """values[:n], each less than 2 ** bits, sorted: left in values or in scratch, the one returned (counts: room
    for 8 x 256 + 1 counts).

    More than _FEW values: a least-significant-digit radix sort, a byte at a time, skipping the bytes all values
    share: several times faster than numba's quicksort, and little code to compile."""
    if n == 0:
        return values
    if n <= _FEW:
        spread = 1
        while (1 << spread) < n:
            spread += 1
        shift = np.uint64(max(bits - spread, 0))
        last = np.uint64((1 << spread) - 1)  # a mask, so that no value can index outside counts
        for bucket in range((1 << spread) + 1):
            counts[bucket] = 0
        for p in range(n):
            counts[np.int64((values[p] >> shift) & last) + 1] += 1
        for bucket in range(1 << spread):
            counts[bucket + 1] += counts[bucket]
        for p in range(n):
            v = values[p]
            bucket = np.int64((v >> shift) & last)
            scratch[counts[bucket]] = v
            counts[bucket] += 1
        for p in range(1, n):
            v = scratch[p]
            q = p
            while q > 0 and scratch[q - 1] > v:
                scratch[q] = scratch[q - 1]
                q -= 1
            scratch[q] = v
        return scratch
    width = (bits + 7) // 8
    for byte in range(width):
        for digit in range(256):
            counts[256 * byte + digit] = 0
    for p in range(n):
        v = values[p]
        for byte in range(width):
            counts[256 * byte + np.int64((v >> np.uint64(8 * byte)) & _BYTE)] += 1
    source, target = values, scratch
    for byte in range(width):
        shift = np.uint64(8 * byte)
        row = counts[256 * byte : 256 * byte + 256]
        if row[(source[0] >> shift) & _BYTE] == n:
            continue
        total = 0
        for digit in range(256):
            size = row[digit]
            row[digit] = total
            total += size
        for p in range(n):
            v = source[p]
            digit = (v >> shift) & _BYTE
            target[row[digit]] = v
            row[digit] += 1
        source, target = target, source
    return source


@_jit(_u64s(_u64s, _i64, _i64))
def _room(buffer, used, extra):
    """buffer, or a copy twice as large when extra more values do not fit after used."""
    if used + extra <= buffer.shape[0]:
        return buffer
    bigger = np.empty(max(2 * buffer.shape[0], used + extra), np.uint64)
    for p in range(used):
        bigger[p] = buffer[p]
    return bigger


@_jit(types.Tuple((_u64s, _i64))(_u64s, _i64, _i64, _u64s, _i64s, _u64s, _i64, _b1))
def _append_distinct(values, n, bits, scratch, counts, out, used, counted):
    """The distinct values of values[:n] (each less than 2 ** bits), sorted, appended to out at used (grown as
    needed), each followed by how often it occurs when counted: (out, new used)."""
    ordered = _sorted(values, n, bits, scratch, counts)
    out = _room(out, used, 2 * n if counted else n)
    for p in range(n):
        if p == 0 or ordered[p] != ordered[p - 1]:
            out[used] = ordered[p]
            used += 1
            if counted:
                out[used] = 1
                used += 1
        elif counted:
            out[used - 1] += 1
    return out, used


@_jit(_u8s(_bytes))
def collapse_spaces(data):
    """data (ASCII lines joined by newlines, with no whitespace but spaces in them) with each run of spaces made
    one and none at either end of a line: normalize.collapsed_ascii's bytes methods, in one pass."""
    out = np.empty(len(data), np.uint8)
    n = 0
    for i in range(len(data)):
        c = data[i]
        if c == 32:
            if n == 0 or out[n - 1] == 32 or out[n - 1] == 10:
                continue
        elif c == 10 and n > 0 and out[n - 1] == 32:
            n -= 1
        out[n] = c
        n += 1
    if n > 0 and out[n - 1] == 32:
        n -= 1
    return out[:n]


@_jit(types.Tuple((types.uint32[:, ::1], _i64s, _i64s, _u64s, _u64s, _u64s, _u64s, _i64x2))(
    _bytes, _i64x2, _i64s, _u8s, _u8s, _i64, _i64, _i64, _i64, _i64, _u32s, _u32s))
def sketch_kernel(data, spans, cjk_given, drop_rt, table, word_ngram, cjk_ngram, char_ngram, run_ngram, window, a, b):
    """Everything Sketcher computes per text but the content hash and Chinese SimHash, for a batch.

    data: UTF-8; spans[i]: (start, end) in data of what text i tokenizes; cjk_given[i]: its CJK characters when
    what it tokenizes is a cleaned copy (else -1: they are its CJK tokens); drop_rt[i]: whether the token "rt"
    is dropped (the ASCII path of tokens.split_tokens).
    Returns the signatures (texts x len(a)), token and CJK counts, and, concatenated, the distinct sorted
    shingles and winnowed fingerprints, the distinct word hashes each followed by its count and the distinct
    buckets of those words (weights.word_buckets), with the bounds of each text's part (a row for each of those
    four).
    """
    texts = spans.shape[0]
    longest = 1
    total = 0
    for i in range(texts):
        longest = max(longest, spans[i, 1] - spans[i, 0])
        total += spans[i, 1] - spans[i, 0]
    hashes = np.empty(longest, np.uint64)  # a token takes at least a byte
    chars = np.empty(2 * longest, np.uint64)  # a character takes at least a byte, and a space may follow it
    char_grams = np.empty(2 * longest, np.uint64)
    work = np.empty(3 * longest, np.uint64)  # token n-grams, then character n-grams
    scratch = np.empty(3 * longest, np.uint64)
    counts = np.empty(8 * 256 + 1, np.int64)
    perms = a.shape[0]
    signatures = np.empty((texts, perms), np.uint32)
    low = np.empty(perms, np.uint32)  # the signature being made
    tokens = np.empty(texts, np.int64)  # np.empty rather than np.zeros: less to compile; all are written
    cjk = np.empty(texts, np.int64)
    shingles = np.empty(total // 4 + 16, np.uint64)
    prints = np.empty(total // 16 + 16, np.uint64)
    words = np.empty(total // 2 + 16, np.uint64)
    buckets = np.empty(total // 4 + 16, np.uint64)
    bounds = np.empty((4, texts + 1), np.int64)
    for row in range(4):
        bounds[row, 0] = 0
    s_used = 0
    p_used = 0
    w_used = 0
    b_used = 0
    for i in range(texts):
        m, c, n = _tokenize(data, spans[i, 0], spans[i, 1], table, drop_rt[i] != 0, hashes, chars)
        if cjk_given[i] >= 0:
            c = cjk_given[i]
        tokens[i] = m
        cjk[i] = c
        if m == 0:
            for k in range(perms):
                signatures[i, k] = _NONE
        else:
            mostly_cjk = 2 * c >= m
            # Shingles, distinct and sorted, and their MinHash.
            start = s_used
            width = _grams(hashes, m, cjk_ngram if mostly_cjk else word_ngram, work)
            for q in range(width):
                work[q] &= _TOKEN_VIEW  # the views told apart by the lowest bit (tokens.py)
            if not mostly_cjk and char_ngram > 0 and m < _CHAR_VIEW_NONE:  # the character view (tokens.char_view_limit)
                if m <= _CHAR_VIEW_FULL:
                    limit = np.uint64(1) << _S32
                else:
                    limit = np.uint64(_CHAR_VIEW_NONE - m) * np.uint64(_CHAR_VIEW_STEP)
                grams = _grams(chars, n, char_ngram, char_grams)
                for q in range(grams):
                    if char_grams[q] < limit:
                        work[width] = char_grams[q] | _CHAR_VIEW
                        width += 1
            shingles, s_used = _append_distinct(work, width, 32, scratch, counts, shingles, s_used, False)
            # In a row of its own, with min() rather than a compare and store: the permutations then run in
            # vector lanes (a fifth of the time of the branching loop over the signature's row).
            for k in range(perms):
                low[k] = _NONE
            for q in range(start, s_used):
                x = np.uint32(shingles[q])
                for k in range(perms):
                    low[k] = min(low[k], np.uint32(a[k] * x + b[k]))
            for k in range(perms):
                signatures[i, k] = low[k]
            # Winnowed fingerprints: the minimum of every window of run hashes inside the text; a text with
            # fewer runs than a window keeps its smallest.
            runs = _grams(hashes, m, run_ngram, work)
            if m - run_ngram + 1 >= window:
                # Neighbouring windows mostly share their minimum: it is kept once (about 2 / (window + 1) of the
                # positions remain), so the sort below has a fraction of the values.
                kept = 0
                for s in range(runs - window + 1):
                    least = work[s]
                    for j in range(1, window):
                        least = min(least, work[s + j])
                    if kept == 0 or least != work[kept - 1]:
                        work[kept] = least  # kept <= s: no later window reads it
                        kept += 1
            else:
                least = work[0]
                for s in range(1, runs):
                    least = min(least, work[s])
                work[0] = least
                kept = 1
            prints, p_used = _append_distinct(work, kept, 32, scratch, counts, prints, p_used, False)
            # Distinct token hashes and their counts: only text that is not mostly CJK uses them.
            if not mostly_cjk:
                for p in range(m):
                    work[p] = hashes[p]
                first = w_used
                words, w_used = _append_distinct(work, m, 64, scratch, counts, words, w_used, True)
                # Their buckets, here rather than sorted again in numpy for the whole batch (weights.word_buckets).
                distinct = (w_used - first) // 2
                for p in range(distinct):
                    work[p] = words[first + 2 * p] & _BUCKET_MASK
                buckets, b_used = _append_distinct(work, distinct, _BUCKET_BITS, scratch, counts, buckets, b_used, False)
        bounds[0, i + 1] = s_used
        bounds[1, i + 1] = p_used
        bounds[2, i + 1] = w_used
        bounds[3, i + 1] = b_used
    return signatures, tokens, cjk, shingles[:s_used], prints[:p_used], words[:w_used], buckets[:b_used], bounds


# --- the batch ----------------------------------------------------------------------------------------


def _has_rt(text: str) -> bool:
    """Whether REPOST_NOISE's \\brt\\b matches in text: "rt" with no word character (\\w: alphanumeric or "_")
    either side. Many texts hold "rt" inside words ("short", "part"), and this is cheaper than a regex search."""
    at = text.find("rt")
    while at >= 0:
        before = text[at - 1] if at else " "
        after = text[at + 2] if at + 2 < len(text) else " "
        if not (before.isalnum() or before == "_" or after.isalnum() or after == "_"):
            return True
        at = text.find("rt", at + 1)
    return False


def _marked(data: bytes, starts: list[int], marks: tuple[bytes, ...]) -> set[int]:
    """The texts holding any of the marks: text i is data[starts[i]:starts[i + 1] - 1], the texts joined by
    newlines (which no mark holds), searched once for each mark rather than each text for each."""
    marked: set[int] = set()
    for mark in marks:
        at = data.find(mark)
        while at >= 0:
            i = bisect_right(starts, at) - 1
            marked.add(i)
            at = data.find(mark, starts[i + 1])
    return marked


def _encode(texts: list[str]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The batch as sketch_kernel takes it: data, spans, cjk_given, drop_rt."""
    count = len(texts)
    drop_rt = np.zeros(count, np.uint8)
    cjk_given = np.full(count, -1, np.int64)
    # Each text encoded alone and the bytes joined: a str joined from texts some of which are not ASCII is wide,
    # and slower to search and to encode. The newlines between them lie in no span.
    encoded = [text.encode("utf-8") for text in texts]
    joined = b"\n".join(encoded)
    lengths = np.fromiter(map(len, encoded), np.int64, count)
    spans = np.empty((count, 2), np.int64)
    spans[:, 1] = np.cumsum(lengths + 1) - 1
    spans[:, 0] = spans[:, 1] - lengths
    marked = _marked(joined, [*spans[:, 0].tolist(), len(joined) + 1], _ASCII_MARKS)
    cleaned: list[tuple[int, bytes]] = []
    for i, text in enumerate(texts):
        # The choice tokens.split_tokens makes: ASCII text without repost marks takes a path dropping "rt" tokens,
        # any other goes through the regex (needed only where one of its marks occurs).
        if text.isascii():
            if i not in marked:
                drop_rt[i] = 1
                continue
        elif not any(mark in text for mark in _NOISE_MARKS) and not _has_rt(text):
            continue
        clean = REPOST_NOISE.sub(" ", text)
        if clean != text:
            cleaned.append((i, clean.encode("utf-8")))
            cjk_given[i] = 0 if text.isascii() else len(IS_CJK.findall(text))  # noise removed counts too
    end = len(joined)
    for i, clean in cleaned:  # cleaned copies follow the texts
        spans[i] = end, end + len(clean)
        end += len(clean)
    data = np.frombuffer(joined + b"".join(clean for _, clean in cleaned) if cleaned else joined, np.uint8)
    return data, spans, cjk_given, drop_rt


def sketch_parts(texts: list[str], word_ngram: int, cjk_ngram: int, char_ngram: int, run_ngram: int, window: int,
                 a: np.ndarray, b: np.ndarray):
    """For each text: its distinct sorted shingles, MinHash signature (rows of one array), distinct word hashes
    and counts (None for mostly-CJK or empty text), winnowed fingerprints, token count, whether it is mostly
    CJK and the buckets of its words (None where it has no word counts); what Sketcher's numpy path gives (a and
    b: the MinHasher's)."""
    signatures, tokens, cjk, shingles, prints, words, buckets, bounds = sketch_kernel(
        *_encode(texts), char_classes(), word_ngram, cjk_ngram, char_ngram, run_ngram, window, a, b)
    shingles, prints, buckets = shingles.astype(np.uint32), prints.astype(np.uint32), buckets.astype(np.uint32)
    values, counts = words[0::2].copy(), words[1::2].view(np.int64).copy()  # contiguous, as numpy's are
    tokens = tokens.tolist()
    mostly_cjk = [t > 0 and 2 * c >= t for t, c in zip(tokens, cjk.tolist())]
    sb, pb, wb, bb = bounds.tolist()
    count = range(len(texts))
    shingle_sets = [shingles[sb[i] : sb[i + 1]] for i in count]
    fingerprints = [prints[pb[i] : pb[i + 1]] if pb[i + 1] > pb[i] else _EMPTY for i in count]
    word_counts = [(values[wb[i] // 2 : wb[i + 1] // 2], counts[wb[i] // 2 : wb[i + 1] // 2]) if wb[i + 1] > wb[i]
                   else None for i in count]
    word_buckets = [buckets[bb[i] : bb[i + 1]] if wb[i + 1] > wb[i] else None for i in count]
    return shingle_sets, signatures, word_counts, fingerprints, tokens, mostly_cjk, word_buckets


# --- SimHash's word weights ----------------------------------------------------------------------------------

# The word table's keys are sorted hashes: those sharing their top bits are neighbours, and a directory of where
# each value of those bits starts finds a word among a key or two, not by a binary search over 200,000 (most of
# its steps missing the cache: that search was a tenth of sketching a review).
_DIRECTORY_BITS = 18
_DIRECTORY_SHIFT = np.uint64(64 - _DIRECTORY_BITS)


@lru_cache(maxsize=1)
def _word_directory() -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    keys, weights = word_table()
    tops = (keys >> _DIRECTORY_SHIFT).astype(np.int64)
    starts = np.searchsorted(tops, np.arange((1 << _DIRECTORY_BITS) + 1, dtype=np.int64)).astype(np.int64)
    return np.ascontiguousarray(keys), np.ascontiguousarray(weights, np.float64), starts


@_jit(types.float64[::1](_u64s, _u64s, types.float64[::1], _i64s))
def _looked_up(hashes, keys, weights, starts):
    out = np.empty(hashes.shape[0], np.float64)
    for i in range(hashes.shape[0]):
        h = hashes[i]
        top = np.int64(h >> _DIRECTORY_SHIFT)
        weight = RARE_WEIGHT
        for at in range(starts[top], starts[top + 1]):
            if keys[at] == h:
                weight = weights[at]
                break
        out[i] = weight
    return out


@_jit(_u64s(_bytes, _u64))
def _separated_hashes(data, seed):
    """xxh64() of each stretch of data between zero bytes."""
    count = 1
    for i in range(data.shape[0]):
        if data[i] == 0:
            count += 1
    out = np.empty(count, np.uint64)
    start, k = 0, 0
    for i in range(data.shape[0] + 1):
        if i == data.shape[0] or data[i] == 0:
            out[k] = xxh64(data, start, i - start, seed)
            k += 1
            start = i + 1
    return out


@_jit(types.Tuple((_u64s, _i64s))(_u64s, _i64s))
def _distinct_counted(values, bounds):
    """_append_distinct (counted) of each text's values (text t's: values[bounds[t]:bounds[t + 1]]), one after
    another, and how many distinct values each text has."""
    texts = bounds.shape[0] - 1
    longest = 0
    for t in range(texts):
        longest = max(longest, bounds[t + 1] - bounds[t])
    work = np.empty(longest, np.uint64)
    scratch = np.empty(longest, np.uint64)
    tally = np.empty(8 * 256 + 1, np.int64)
    out = np.empty(2 * values.shape[0], np.uint64)
    lengths = np.empty(texts, np.int64)
    used = 0
    for t in range(texts):
        size = bounds[t + 1] - bounds[t]
        for i in range(size):
            work[i] = values[bounds[t] + i]
        out, after = _append_distinct(work, size, 64, scratch, tally, out, used, True)
        lengths[t] = (after - used) // 2
        used = after
    return out[:used], lengths


def distinct_counted(values: np.ndarray, lengths: list[int]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Each text's distinct values (lengths[t] of values are text t's), sorted, how often each occurs, and how many
    each text has: hashing.distinct_first_counts of every text at once."""
    bounds = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=bounds[1:])
    pairs, each = _distinct_counted(np.ascontiguousarray(values, np.uint64), bounds)
    return pairs[0::2], pairs[1::2].astype(np.int64), each


def chinese_hashes(words: list[str]) -> np.ndarray:
    """weights.chinese_word_hashes, the same values: the words joined by a zero byte, which none holds (jieba's
    words are letters, digits and ideographs), encoded once and hashed in one compiled pass, where Python hashed
    them one call a word (40 microseconds of a long Chinese review's SimHash)."""
    joined = "\0".join(words)
    if not words or joined.count("\0") != len(words) - 1:  # none, or a word holding a zero byte after all
        return chinese_word_hashes(words)
    return _separated_hashes(np.frombuffer(joined.encode("utf-8"), np.uint8), np.uint64(CHINESE_WORD_SEED))


def word_weights(hashes: np.ndarray) -> np.ndarray:
    """weights.word_weights, the same numbers, several times faster."""
    return _looked_up(np.ascontiguousarray(hashes, np.uint64), *_word_directory())


@_jit(types.Tuple((_u64s, types.boolean[::1]))(_u64s, types.float64[::1], _i64s))
def _votes(features, weights, bounds):
    out = np.empty(bounds.shape[0] - 1, np.uint64)
    sure = np.ones(bounds.shape[0] - 1, np.bool_)
    tally = np.empty(64, np.float64)
    for text in range(bounds.shape[0] - 1):
        tally[:] = 0.0
        total = 0.0
        magnitude = 0.0
        for i in range(bounds[text], bounds[text + 1]):
            feature, weight = features[i], weights[i]
            total += weight
            magnitude += abs(weight)
            for bit in range(64):
                if (feature >> np.uint64(bit)) & _S1:
                    tally[bit] += weight
        slack = ORDER_SLACK * (bounds[text + 1] - bounds[text] + 1) * magnitude
        value = np.uint64(0)
        for bit in range(64):
            vote = 2.0 * tally[bit] - total
            if vote > 0.0:
                value |= _S1 << np.uint64(bit)
            if abs(vote) <= slack:
                sure[text] = False
        out[text] = value
    return out, sure


def simhashes(feature_hashes: np.ndarray, weights: np.ndarray, lengths: list[int],
              reference: Callable[[np.ndarray, np.ndarray], int] | None = None) -> list[int]:
    """simhash.fingerprints, the same bits, several times faster (1.6 against 9 to 10 microseconds for an IMDB
    review with a SimHash): one pass over each text's features, where numpy unpacks 64 bits a feature and
    multiplies them out. Each bit is the sign of a sum of weights, which numpy adds in another order: where a vote
    is so close to even that the order could turn it (words of equal weight, such as words the table does not
    know, split half and half), that text's SimHash is numpy's own: reference(features, weights) of it, where
    given (simhash.fingerprint, for Chinese texts, whose SimHash is defined text by text), else fingerprints'."""
    features = np.ascontiguousarray(feature_hashes, np.uint64)
    weights = np.ascontiguousarray(weights, np.float64)
    bounds = np.zeros(len(lengths) + 1, np.int64)
    np.cumsum(lengths, out=bounds[1:])
    values, sure = _votes(features, weights, bounds)
    out = values.tolist()
    for text in np.flatnonzero(~sure).tolist():
        start, end = int(bounds[text]), int(bounds[text + 1])
        if reference is not None:
            out[text] = reference(features[start:end], weights[start:end])
        else:
            out[text] = fingerprints(features[start:end], weights[start:end], [end - start])[0]
    return out


# --- index keys ------------------------------------------------------------------------------------------------


_given_u64s = types.Array(types.uint64, 1, "C", readonly=True)  # taking a process's cached masks, which are read-only


@_jit(_u64s(types.Array(types.uint16, 2, "C", readonly=True), _i64, _u64, _u64, _given_u64s, _given_u64s, _given_u64s,
            _given_u64s, _u64))
def _index_keys(signatures, rows, offset, multiplier, band_mixes, simhashes, masks, simhash_mixes, shift):
    bands = band_mixes.shape[0]
    keys = np.empty(signatures.shape[0] * bands + simhashes.shape[0] * masks.shape[0], np.uint64)
    k = 0
    for i in range(signatures.shape[0]):
        for band in range(bands):
            acc = offset
            for row in range(band * rows, (band + 1) * rows):
                acc ^= np.uint64(signatures[i, row])
                acc *= multiplier
            keys[k] = _fmix(_fmix(acc) ^ band_mixes[band]) >> shift
            k += 1
    for i in range(simhashes.shape[0]):
        for m in range(masks.shape[0]):
            keys[k] = _fmix((simhashes[i] & masks[m]) ^ simhash_mixes[m]) >> shift
            k += 1
    return keys


def index_keys(signatures: np.ndarray, rows: int, offset: int, multiplier: int, band_mixes: np.ndarray,
               simhashes: np.ndarray, masks: np.ndarray, simhash_mixes: np.ndarray, bits: int) -> np.ndarray:
    """The keys of indexer.index_rows for LSH bands, the same keys in the same order, in one pass: each signature's
    band keys (band b hashes its values from b * rows on, FNV-1a from offset, then is mixed with band_mixes[b]),
    then each SimHash's block keys (masks[m] of it, mixed with simhash_mixes[m]), every key's top bits. numpy's
    dozen array operations made a query's sixty keys in 39 microseconds and a batch of 16,384 texts' in 43 ms;
    index_rows takes 14 microseconds and 20 ms this way."""
    return _index_keys(np.ascontiguousarray(signatures, np.uint16), int(rows), np.uint64(offset),
                       np.uint64(multiplier), np.ascontiguousarray(band_mixes, np.uint64),
                       np.ascontiguousarray(simhashes, np.uint64), np.ascontiguousarray(masks, np.uint64),
                       np.ascontiguousarray(simhash_mixes, np.uint64), np.uint64(64 - bits))
