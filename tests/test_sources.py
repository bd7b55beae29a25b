from __future__ import annotations

import importlib.util

import codecs

import pytest

from dedupdb.errors import ReadError
from dedupdb.text.normalize import normalize
from dedupdb.ingest.sources import decode, html_to_text, looks_binary

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


from hypothesis import example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from dedupdb.text.normalize import normalize_lines  # noqa: E402

_ALPHABET = st.sampled_from(
    list("abcXYZ 12,.!?\t") + list("，。！？（）：；　ＡＢｃ１２") + list("今天氣很好漢語測試们們") + ["\u200b", "ﬁ", "①", "ß", "K", "é", "é"]
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(_ALPHABET, max_size=30), max_size=20))
def test_normalize_lines_matches_normalize(lines):
    assert normalize_lines(lines) == [normalize(line) for line in lines]


def test_normalize_lines_matches_normalize_for_every_character():
    """Each character of the Basic Multilingual Plane (but the newline, which parts lines; half a surrogate pair
    too, which a JSON escape can give), and characters beyond it that case-fold or not, in a few neighbourhoods:
    beside letters of both cases, before a combining mark (one that composes with many letters, and one of a lower
    combining class, which NFKC puts before a mark of a higher one: U+0345 folds to a letter), between spaces of
    other kinds, after a character that folds to two; in lines short and long (collapsed each by itself, or
    together)."""
    codes = [c for c in range(0x10000) if c != 0x0A]
    codes += [0x10400, 0x10428, 0x104B0, 0x1E900, 0x1F600, 0x1F1E6, 0x20000, 0x2F800, 0xE0041]
    import sys

    for shape in ("a{}B", "{}\u0301", "Ab{}\u0323", " \u3000{}\xa0 ", "ß{}Ｃ", "Été  d{}E\t" + "Été  dE\t" * 20, "\u2028 {}" + " ok" * 50):
        lines = [shape.format(chr(c)) for c in codes]
        expected = [normalize(line) for line in lines]
        compiled = sys.modules.pop("dedupdb.sketch.fastsketch", None)
        try:
            assert normalize_lines(lines) == expected, shape  # collapsed by bytes methods
        finally:
            if compiled is not None:
                sys.modules["dedupdb.sketch.fastsketch"] = compiled
        if importlib.util.find_spec("numba") is not None:
            import dedupdb.sketch.fastsketch  # noqa: F401

            assert normalize_lines(lines) == expected, shape  # collapsed by the compiled pass


