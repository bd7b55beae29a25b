"""Fault injection: `add`, `clean --yes` and `undo` killed (SIGKILL) at random points. After a rerun the
store passes `dedupdb check`, holds what an uninterrupted run stores, and every file holds its bytes.

The kill points are drawn from a seed printed with any failure (set DEDUPDB_FAULT_SEED to replay one)."""

from __future__ import annotations

import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

ROUNDS = 3
SEED = int(os.environ.get("DEDUPDB_FAULT_SEED", time.time_ns() % 100_000))


def _corpus(root: Path, bases: int = 400) -> None:
    """Each base text three times: itself, an exact copy elsewhere, and an edited copy."""
    rng = random.Random(7)
    vocabulary = [f"w{i}" for i in range(3000)]
    for i in range(bases):
        words = rng.choices(vocabulary, k=60)
        text = " ".join(words)
        edited = list(words)
        edited[rng.randrange(60)] = "edited"
        for j, (folder, content) in enumerate((("a", text), ("b", text), ("c", " ".join(edited)))):
            path = root / folder / f"{i % 20}" / f"doc{i}.txt"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content)
            os.utime(path, ns=(10**18 + j * 10**9,) * 2)


def _hashes(*roots: Path) -> dict[str, str]:
    return {
        str(p): hashlib.sha256(p.read_bytes()).hexdigest()
        for root in roots if root.exists() for p in root.rglob("*") if p.is_file()
    }


def _run(*args: str, db: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "dedupdb", *args, "--db", str(db)], capture_output=True,
                          text=True, timeout=300, stdin=subprocess.DEVNULL)


