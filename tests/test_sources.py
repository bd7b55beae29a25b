from __future__ import annotations

import codecs

import pytest

from dedupdb.errors import ReadError
from dedupdb.normalize import normalize
from dedupdb.sources import decode, html_to_text, looks_binary

from .conftest import CHINESE, ENGLISH

TRADITIONAL = "今天天氣很好，我們一起去公園散步，看到很多人在湖邊釣魚，孩子們在草地上放風箏。"
JAPANESE = "今日はとても良い天気なので、私たちは公園を散歩して、湖のそばで釣りをしている人をたくさん見ました。"
LATIN = "Café crème, naïve façade: déjà vu à Montréal où l'été est très chaud et très agréable."


@pytest.mark.parametrize(
    "text, raw",
    [
        (ENGLISH, ENGLISH.encode("utf-8")),
        (CHINESE, codecs.BOM_UTF8 + CHINESE.encode("utf-8")),
        (CHINESE, codecs.BOM_UTF16_LE + CHINESE.encode("utf-16-le")),
        (CHINESE, codecs.BOM_UTF16_BE + CHINESE.encode("utf-16-be")),
        (ENGLISH, ENGLISH.encode("utf-16-le")),  # no BOM
        (CHINESE, CHINESE.encode("gb18030")),
        (TRADITIONAL, TRADITIONAL.encode("big5")),
        (JAPANESE, JAPANESE.encode("shift_jis")),
        (LATIN, LATIN.encode("latin-1")),
        (LATIN, LATIN.encode("cp1252")),
    ],
    ids=["utf8", "utf8-bom", "utf16le-bom", "utf16be-bom", "utf16le-nobom", "gb18030", "big5", "shift-jis", "latin1", "cp1252"],
)
def test_decode_detects_encoding(text, raw):
    decoded, encoding = decode(raw)
    assert decoded == text, encoding


def test_bad_bytes_never_crash():
    decoded, _ = decode(ENGLISH.encode() + b"\xff\xfe\xfa" + ENGLISH.encode())
    assert "quarterly" in decoded


def test_binary_is_refused():
    assert looks_binary(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(ReadError, match="binary"):
        decode(bytes(range(256)) * 4)


def test_html_keeps_visible_text_only():
    text = html_to_text(
        "<html><head><title>t</title><style>b{}</style></head>"
        "<body><script>alert(1)</script><p>Fish &amp; chips</p><div>二</div></body></html>"
    )
    assert "alert" not in text and "b{}" not in text
    assert "Fish & chips" in text and "二" in text


def test_normalize_folds_width_case_and_whitespace():
    assert normalize("Ｈｅｌｌｏ，  ＷＯＲＬＤ！\n\t１２３") == normalize("hello, world! 123")
    assert normalize("\ufeffa\u200bb  c") == "ab c"


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from dedupdb.normalize import normalize_lines  # noqa: E402

_ALPHABET = st.sampled_from(
    list("abcXYZ 12,.!?\t") + list("，。！？（）：；　ＡＢｃ１２") + list("今天氣很好漢語測試们們") + ["\u200b", "ﬁ", "①", "ß", "K", "é", "é"]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(_ALPHABET, max_size=30), max_size=20))
def test_normalize_lines_matches_normalize(lines):
    assert normalize_lines(lines) == [normalize(line) for line in lines]


def test_traditional_and_simplified_agree():
    assert normalize(TRADITIONAL) == normalize("今天天气很好，我们一起去公园散步，看到很多人在湖边钓鱼，孩子们在草地上放风筝。")