# Every ASCII character str.split() splits on but the newline (lines hold none), beside letters of both cases.
_ASCII_LINE = st.text(st.sampled_from(list("aB zZ09 ,.") + ["\t", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x1f"]), max_size=30)


@settings(max_examples=300, deadline=None)
@given(st.lists(_ASCII_LINE, max_size=20), st.lists(st.text(_ALPHABET, max_size=10), max_size=3))
def test_normalize_lines_of_ascii_matches_normalize_with_and_without_compiled_code(ascii_lines, other_lines):
    """ASCII lines are folded and collapsed together as bytes, by a compiled pass where the compiled sketching is
    loaded and by bytes methods where it is not: both give normalize() of each line, mixed with other lines."""
    import sys

    lines = ascii_lines + other_lines
    expected = [normalize(line) for line in lines]
    compiled = sys.modules.pop("dedupdb.sketch.fastsketch", None)
    try:
        assert normalize_lines(lines) == expected
    finally:
        if compiled is not None:
            sys.modules["dedupdb.sketch.fastsketch"] = compiled
    pytest.importorskip("numba")
    from dedupdb.sketch import fastsketch

    calls = []

    def counted(data):
        calls.append(len(data))
        return fastsketch.collapse_spaces(data)

    taken = type(sys)("compiled")  # the loaded module as normalize finds it, counting its calls
    taken.collapse_spaces = counted
    sys.modules["dedupdb.sketch.fastsketch"] = taken
    try:
        assert normalize_lines(lines) == expected
    finally:
        sys.modules["dedupdb.sketch.fastsketch"] = fastsketch
    # The compiled pass collapsed the ASCII lines together, and the others that normalize() was not needed for.
    assert (1 if any(line.isascii() for line in lines) else 0) <= len(calls) <= (1 if other_lines else 0) + 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(["ab", "c.", " ", "\n", "\t", "   ", "中", "　"]), max_size=400).map("".join))
@example("word" + " " * 300 + "after a long gap " * 20)  # the short start holds too little: the longer one is needed
@example("x" * 700)
def test_a_snippet_is_the_start_of_the_whole_text_collapsed(raw):
    """snippet() collapses a short start first and the longer one only when that is not enough: the same as
    collapsing the longer start at once."""
    from dedupdb.config import SNIPPET_CHARS
    from dedupdb.ingest.pipeline import snippet

    assert snippet(raw) == " ".join(raw[: SNIPPET_CHARS * 4].split())[:SNIPPET_CHARS]


def test_traditional_and_simplified_agree():
    assert normalize(TRADITIONAL) == normalize("今天天气很好，我们一起去公园散步，看到很多人在湖边钓鱼，孩子们在草地上放风筝。")


def test_the_traditional_to_simplified_pairs_are_kept_and_checked(monkeypatch):
    """OpenCC's one-to-one t2s pairs are kept in the cache folder and read back, not derived again with OpenCC; a
    file there that is not a table of pairs (cut short, empty, another shape) is derived again and replaced."""
    import numpy as np

    from dedupdb.config import cache_dir
    from dedupdb.text import normalize as normalizing

    normalizing._fold_table.cache_clear()
    try:
        derived = normalizing._converted_pairs()
        assert len(derived) > 2000 and [ord("氣"), ord("气")] in derived.tolist()
        assert normalize(TRADITIONAL) == normalize("今天天气很好，我们一起去公园散步，看到很多人在湖边钓鱼，孩子们在草地上放风筝。")
        kept = list(cache_dir().glob("t2s-pairs-*.npy"))
        assert len(kept) == 1 and np.array_equal(np.load(kept[0]), derived)
        calls = []
        monkeypatch.setattr(normalizing, "_converted_pairs", lambda: calls.append(1) or derived.copy())
        normalizing._fold_table.cache_clear()
        assert normalize("天氣") == "天气" and not calls
        for damage in (lambda path: path.write_bytes(path.read_bytes()[:1000]), lambda path: path.write_bytes(b""),
                       lambda path: np.save(path, derived[:, 0].copy()), lambda path: np.save(path, derived[:10])):
            damage(kept[0])
            normalizing._fold_table.cache_clear()
            assert normalize("天氣\u200b") == "天气"
            assert np.array_equal(np.load(kept[0]), derived)  # replaced
        assert len(calls) == 4
    finally:
        normalizing._fold_table.cache_clear()


def test_the_code_point_table_is_kept_and_checked(monkeypatch):
    """The block path's map of code points is kept in the cache folder and read back, not derived again; a file
    there that is not that map is derived again and replaced, and lines beyond ASCII still normalize as one by one."""
    import numpy as np

    from dedupdb.config import cache_dir
    from dedupdb.text import normalize as normalizing

    lines = ["ＡＢＣ  天氣\u2028Straße", "Ǆemal\xa0é", "𐐀 😀 ok"]
    normalizing._code_point_table.cache_clear()
    try:
        derived = normalizing._mapped_code_points()
        assert normalize_lines(lines) == [normalize(line) for line in lines]
        kept = list(cache_dir().glob("code-points-*.npy"))
        assert len(kept) == 1 and np.array_equal(np.load(kept[0]), derived)
        calls = []
        monkeypatch.setattr(normalizing, "_mapped_code_points", lambda: calls.append(1) or derived.copy())
        normalizing._code_point_table.cache_clear()
        assert normalize_lines(lines) == [normalize(line) for line in lines] and not calls
        def zipped(path):  # an archive of arrays, which np.load reads as such, not as one array
            with open(path, "wb") as f:
                np.savez(f, table=derived)

        for damage in (lambda path: path.write_bytes(path.read_bytes()[:1000]), lambda path: path.write_bytes(b""),
                       lambda path: np.save(path, derived[:100]), lambda path: np.save(path, np.arange(0x10000, dtype=np.uint32)),
                       zipped):
            damage(kept[0])
            normalizing._code_point_table.cache_clear()
            assert normalize_lines(lines) == [normalize(line) for line in lines]
            assert np.array_equal(np.load(kept[0]), derived)  # replaced
        assert len(calls) == 5
        # A table that cannot be kept (a folder in its place) is derived each time, and leaves no partial file.
        kept[0].unlink()
        kept[0].mkdir()
        normalizing._code_point_table.cache_clear()
        assert normalize_lines(lines) == [normalize(line) for line in lines] and len(calls) == 6
        assert sorted(p.name for p in cache_dir().glob("code-points-*")) == [kept[0].name]
        kept[0].rmdir()
    finally:
        normalizing._code_point_table.cache_clear()


# --- which files a folder walk takes ----------------------------------------------------------------------

import json  # noqa: E402
import os  # noqa: E402

import dedupdb  # noqa: E402
from dedupdb.ingest import sources  # noqa: E402
from dedupdb.ingest.sources import Candidate, Skipped, WalkRules, walk  # noqa: E402

from .conftest import CHINESE_OTHER, ENGLISH_OTHER, write  # noqa: E402

LICENSE_TEXT = "Permission is hereby granted, free of charge, to any person obtaining a copy of this software."


def _walked(root, rules=WalkRules(), exclude=()):
    found = list(walk(root, rules, exclude))
    taken = {os.path.relpath(c.path, root) for c in found if isinstance(c, Candidate)}
    passed = {os.path.relpath(s.path, root): s.reason for s in found if isinstance(s, Skipped)}
    return taken, passed


@pytest.fixture
def plain_texts(tmp_path):
    """Text files with no known suffix, a text in a binary type's clothes, real binaries with and without one."""
    root = tmp_path / "pkg"
    write(root / "README", ENGLISH)
    write(root / "LICENSE", LICENSE_TEXT)
    write(root / "debian" / "foo.Debian", ENGLISH_OTHER)
    write(root / "MPL-2.0", CHINESE_OTHER, "gb18030")
    write(root / "notes.txt", CHINESE)
    write(root / "text-named.bin", ENGLISH)
    (root / "program").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(range(256)) * 4)
    (root / "data.xyz").write_bytes(bytes(range(256)) * 4)
    (root / "photo.png").write_bytes(b"\x89PNG\r\n\x1a\n" + bytes(100))
    return root


