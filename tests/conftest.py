from __future__ import annotations

import codecs
import hashlib
import os
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

# Compiled code of test runs stays out of the user's cache folder (isolated_dirs keeps every test out of it), in
# one folder for all runs, so that only the first compiles.
os.environ.setdefault("NUMBA_CACHE_DIR", str(Path(tempfile.gettempdir()) / "dedupdb-tests-numba"))

from dedupdb.cli.commands import app

ENGLISH = (
    "The quarterly report shows that revenue grew by twelve percent while operating costs "
    "remained flat, and the board approved a new dividend policy for shareholders this year."
)
ENGLISH_EDITED = (
    "The quarterly report shows that revenue grew by twelve percent while operating costs "
    "remained flat, and the board approved a new dividend plan for shareholders this year!"
)
ENGLISH_OTHER = (
    "Heavy rain flooded the valley overnight, closing two bridges and forcing the village "
    "school to move its lessons into the town hall until the water recedes next week."
)
CHINESE = "今天天气很好，我们一起去公园散步，看到很多人在湖边钓鱼，孩子们在草地上放风筝，大家都很开心。"
CHINESE_EDITED = "今天天气很好，我们一起去公园散步，看到许多人在湖边钓鱼，孩子们在草地上放风筝，大家都很开心！"
CHINESE_OTHER = "这家酒店的服务态度非常差，房间又小又脏，空调也坏了，前台还不给换房，以后再也不会来了。"


@pytest.fixture(params=["numpy", "compiled"])
def decoding(request, monkeypatch):
    """Stored formats decoded by numpy's path, or by compiled code (fastdecode.py), whichever a process has: a test
    taking this runs once with each."""
    from dedupdb.storage import decoding

    if request.param == "numpy":
        monkeypatch.setattr(decoding, "decoder", lambda: None)
    else:
        from dedupdb.storage import fastdecode

        monkeypatch.setattr(decoding, "decoder", lambda: fastdecode)
    return request.param


@pytest.fixture(autouse=True)
def isolated_dirs(tmp_path_factory, monkeypatch):
    """No test may touch the real user data or cache dirs, nor depend on the terminal's width."""
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(home / "cache"))
    monkeypatch.setenv("COLUMNS", "200")
    monkeypatch.delenv("DEDUPDB_DB", raising=False)
    # send2trash reads XDG_DATA_HOME once, when first imported: point it at this test's home too.
    import send2trash.plat_other as trash

    data = os.fsencode(home / "data")
    monkeypatch.setattr(trash, "XDG_DATA_HOME", data)
    monkeypatch.setattr(trash, "HOMETRASH_B", os.path.join(data, b"Trash"))
    monkeypatch.setattr(trash, "HOMETRASH", str(home / "data" / "Trash"))
    yield home


@pytest.fixture
def db_path(tmp_path) -> Path:
    return tmp_path / "test.db"


@pytest.fixture
def runner() -> CliRunner:
    return CliRunner()


@pytest.fixture
def cli(runner, db_path):
    """Run a dedupdb command against the test database."""

    def run(*args: str, input: str | None = None):
        return runner.invoke(app, [*args, "--db", str(db_path)], input=input)

    return run


def file_hashes(root: Path) -> dict[str, str]:
    """The sha256 of every file under root, by its path relative to root: taken before and after an action."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def write(path: Path, text: str, encoding: str = "utf-8", bom: bytes = b"") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(bom + text.encode(encoding))
    return path


@pytest.fixture
def mixed_folder(tmp_path) -> Path:
    """English and Chinese files in several encodings, HTML, an empty file, a binary file and exact copies."""
    root = tmp_path / "notes"
    write(root / "report.txt", ENGLISH)
    write(root / "copies" / "report copy.txt", ENGLISH)
    write(root / "report-edited.md", ENGLISH_EDITED)
    write(root / "weather.txt", ENGLISH_OTHER)
    write(root / "zh" / "park-gb18030.txt", CHINESE, "gb18030")
    write(root / "zh" / "park-utf16.txt", CHINESE, "utf-16-le", codecs.BOM_UTF16_LE)
    write(root / "zh" / "park-edited.txt", CHINESE_EDITED)
    write(root / "zh" / "hotel.txt", CHINESE_OTHER)
    write(
        root / "page.html",
        f"<html><head><style>p {{color: red}}</style><script>var x = 1;</script></head>"
        f"<body><p>{ENGLISH_OTHER}</p></body></html>",
    )
    write(root / "empty.txt", "")
    (root / "image.txt").write_bytes(bytes(range(256)) * 8)
    (root / "photo.jpg").write_bytes(b"\xff\xd8\xff\xe0" + bytes(200))
    write(root / ".hidden" / "secret.txt", ENGLISH)
    return root


def stored_rows(db_path: Path, family: str = "index"):
    """Every packed row (int64 numpy array) of one family of runs ('index' or 'containment'), read straight from
    the blocks, each decoded on its own (not through the runs' fences)."""
    import sqlite3

    import numpy as np

    from dedupdb.storage.blocks import decode_block

    number = {"index": 0, "containment": 1}[family]
    conn = sqlite3.connect(db_path)
    try:
        blocks = conn.execute(
            "SELECT b.first, b.entries, b.data FROM run_blocks b JOIN runs r ON r.id = b.run WHERE r.family = ?",
            (number,),
        ).fetchall()
    finally:
        conn.close()
    return np.concatenate([decode_block(*block) for block in blocks] or [np.empty(0, np.int64)]).astype(np.int64)


def tamper_rows(db_path: Path, family: str = "index", remove=(), add=()) -> None:
    """Remove and add packed rows of one family behind the indexer's back, as damage would."""
    import numpy as np

    from dedupdb.storage.store import Store

    store = Store.open(db_path, create=False)
    try:
        runs = store._index if family == "index" else store._containment
        with store.transaction():
            if len(remove):
                runs.delete(np.asarray(remove, np.int64))
            if len(add):
                runs.insert(np.asarray(add, np.int64))
    finally:
        store.close()


def interrupt_batch(monkeypatch, at: int, batch: int = 10, commit_seconds: float = 0, after_work: bool = False):
    """Batches of `batch` documents, and a Ctrl-C as batch number `at` is stored (with after_work, once its rows
    are written inside the transaction). Returns resume(), which lets adds finish again."""
    from dedupdb.ingest import pipeline

    monkeypatch.setattr(pipeline, "INGEST_BATCH", batch)
    monkeypatch.setattr(pipeline, "COMMIT_SECONDS", commit_seconds)
    real = pipeline.Indexer.add_documents
    calls = {"n": 0}

    def interrupted(self, documents, *args):
        calls["n"] += 1
        if calls["n"] == at:
            if after_work:
                real(self, documents, *args)
            raise KeyboardInterrupt
        return real(self, documents, *args)

    monkeypatch.setattr(pipeline.Indexer, "add_documents", interrupted)
    return lambda: monkeypatch.setattr(pipeline.Indexer, "add_documents", real)