def _killed(*args: str, db: Path, after: float) -> None:
    """Start a command and SIGKILL it `after` seconds later (if it is still running)."""
    process = subprocess.Popen([sys.executable, "-m", "dedupdb", *args, "--db", str(db)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
    try:
        process.wait(timeout=after)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait()


def _timed(*args: str, db: Path) -> float:
    started = time.perf_counter()
    result = _run(*args, db=db)
    assert result.returncode == 0, result.stderr
    return time.perf_counter() - started


def _sound(db: Path, note: str, unborn_ok: bool = False) -> None:
    """`dedupdb check` passes; with unborn_ok, a kill while the database was being created may also have left a
    file that holds no database yet (nothing was stored: the rerun creates it)."""
    result = _run("check", db=db)
    if unborn_ok and result.returncode == 1 and "no database at" in result.stderr:
        return
    assert result.returncode == 0, f"{note} (seed {SEED}): {result.stdout}{result.stderr}"


def _numbers(db: Path) -> tuple:
    stats = json.loads(_run("stats", "--format", "json", db=db).stdout)
    pairs = sorted(json.loads(line)["a"] + " " + json.loads(line)["b"] for line in _run("pairs", db=db).stdout.splitlines())
    return stats["documents"], stats["contents"], stats["pairs"], pairs


def test_killed_add_clean_and_undo_lose_nothing(tmp_path):
    rng = random.Random(SEED)
    root = tmp_path / "corpus"
    _corpus(root)
    original = _hashes(root)

    # add: an uninterrupted run is the reference.
    reference = tmp_path / "reference.db"
    full = _timed("add", str(root), db=reference)
    expected = _numbers(reference)
    assert expected[0] == len(original) and expected[2] > 0
    for round_ in range(ROUNDS):
        db = tmp_path / f"add{round_}.db"
        after = rng.uniform(0.1, 0.95) * full
        _killed("add", str(root), db=db, after=after)
        if db.exists():
            _sound(db, f"after add killed at {after:.2f}s", unborn_ok=True)
        assert _run("add", str(root), db=db).returncode == 0
        _sound(db, f"after the rerun of an add killed at {after:.2f}s")
        assert _numbers(db) == expected, f"add killed at {after:.2f}s (seed {SEED})"

    # clean --yes and undo, on the reference store: each round starts from every file in place.
    out = tmp_path / "out"
    clean = ("clean", "--action", "move", "--to", str(out), "--yes")
    clean_time = _timed(*clean, db=reference)
    assert not set(original) <= set(_hashes(root))  # files did move
    undo_time = _timed("undo", db=reference)
    assert _hashes(root) == original and not _hashes(out)
    for round_ in range(ROUNDS):
        after = rng.uniform(0.1, 0.95) * clean_time
        _killed(*clean, db=reference, after=after)
        _sound(reference, f"after clean killed at {after:.2f}s")
        assert sorted(_hashes(root, out).values()) == sorted(original.values()), f"clean killed at {after:.2f}s"
        result = _run("undo", db=reference)  # 'nothing to undo' when the kill came before the journal
        assert result.returncode == 0 or "nothing to undo" in result.stderr, result.stderr
        assert _hashes(root) == original, f"undo after clean killed at {after:.2f}s (seed {SEED})"
        _sound(reference, "after undo")

        assert _run(*clean, db=reference).returncode == 0
        after = rng.uniform(0.1, 0.95) * undo_time
        _killed("undo", db=reference, after=after)
        _sound(reference, f"after undo killed at {after:.2f}s")
        assert sorted(_hashes(root, out).values()) == sorted(original.values()), f"undo killed at {after:.2f}s"
        result = _run("undo", db=reference)
        assert result.returncode == 0 or "nothing to undo" in result.stderr, result.stderr
        assert _hashes(root) == original, f"undo killed at {after:.2f}s, then rerun (seed {SEED})"
        _sound(reference, "after the rerun of undo")
    assert _numbers(reference) == expected  # everything is indexed again where it was


# --- a resumed add stores what an uninterrupted one does ------------------------------------------------------------

# `add` with batches of 100 documents, each committed at once: a kill can land between any two of them. What is
# stored must not depend on where batches begin, so these runs answer for adds of any batch size.
_SMALL_BATCHES = (
    "import sys; import dedupdb.ingest.pipeline as p; p.INGEST_BATCH = 100; p.COMMIT_SECONDS = 0.0; "
    "sys.argv[0] = 'dedupdb'; from dedupdb.cli.commands import main; main()"
)


def _add_small_batches(folder: Path, db: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", _SMALL_BATCHES, "add", str(folder), "--records", "auto",
                             "--workers", "1", "--db", str(db)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)


def _long_texts(root: Path) -> None:
    """Texts long enough for SimHash (60 distinct words and more), words drawn by a Zipf-like law so that their
    weights differ, and edited copies of some: 300 files and a JSONL file of 1,500 records."""
    rng = random.Random(11)
    vocabulary = [f"w{i}" for i in range(4000)]
    weights = [1 / (i + 1) for i in range(len(vocabulary))]
    texts = []
    for i in range(1800):
        if i % 4 == 3:  # an edited copy of an earlier text: a near-duplicate pair
            words = texts[rng.randrange(len(texts))].split()
            for _ in range(rng.randrange(3, 25)):
                words[rng.randrange(len(words))] = rng.choice(vocabulary)
        else:
            words = rng.choices(vocabulary, weights, k=rng.randrange(70, 140))
        texts.append(" ".join(words))
    for i, text in enumerate(texts[:300]):
        path = root / "files" / f"{i % 7}" / f"doc{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    with (root / "records.jsonl").open("w") as f:
        for i, text in enumerate(texts[300:]):
            f.write(json.dumps({"id": str(i), "text": text}) + "\n")


def _stored(db: Path) -> tuple:
    """Everything a store decides, by keys and texts rather than row ids: documents, each text's SimHash, document
    count and cluster (named by the text it is labelled after), and every pair with its Jaccard and distance."""
    import dedupdb

    with dedupdb.open(db, create=False) as database:
        assert database.check().sound
        conn = database.store.conn
        documents = sorted(conn.execute(
            "SELECT d.key, c.hash FROM documents d JOIN contents c ON c.id = d.content_id").fetchall())
        contents = sorted(conn.execute(
            "SELECT c.hash, c.simhash, c.documents, label.hash FROM contents c JOIN contents label ON label.id = c.cluster"
        ).fetchall())
        pairs = sorted((p.a, p.b, p.jaccard, p.hamming, p.exact) for p in database.pairs())
    return documents, contents, pairs


def test_killed_add_resumed_stores_what_an_uninterrupted_add_does(tmp_path):
    from dedupdb.text import weights

    rng = random.Random(SEED)
    _long_texts(tmp_path / "corpus")
    weights._word_table.__wrapped__()  # into this test's cache folder: the timed add below does not derive it
    reference = tmp_path / "reference.db"
    started = time.perf_counter()
    process = _add_small_batches(tmp_path / "corpus", reference)
    assert process.wait(timeout=300) == 0, process.stderr.read()
    process.stderr.close()
    full = time.perf_counter() - started
    expected = _stored(reference)
    assert sum(1 for _, simhash, _, _ in expected[1] if simhash is not None) > 1000
    assert sum(1 for pair in expected[2] if pair[3] is not None and not pair[4]) > 100
    for round_ in range(ROUNDS):
        db = tmp_path / f"resumed{round_}.db"
        after = rng.uniform(0.3, 0.9) * full
        process = _add_small_batches(tmp_path / "corpus", db)
        try:
            process.wait(timeout=after)
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGKILL)
            process.wait()
        process.stderr.close()
        rerun = _add_small_batches(tmp_path / "corpus", db)
        assert rerun.wait(timeout=300) == 0, rerun.stderr.read()
        rerun.stderr.close()
        documents, contents, pairs = _stored(db)
        note = f"add killed at {after:.2f}s of {full:.2f}s (seed {SEED})"
        assert documents == expected[0], note
        assert contents == expected[1], note
        assert pairs == expected[2], note