def test_plain_text_without_a_known_suffix_is_found_by_its_content(plain_texts, monkeypatch):
    sniffed = []
    real = sources._not_text
    monkeypatch.setattr(sources, "_not_text", lambda path: sniffed.append(path.name) or real(path))
    taken, passed = _walked(plain_texts)
    assert taken == {"README", "LICENSE", "debian/foo.Debian", "MPL-2.0", "notes.txt"}
    assert passed["program"].startswith("binary") and passed["data.xyz"].startswith("binary")
    # Known types are judged by name, unread.
    assert passed["photo.png"] == passed["text-named.bin"] == "not a text file type"
    assert sorted(sniffed) == ["LICENSE", "MPL-2.0", "README", "data.xyz", "foo.Debian", "program"]


def test_include_adds_to_the_defaults_and_only_replaces_them(plain_texts):
    taken, _ = _walked(plain_texts, WalkRules(include=("*.bin",)))
    assert taken == {"README", "LICENSE", "debian/foo.Debian", "MPL-2.0", "notes.txt", "text-named.bin"}
    taken, passed = _walked(plain_texts, WalkRules(only=("*.txt", "LICENSE")))
    assert taken == {"notes.txt", "LICENSE"} and passed["README"] == "not a text file type"
    taken, _ = _walked(plain_texts, WalkRules(include=("*.bin",), only=("*.txt",)))
    assert taken == {"notes.txt", "text-named.bin"}


def test_cli_include_only_and_plain_texts(cli, plain_texts):
    def added(*options):
        result = cli("add", str(plain_texts), "--format", "json", *options)
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["added"]

    assert added("--only", "*.txt") == 1
    assert added() == 4  # README, LICENSE, foo.Debian, MPL-2.0 join notes.txt
    assert added("--include", "*.bin") == 1
    hits = json.loads(cli("query", LICENSE_TEXT, "--format", "json").stdout)
    assert [os.path.basename(h["key"]) for h in hits] == ["LICENSE"]


def test_library_add_takes_only(db_path, plain_texts):
    with dedupdb.open(db_path) as db:
        summary = db.add([plain_texts], only=("README", "*.Debian"))
    assert sorted(os.path.basename(p) for p in summary.added) == ["README", "foo.Debian"]


# --- symbolic links -----------------------------------------------------------------------------------------


@pytest.fixture
def linked(tmp_path):
    """A folder with links: to a file in it, to a folder outside it, a loop back up, a loop through the outside
    folder, and a broken link."""
    root = tmp_path / "t"
    write(root / "real.txt", ENGLISH)
    write(root / "sub" / "inner.txt", CHINESE)
    write(tmp_path / "outside" / "far.txt", ENGLISH_OTHER)
    os.symlink(root / "real.txt", root / "sub" / "link.txt")
    os.symlink(tmp_path / "outside", root / "sub" / "out")
    os.symlink("..", root / "sub" / "up")
    os.symlink(root / "sub", tmp_path / "outside" / "back")
    os.symlink(root / "nowhere", root / "broken.txt")
    return root


def test_a_named_pipe_given_or_met_is_passed_over_with_its_reason(cli, tmp_path):
    """A named pipe (or a device) is no file to read: given on the command line, as met in a folder, it is listed as
    passed over, never silently dropped nor waited on."""
    folder = tmp_path / "in"
    folder.mkdir()
    write(folder / "note.txt", ENGLISH_OTHER)
    os.mkfifo(folder / "pipe.txt")
    os.mkfifo(tmp_path / "given.jsonl")
    assert [(s.path.name, s.reason) for s in walk(tmp_path / "given.jsonl") if isinstance(s, Skipped)] == [
        ("given.jsonl", "not a regular file")]
    for target in (folder, tmp_path / "given.jsonl"):
        result = cli("add", str(target), "-v")
        assert result.exit_code == 0, result.output
        assert ": not a regular file" in result.output and "skipped 1" in result.output


def test_links_are_skipped_unless_followed(linked):
    taken, passed = _walked(linked)
    assert taken == {"real.txt", "sub/inner.txt"}
    for link in ("sub/link.txt", "sub/out", "sub/up", "broken.txt"):
        assert passed[link] == "symbolic link"


def test_followed_links_are_walked_once_per_path_and_loops_stop(linked):
    found = list(walk(linked, WalkRules(follow_symlinks=True)))
    paths = [os.path.relpath(c.path, linked) for c in found if isinstance(c, Candidate)]
    assert sorted(paths) == ["real.txt", "sub/inner.txt", "sub/link.txt", "sub/out/far.txt"]
    assert len(paths) == len(set(paths))
    passed = {os.path.relpath(s.path, linked): s.reason for s in found if isinstance(s, Skipped)}
    assert passed == {
        "sub/up": "symbolic link loop: leads back to a folder above it",
        "sub/out/back": "symbolic link loop: leads back to a folder above it",
        "broken.txt": "broken symbolic link",
    }


def test_cli_follow_symlinks_and_a_cleanup_keeps_both_link_and_target(cli, linked):
    plain = cli("add", str(linked), "-v")
    assert plain.exit_code == 0, plain.output
    assert f"skipped {linked / 'sub' / 'up'}: symbolic link" in plain.stdout.splitlines()
    result = cli("add", str(linked), "--follow-symlinks", "--format", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["added"] == 2 and summary["unchanged"] == 2  # sub/link.txt and sub/out/far.txt
    hits = json.loads(cli("query", ENGLISH_OTHER, "--format", "json").stdout)
    assert [os.path.relpath(h["key"], linked) for h in hits] == ["sub/out/far.txt"]
    assert {"path": str(linked / "sub" / "up"), "reason": "symbolic link loop: leads back to a folder above it"} in \
        summary["skipped_paths"]
    # A link and its target are one file: reported as linked, never planned for removal.
    cluster = json.loads(cli("report", "--format", "json").stdout)[0]
    assert {os.path.relpath(m["path"], linked) for m in cluster["members"]} == {"real.txt", "sub/link.txt"}
    assert cluster["reclaimable_bytes"] == 0
    plan = json.loads(cli("clean", "--action", "trash", "--format", "json").stdout)
    assert plan["steps"] == [] and len(plan["passed_over"]) == 1


LOOP = "symbolic link loop: leads back to a folder above it"


@pytest.fixture
def nested(tmp_path):
    """A root two folders deep, with links: to its parent (up -> ..), to itself, to the folder above its parent,
    to a sibling folder inside it, and to a folder outside it that holds none of these."""
    top = tmp_path / "top"
    root = top / "mid" / "loop"
    write(top / "top.txt", "a text in the folder two levels above the root")
    for i in range(3):
        write(top / "mid" / f"mid{i}.txt", f"text number {i} in the folder just above the root")
    write(root / "a.txt", ENGLISH)
    write(root / "docs" / "b.txt", CHINESE)
    write(tmp_path / "elsewhere" / "far.txt", ENGLISH_OTHER)
    os.symlink("..", root / "up")
    os.symlink(root, root / "docs" / "itself")
    os.symlink(top, root / "grand")
    os.symlink("docs", root / "sib")
    os.symlink(tmp_path / "elsewhere", root / "far")
    return root


def test_followed_links_never_lead_above_the_root(nested):
    taken, passed = _walked(nested, WalkRules(follow_symlinks=True))
    assert taken == {"a.txt", "docs/b.txt", "sib/b.txt", "far/far.txt"}
    assert passed == {"up": LOOP, "docs/itself": LOOP, "grand": LOOP, "sib/itself": LOOP}


def test_a_root_given_through_a_link_keeps_its_folders_above_out(nested, tmp_path):
    os.symlink(nested, tmp_path / "shortcut")
    taken, passed = _walked(tmp_path / "shortcut", WalkRules(follow_symlinks=True))
    assert taken == {"a.txt", "docs/b.txt", "sib/b.txt", "far/far.txt"}
    assert passed["up"] == passed["grand"] == LOOP


def test_cli_follow_symlinks_adds_nothing_from_above_the_root(cli, db_path, nested):
    result = cli("add", str(nested), "--follow-symlinks", "--format", "json")
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["added"] == 4
    for link in ("up", "grand", "docs/itself", "sib/itself"):
        assert {"path": str(nested / link), "reason": LOOP} in summary["skipped_paths"]
    with dedupdb.open(db_path, create=False) as db:
        paths = {os.path.relpath(row.path, nested) for row in db.store.all_files()}
    assert paths == {"a.txt", "docs/b.txt", "sib/b.txt", "far/far.txt"}
    verbose = cli("add", str(nested), "--follow-symlinks", "-v")
    assert verbose.exit_code == 0, verbose.output
    assert f"skipped {nested / 'up'}: {LOOP}" in verbose.stdout.splitlines()
