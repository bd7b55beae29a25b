"""Sketching in worker processes gives exactly what sketching inline gives."""

from __future__ import annotations

import json

import pytest

import dedupdb
import dedupdb.ingest.pipeline as pipeline
from dedupdb.config import Settings
from dedupdb.sketch.fingerprint import load_compiled, sketch_texts
from dedupdb.ingest.workers import WorkPool
from dedupdb.ingest.records import RecordOptions

from .conftest import CHINESE, CHINESE_EDITED, ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, write


def test_pool_sketches_equal_inline_sketches():
    texts = [f"{ENGLISH} {i}" for i in range(100)] + [f"{CHINESE}{i}" for i in range(100)]
    pool = WorkPool(Settings(), workers=2)
    try:
        remote = pool.submit(sketch_texts, texts).result()
    finally:
        pool.close()
    local = sketch_texts(Settings(), texts)
    assert [(s.content_hash, s.simhash, s.shingles) for s in remote] == [(s.content_hash, s.simhash, s.shingles) for s in local]
    assert all((a.minhash == b.minhash).all() and (a.sketch == b.sketch).all() for a, b in zip(remote, local))


def test_a_pool_spreads_items_over_its_workers_unless_told_not_to():
    pool = WorkPool(Settings(), workers=2)
    try:
        spread = pool.submit(_echo, list(range(100)), part_items=80, min_items=1)
        whole = pool.submit(_echo, list(range(100)), part_items=80, min_items=1, spread=False)
        assert len(spread._futures) == 2 and len(whole._futures) == 2  # 50 + 50, and 80 + 20
        assert [len(f.result()) for f in spread._futures] == [50, 50]
        assert [len(f.result()) for f in whole._futures] == [80, 20]
        assert spread.result() == whole.result() == list(range(100))
    finally:
        pool.close()


def _echo(settings, items):
    return items


def test_ingest_with_workers_matches_ingest_without(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "INGEST_BATCH", 70)
    lines = []
    for i in range(300):
        base = [ENGLISH, ENGLISH_OTHER, CHINESE][i % 3]
        lines.append(json.dumps({"id": i, "text": f"{base} variant {i // 3}"}, ensure_ascii=False))
    lines += [json.dumps({"id": "e", "text": ENGLISH_EDITED}), json.dumps({"id": "c", "text": CHINESE_EDITED})]
    path = write(tmp_path / "corpus.jsonl", "\n".join(lines) + "\n")
    results = []
    for workers in (0, 1):
        with dedupdb.open(tmp_path / f"w{workers}.db") as db:
            summary = db.add([path], records=RecordOptions("jsonl", id_field="id"), workers=workers)
            assert summary.records == 302
            pairs = sorted((p.a.rsplit("#")[-1], p.b.rsplit("#")[-1], p.jaccard, p.hamming) for p in db.pairs())
            clusters = sorted(sorted(m.key.rsplit("#")[-1] for m in c.members) for c in db.clusters())
            results.append((pairs, clusters))
    assert results[0] == results[1]
    assert len(results[0][1]) >= 3


def test_a_large_add_checkpoints_its_log_aside_while_it_writes_its_last_batches(tmp_path, monkeypatch):
    """Once a large add's last input is read, while this process writes the batches still in flight (its workers
    done), the store's log is copied into its file in a thread of its own (Store.checkpoint_aside), once: an add of
    two record files asks for it while it writes the second's, not the first's. The store is whole after, without
    its log, and holds what an add without workers gives."""
    from dedupdb.storage.store import Store

    monkeypatch.setattr(pipeline, "INGEST_BATCH", 40)
    folder = tmp_path / "in"
    for name, base in (("a.jsonl", ENGLISH), ("b.jsonl", CHINESE)):
        lines = [json.dumps({"id": i, "text": f"{base} variant {i // 3} of {name}"}, ensure_ascii=False)
                 for i in range(200)]
        write(folder / name, "\n".join(lines) + "\n")
    asked = []
    checkpoint_aside = Store.checkpoint_aside

    def spy(store):
        before = (tmp_path / "w1.db").stat().st_size
        asked.append(store.counts()["documents"])
        checkpoint_aside(store)
        store._checkpointing.join()
        assert (tmp_path / "w1.db").stat().st_size > before  # committed pages copied into the file already

    monkeypatch.setattr(Store, "checkpoint_aside", spy)
    stored = []
    for workers in (0, 1):
        with dedupdb.open(tmp_path / f"w{workers}.db") as db:
            assert db.add([folder], records=RecordOptions("jsonl", id_field="id"), workers=workers).records == 400
            stored.append(sorted((d.key.rsplit("/", 1)[-1], d.content_id) for d in db.store.documents_of_contents(
                list(range(1, 500)))))
            assert db.check().sound
        assert not (tmp_path / f"w{workers}.db-wal").exists()
    assert stored[0] == stored[1] and len(stored[0]) == 400
    assert len(asked) == 1 and 200 <= asked[0] < 400  # the first file stored, the second's last batches not yet


def test_a_checkpoint_aside_is_one_a_store_and_never_an_error(tmp_path):
    """One checkpoint aside an opening of a store, none for a store opened read-only; one that cannot be made
    (no such file) raises nothing: the close's checkpoint copies what it did not."""
    from dedupdb.storage.connection import checkpoint_passive

    path = write(tmp_path / "corpus.jsonl", "".join(json.dumps({"id": i, "text": f"{ENGLISH} {i}"}) + "\n" for i in range(30)))
    with dedupdb.open(tmp_path / "s.db") as db:
        db.add([path], records=RecordOptions("jsonl", id_field="id"), workers=0)
        db.store.checkpoint_aside()
        first = db.store._checkpointing
        db.store.checkpoint_aside()
        assert first is not None and db.store._checkpointing is first
    assert not first.is_alive() and not (tmp_path / "s.db-wal").exists()
    with dedupdb.Database.open(tmp_path / "s.db", create=False, readonly=True) as db:
        db.store.checkpoint_aside()
        assert db.store._checkpointing is None
    checkpoint_passive(tmp_path / "no folder" / "s.db")
    checkpoint_passive(tmp_path / "gone.db")
    assert not (tmp_path / "gone.db").exists()  # never made


def _compiled_in_cache() -> None:
    """Put the compiled code in numba's cache, as the first add's compiling process leaves it (a fresh machine has
    none, and a test of what an add does with it must not depend on the tests before it)."""
    import subprocess
    import sys

    code = "from dedupdb.ingest.workers import compile_everything\ncompile_everything()"
    ready = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert ready.returncode == 0, ready.stderr


def test_a_large_add_starts_its_workers_before_sketching_anything(tmp_path):
    """Above POOL_AT_ONCE_BYTES the first batch goes to the workers too: this process never sketches, so it never
    loads the segmenter for Chinese text (nor does a fork inherit it); a small add sketches its one batch itself, and
    neither loads jieba's Python code, which only stores of algorithm 6 segment with. Numba
    and the compiled sketching are loaded before the workers are forked, so that they share them with this
    process rather than each load a copy."""
    import subprocess
    import sys

    from dedupdb.ingest import workers as parallel

    pytest.importorskip("numba")
    _compiled_in_cache()

    long_chinese = CHINESE * 6  # long enough for a SimHash, which segments words
    lines = [json.dumps({"id": i, "text": f"{long_chinese} 第{i}次"}, ensure_ascii=False) for i in range(parallel._MIN_PARALLEL + 10)]
    path = write(tmp_path / "corpus.jsonl", "\n".join(lines) + "\n")
    code = (
        "import sys, dedupdb; from dedupdb.ingest import pipeline; from dedupdb.ingest.records import RecordOptions; "
        f"pipeline.POOL_AT_ONCE_BYTES = int(sys.argv[1]); db = dedupdb.open(sys.argv[2]); "
        f"s = db.add([{str(path)!r}], records=RecordOptions('jsonl', id_field='id'), workers=1); "
        "print(s.records, 'rjieba' in sys.modules, 'numba' in sys.modules, 'dedupdb.sketch.fastsketch' in sys.modules, "
        "'jieba' in sys.modules)"
    )
    large = subprocess.run([sys.executable, "-c", code, "1000", str(tmp_path / "a.db")], capture_output=True, text=True)
    small = subprocess.run([sys.executable, "-c", code, str(1 << 40), str(tmp_path / "b.db")], capture_output=True, text=True)
    assert large.stdout.split() == [str(len(lines)), "False", "True", "True", "False"], large.stderr
    small_said = small.stdout.split()
    assert small_said[:2] == [str(len(lines)), "True"] and small_said[-1] == "False", small.stderr


def test_workers_load_the_compiled_sketching_as_they_start():
    """A worker started with load_compiled has the compiled path before its first batch (so never spends numpy's
    memory and time on it), which gives what numpy's path gives; the parent does not load it. A fresh
    interpreter, so nothing is inherited loaded."""
    import subprocess
    import sys

    pytest.importorskip("numba")
    code = (
        "import sys\n"
        "from dedupdb.config import Settings\n"
        "from dedupdb.sketch.fingerprint import Sketcher, load_compiled, sketch_texts\n"
        "from dedupdb.ingest.workers import WorkPool\n"
        "def loaded(settings, items):\n"
        "    return ['dedupdb.sketch.fastsketch' in sys.modules] * len(items)\n"
        "texts = [f'{sys.argv[1]} {i}' for i in range(100)] + [f'{sys.argv[2]}{i}' for i in range(100)]\n"
        "pool = WorkPool(Settings(), 1, load_compiled)\n"
        "first = pool.submit(loaded, list(range(64))).result()\n"
        "remote = pool.submit(sketch_texts, texts).result()\n"
        "pool.close()\n"
        "numpy_path = Sketcher(Settings())\n"
        "numpy_path.FAST_BATCH = 1 << 62\n"
        "local = numpy_path.sketch(texts)\n"
        "same = all(a.content_hash == b.content_hash and a.simhash == b.simhash and a.shingles == b.shingles\n"
        "           and a.tokens == b.tokens and (a.minhash == b.minhash).all() and (a.sketch == b.sketch).all()\n"
        "           and (a.fingerprints == b.fingerprints).all()\n"
        "           and (a.words is None) == (b.words is None)\n"
        "           and (a.words is None or all((x == y).all() for x, y in zip(a.words, b.words)))\n"
        "           for a, b in zip(remote, local))\n"
        "print(all(first), 'dedupdb.sketch.fastsketch' in sys.modules, same)\n"
    )
    _compiled_in_cache()
    done = subprocess.run([sys.executable, "-c", code, ENGLISH, CHINESE], capture_output=True, text=True, timeout=300)
    assert done.stdout.split() == ["True", "False", "True"], done.stderr


def _where(settings, items: list) -> list:
    """Run in a pool: each item with the process that handled it and whether it awaits the compiled sketching."""
    import os

    from dedupdb import compiled

    return [(item, os.getpid(), compiled.awaiting()) for item in items]



def _compile_slowly() -> None:
    """The compile of a process of its own (workers.compile_detached), which a test's patches do not reach: it
    marks the compiled code kept where the test's environment says."""
    import os
    import time
    from pathlib import Path

    from dedupdb.sketch.fingerprint import load_compiled

    time.sleep(1.5)
    load_compiled()
    Path(os.environ["DEDUPDB_TEST_MARKER"]).touch()


def test_workers_sketch_while_another_process_compiles(tmp_path, monkeypatch):
    """Before the compiled code was ever kept in numba's cache (the first run after an install), a process of its
    own (of the lowest priority) compiles it while the workers and this process take numpy's paths; they take it
    once it is there."""
    import os
    import time

    pytest.importorskip("numba")
    from dedupdb import compiled
    from dedupdb.ingest import workers
    from dedupdb.storage import decoding

    marker = tmp_path / "compiled"
    monkeypatch.setattr(compiled, "marker", lambda: marker)
    monkeypatch.setattr(compiled, "_awaiting", False)
    monkeypatch.setenv("DEDUPDB_TEST_MARKER", str(marker))
    monkeypatch.setattr(workers, "compile_everything", _compile_slowly)
    import dedupdb.jit  # noqa: F401  (numba loaded: only the awaiting keeps this process off the compiled decoding)

    texts = [f"{ENGLISH} {i}" for i in range(100)] + [f"{CHINESE}{i}" for i in range(100)]
    pool = WorkPool(Settings(), 1, load_compiled)
    assert compiled.awaiting() and decoding.decoder() is None  # this process awaits it as well
    try:
        early = pool.submit(_where, list(range(100))).result()
        sketched_early = pool.submit(sketch_texts, texts).result()
        waited = time.monotonic()
        while not marker.exists() and time.monotonic() - waited < 120:
            time.sleep(0.1)
        sketched_later = pool.submit(sketch_texts, texts).result()
        after = pool.submit(_where, list(range(100))).result()
    finally:
        pool.close()
    assert marker.exists()  # written by the compiling process: neither the parent nor a worker ran the warm-up
    assert {awaiting for _, _, awaiting in early} == {True}
    assert {awaiting for _, _, awaiting in after} == {False}  # the worker loaded it as it next sketched
    local = sketch_texts(Settings(), texts)
    for sketched in (sketched_early, sketched_later):
        assert [(s.content_hash, s.simhash, s.shingles) for s in sketched] == [(s.content_hash, s.simhash, s.shingles) for s in local]
        assert all((a.minhash == b.minhash).all() and (a.sketch == b.sketch).all() for a, b in zip(sketched, local))
    time.sleep(0.25)  # past the interval between looks for the mark
    assert not compiled.awaiting() and decoding.decoder() is not None  # this process takes it too, never compiled it


def test_an_add_that_awaited_the_compiled_code_takes_it_once_it_is_there(monkeypatch):
    """The writing process of a first add takes numpy's paths while another process compiles; at the first batch
    after the compiled code is in numba's cache it loads it (verifying and decoding), once."""
    from dedupdb import compiled

    loads = []

    class Indexer:
        settings = Settings()

        def load_compiled(self):
            loads.append(compiled.awaiting())

    ingest = pipeline.Ingest.__new__(pipeline.Ingest)
    ingest.indexer, ingest._workers, ingest._pool, ingest._batches, ingest._in_flight = Indexer(), 0, None, 0, pipeline.deque()
    ingest._awaited, ingest._reading_last = True, False
    done = []
    waiting = [True]
    monkeypatch.setattr(compiled, "awaiting", lambda: waiting[0])
    ingest.submit(lambda settings, items: items, [1], done.extend)
    assert loads == [] and done == [1]
    waiting[0] = False
    ingest.submit(lambda settings, items: items, [2], done.extend)
    ingest.submit(lambda settings, items: items, [3], done.extend)
    assert loads == [False] and done == [1, 2, 3]


def test_a_large_batch_query_loads_the_compiled_code_before_it_forks(tmp_path):
    """query_many of more texts than a batch loads numba and the compiled sketching and decoding before its workers
    are forked, as a large add does: they share them. Answers as query() gives them."""
    import subprocess
    import sys

    pytest.importorskip("numba")
    _compiled_in_cache()
    paths = [write(tmp_path / f"t{i}.txt", f"{ENGLISH} {i}") for i in range(5)]
    with dedupdb.open(tmp_path / "q.db") as db:
        db.add(paths, workers=0)
    code = (
        "import sys, dedupdb; db = dedupdb.open(sys.argv[1], create=False); "
        "texts = [sys.argv[2] + ' 1', sys.argv[3]] * 2100; "
        "answers = list(db.query_many(iter(texts), workers=1)); "
        "loaded = [m in sys.modules for m in ('numba', 'dedupdb.sketch.fastsketch', 'dedupdb.storage.fastdecode')]; "
        "print([h.key for h in answers[0].hits] == [h.key for h in db.query(texts[0])] != [], *loaded)"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "q.db"), ENGLISH, ENGLISH_OTHER],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.stdout.split() == ["True"] * 4, done.stderr


_ANSWERING = """if True:
    import sys, threading
    import dedupdb
    import dedupdb.database as database
    from dedupdb import compiled
    from dedupdb.ingest import workers
    database.QUERIES_COMPILED_AFTER_SECONDS = 0.0  # earned by the first query
    db = dedupdb.open(sys.argv[1], create=False)
    texts = [sys.argv[2], sys.argv[3]]
    def keys(text):
        return [(h.key, h.jaccard) for h in db.query(text)]
"""


def test_a_process_answering_queries_loads_the_compiled_code_aside(tmp_path):
    """Once a process answering single queries has earned the compiled code, a thread loads it: the queries asked
    meanwhile are answered on numpy's paths, none waits for numba (before, the query that earned it waited most of
    a second), and once it is loaded single texts take it. Every answer is the same. A fork waits for the thread."""
    import subprocess
    import sys

    pytest.importorskip("numba")
    _compiled_in_cache()
    paths = [write(tmp_path / f"t{i}.txt", f"{ENGLISH} {i}") for i in range(5)]
    with dedupdb.open(tmp_path / "q.db") as db:
        db.add(paths, workers=0)
    code = _ANSWERING + """
    release, started = threading.Event(), threading.Event()
    load = workers._load_for_queries
    def held():
        started.set()
        release.wait()
        load()
    workers._load_for_queries = held
    before = keys(texts[0])
    print(started.wait(60), compiled.loading(), compiled.at_hand())
    during = [keys(t) for t in texts * 3]  # answered while the thread is held, before it imports anything
    print("numba" in sys.modules, "dedupdb.sketch.fastsketch" in sys.modules)
    release.set()
    compiled.settle()
    from dedupdb.sketch import fastsketch
    calls = []
    sketch_parts = fastsketch.sketch_parts
    fastsketch.sketch_parts = lambda texts, *rest: calls.append(len(texts)) or sketch_parts(texts, *rest)
    after = keys(texts[0])
    print(compiled.loading(), compiled.loaded_aside(), compiled.at_hand(), calls == [1])
    print(before == after == during[0] != [], during[1] == keys(texts[1]))
    """
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "q.db"), ENGLISH, ENGLISH_OTHER],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.stdout.split() == ["True", "True", "False", "False", "False", "False", "True", "True", "True",
                                   "True", "True"], done.stderr


def test_a_process_answering_queries_never_compiles_in_a_query(tmp_path):
    """Where the compiled code is still to be compiled (a new install), the process that has earned it starts a
    compile of the lowest priority, once, and answers on numpy's paths until it is there: before, the query that
    earned it compiled, 15 s on two cores."""
    import subprocess
    import sys

    paths = [write(tmp_path / f"t{i}.txt", f"{ENGLISH} {i}") for i in range(3)]
    with dedupdb.open(tmp_path / "q.db") as db:
        db.add(paths, workers=0)
    code = _ANSWERING + """
    started = []
    compiled.cached = lambda: False
    workers.compile_detached = lambda warm_up, soon=False: started.append(warm_up.__name__) or True
    answers = [keys(t) for t in texts * 3]
    print(started == ["compile_everything"], compiled.awaiting(), compiled.loading())
    print("numba" in sys.modules, answers[0] == answers[2] != [])
    """
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "q.db"), ENGLISH, ENGLISH_OTHER],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.stdout.split() == ["True", "True", "False", "False", "True"], done.stderr


def test_a_fork_waits_for_the_thread_loading_aside_and_an_exit_during_it_is_clean():
    """A pool's workers are forked only once the thread loading the compiled code has finished (a child must not
    start with a lock it held); a process that ends while the thread loads ends cleanly."""
    import subprocess
    import sys

    pytest.importorskip("numba")
    _compiled_in_cache()
    code = """if True:
        import sys, time
        from dedupdb import compiled
        from dedupdb.config import Settings
        from dedupdb.ingest import workers
        def slow():
            time.sleep(0.5)
            workers._load_for_queries()
        compiled.load_aside(slow)
        print(compiled.loading())
        pool = workers.WorkPool(Settings(), 1)
        print(compiled.loading(), compiled.loaded_aside())
        pool.close()
    """
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert (done.returncode, done.stdout.split(), done.stderr) == (0, ["True", "False", "True"], "")
    code = """if True:
        from dedupdb import compiled
        from dedupdb.ingest import workers
        compiled.load_aside(workers._load_for_queries)
        print(compiled.loading(), "numba" in __import__("sys").modules or "not yet")
    """
    for _ in range(3):  # ended as numba's import begins, or within it
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
        assert (done.returncode, done.stdout.split()[0], done.stderr) == (0, "True", "")


class _RecordingPool:
    """Stands for WorkPool: records what was submitted, and when each batch's results were asked for."""

    def __init__(self, events):
        self.events = events

    def submit(self, work, items, **parts):
        self.events.append(("submit", items[0]))
        events = self.events

        class Pending:
            def result(self):
                events.append(("result", items[0]))
                return work(None, items)

        return Pending()


class _Settled:
    settings = Settings()


def _bare_ingest(pool):
    ingest = pipeline.Ingest.__new__(pipeline.Ingest)
    ingest.indexer, ingest._workers, ingest._pool, ingest._batches = _Settled(), 1, pool, 5
    ingest._in_flight, ingest._awaited, ingest._reading_last = pipeline.deque(), False, False
    ingest.batch_size = lambda: pipeline.INGEST_BATCH
    return ingest


def test_the_workers_read_batches_ahead_of_the_one_written_and_each_is_written_in_order():
    """While a batch is written, the workers have the next BATCHES_AHEAD to read: one long write or one long read
    then does not idle the other side. Every batch is still written once, in order. Larger batches (a large
    store's) and batches of messages (which may hold tens of MB) keep one ahead."""
    assert pipeline.BATCHES_AHEAD == 2
    events, applied = [], []
    ingest = _bare_ingest(_RecordingPool(events))
    for batch in range(1, 6):
        ingest.submit(_echo, [batch], applied.extend)
    # Batch 1 is written only once 2 and 3 are with the workers.
    assert events[:4] == [("submit", 1), ("submit", 2), ("submit", 3), ("result", 1)]
    assert applied == [1, 2, 3] and len(ingest._in_flight) == 2
    ingest._drain()
    assert applied == [1, 2, 3, 4, 5] and not ingest._in_flight

    for one_ahead in ({"ahead": 1}, {}):
        events.clear()
        applied.clear()
        ingest.batch_size = lambda: pipeline.INGEST_BATCH + (0 if one_ahead else 1)
        for batch in range(1, 4):
            ingest.submit(_echo, [batch], applied.extend, **one_ahead)
        assert events[:3] == [("submit", 1), ("submit", 2), ("result", 1)]
        ingest._drain()
        assert applied == [1, 2, 3]


def test_a_batch_done_inline_first_writes_those_in_flight():
    """Without a pool, a batch is read here: the batches before it, in flight, are written first."""
    events, applied = [], []
    ingest = _bare_ingest(_RecordingPool(events))
    ingest.submit(_echo, [1], applied.extend)
    ingest.submit(_echo, [2], applied.extend)
    ingest._pool, ingest._workers = None, 0
    ingest.submit(_echo, [3], applied.extend)
    assert applied == [1, 2, 3] and not ingest._in_flight


def test_the_pipes_to_and_from_the_workers_are_widened():
    """A worker's result, hundreds of KB, crosses in 1 MiB reads rather than 64 KiB ones (the thread reading it
    waits for the GIL between reads, and the worker waits on it)."""
    fcntl = pytest.importorskip("fcntl")
    if not hasattr(fcntl, "F_GETPIPE_SZ"):
        pytest.skip("pipe sizes are set on Linux")
    pool = WorkPool(Settings(), workers=1)
    try:
        executor = pool._executor
        for pipe in (executor._result_queue._reader, executor._call_queue._reader):
            assert fcntl.fcntl(pipe.fileno(), fcntl.F_GETPIPE_SZ) >= 1 << 20
        assert pool.submit(_echo, list(range(10)), min_items=1).result() == list(range(10))
    finally:
        pool.close()


def _collector_state(settings, items):
    import gc

    return [(gc.get_threshold()[0], gc.get_freeze_count() > 0) for _ in items]


def test_a_bulk_add_or_query_collects_garbage_less_often_then_gives_the_settings_back(tmp_path, monkeypatch):
    """While an add or a batch query runs, young collections come every BULK_GC_THRESHOLD allocations and what was
    alive at its start is frozen out of collections; the process's own settings come back after it, nested uses
    counting as one. A worker keeps the setting for its life."""
    import gc

    from dedupdb.ingest import workers

    monkeypatch.setattr(pipeline, "INGEST_BATCH", 70)
    before = gc.get_threshold()
    assert before[0] < workers.BULK_GC_THRESHOLD and gc.get_freeze_count() == 0
    seen = []
    lines = [json.dumps({"id": i, "text": f"{ENGLISH} variant {i}"}) for i in range(200)]
    path = write(tmp_path / "corpus.jsonl", "\n".join(lines) + "\n")
    with dedupdb.open(tmp_path / "gc.db") as db:
        db.add([path], records=RecordOptions("jsonl", id_field="id"), workers=1,
               progress=lambda *_: seen.append((gc.get_threshold()[0], gc.get_freeze_count() > 0)))
        assert seen and set(seen) == {(workers.BULK_GC_THRESHOLD, True)}
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0
        answers = db.query_many([ENGLISH, CHINESE], workers=0)
        next(answers)
        assert gc.get_threshold()[0] == workers.BULK_GC_THRESHOLD and gc.get_freeze_count() > 0
        assert len(list(answers)) == 1
        assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    with workers.bulk_collections():
        with workers.bulk_collections():
            pass
        assert gc.get_threshold()[0] == workers.BULK_GC_THRESHOLD
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0
    # A process that froze objects of its own keeps them frozen; one that turned young collections off keeps them off.
    gc.freeze()
    try:
        with workers.bulk_collections():
            pass
        assert gc.get_freeze_count() > 0  # not thawed with the add's
    finally:
        gc.unfreeze()
    gc.set_threshold(0, *before[1:])
    try:
        with workers.bulk_collections():
            assert gc.get_threshold()[0] == 0
    finally:
        gc.set_threshold(*before)
    pool = WorkPool(Settings(), workers=1)
    try:
        assert pool.submit(_collector_state, [0, 1], min_items=1).result() == [(workers.BULK_GC_THRESHOLD, True)] * 2
    finally:
        pool.close()
    assert gc.get_threshold() == before


def _niceness(settings, items):
    import os

    return [os.nice(0) for _ in items]


def test_workers_run_below_the_writing_process_one_a_core_by_default(monkeypatch, tmp_path):
    """The writing process sets an add's pace: each worker runs WORKER_NICE below it, so that it takes a core
    whenever it has work; and there is a worker a core."""
    import os

    from dedupdb.ingest import workers

    if not hasattr(os, "nice"):
        pytest.skip("priorities are lowered where os.nice exists")
    mine = os.nice(0)
    for below, expected in ((True, min(19, mine + workers.WORKER_NICE)), (False, mine)):
        pool = WorkPool(Settings(), workers=1, below_the_writer=below)
        try:
            assert pool.submit(_niceness, [0], min_items=1).result() == [expected]
        finally:
            pool.close()
    assert os.nice(0) == mine
    # An add's pool is made so.
    made = []
    monkeypatch.setattr(pipeline, "WorkPool", lambda *a, **k: made.append(k) or WorkPool(*a, **k))
    lines = [json.dumps({"id": i, "text": f"{ENGLISH} variant {i}"}) for i in range(200)]
    monkeypatch.setattr(pipeline, "INGEST_BATCH", 70)
    path = write(tmp_path / "corpus.jsonl", "\n".join(lines) + "\n")
    with dedupdb.open(tmp_path / "nice.db") as db:
        assert db.add([path], records=RecordOptions("jsonl", id_field="id"), workers=1).records == 200
    assert made and made[0]["below_the_writer"] is True
    monkeypatch.setattr(os, "cpu_count", lambda: 6)
    assert workers.default_workers() == 6


@pytest.mark.parametrize("alone", [True, False])
def test_a_process_running_dedupdb_alone_loads_numba_without_scipy_linalg(alone):
    """Numba imports scipy.linalg (16 MB, a few tenths of a second) for BLAS as it first loads compiled code, which
    never calls BLAS: a process that runs dedupdb's work alone (the command line's, a worker) holds it back, and can
    still import it after; a library user's process keeps it, for compiled code of its own."""
    import subprocess
    import sys

    pytest.importorskip("numba")
    pytest.importorskip("scipy.linalg")
    _compiled_in_cache()
    code = (
        "import sys\n"
        "from dedupdb import compiled\n"
        f"if {alone}: compiled.run_alone()\n"
        "from dedupdb.config import Settings\n"
        "from dedupdb.sketch.fingerprint import load_compiled\n"
        "from dedupdb.index.indexer import Indexer\n"
        "loaded = load_compiled()\n"
        "Indexer.load_compiled(None)\n"
        "print(loaded, 'numba.np.arraymath' in sys.modules, 'scipy.linalg' in sys.modules)\n"
        "import scipy.linalg\n"
        "print(scipy.linalg.norm([3.0, 4.0]))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=False)
    assert done.stdout.split() == ["True", "True", str(not alone), "5.0"], done.stderr


def test_a_batch_of_files_is_bounded_by_their_bytes(cli, db_path, tmp_path, monkeypatch):
    """Files go to be read in batches of batch_size() files or FILE_BATCH_BYTES of them, whichever comes first: the
    workers hold a batch's texts at once (200 files of 2.2 MB took an add to 2.1 GB). A batch of a few large files
    is shared out among the workers like one of many small ones."""
    import os

    monkeypatch.setattr(pipeline, "FILE_BATCH_BYTES", 3000)
    batches, spread = [], []
    real_read, real_submit = pipeline.read_files, pipeline.Ingest.submit

    def counted(settings, jobs):
        batches.append([os.path.basename(path) for path, *_ in jobs])
        return real_read(settings, jobs)

    def watched(self, work, items, apply, ahead=None, **parts):
        spread.append(parts.get("min_items"))
        return real_submit(self, work, items, apply, ahead, **parts)

    monkeypatch.setattr(pipeline, "read_files", counted)
    monkeypatch.setattr(pipeline.Ingest, "submit", watched)
    folder = tmp_path / "docs"
    for i in range(10):
        write(folder / f"{i}.txt", f"{i} " + (ENGLISH if i % 2 else ENGLISH_OTHER) + f" {i}" * 300)
    sizes = {p.name: p.stat().st_size for p in folder.iterdir()}
    result = cli("add", str(folder), "--workers", "0", "--format", "json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["added"] == 10
    assert sorted(name for batch in batches for name in batch) == sorted(sizes)
    assert len(batches) > 1
    for batch in batches[:-1]:  # each full once its bytes reach the bound, not before
        assert sum(sizes[n] for n in batch) >= 3000 > sum(sizes[n] for n in batch[:-1])
    assert spread[0] == 1  # 3,000 bytes or more: shared out, however few the files


def test_a_batch_of_records_is_bounded_by_their_bytes(tmp_path, monkeypatch):
    """A record file's batch stops at FILE_BATCH_BYTES of its records too (this process holds a batch's bytes: 200
    records of 1.3 MB took it to 1 GB), and the store is the one an unbounded batch makes."""
    texts = [ENGLISH, ENGLISH_EDITED, CHINESE, CHINESE_EDITED, ENGLISH_OTHER] * 4
    corpus = tmp_path / "posts.jsonl"
    corpus.write_text("".join(json.dumps({"id": i, "text": f"{t} {i % 5}"}) + "\n" for i, t in enumerate(texts)))
    real_submit = pipeline.Ingest.submit

    def stores(bound: int | None) -> tuple[list, list[int]]:
        batches = []

        def watched(self, work, items, apply, ahead=None, **parts):
            if work is pipeline.read_record_chunks:
                batches.append(sum(len(piece.data) for *_, piece in items if not isinstance(piece, list)))
            return real_submit(self, work, items, apply, ahead, **parts)

        monkeypatch.setattr(pipeline.Ingest, "submit", watched)
        if bound is not None:
            monkeypatch.setattr(pipeline, "FILE_BATCH_BYTES", bound)
            monkeypatch.setattr(pipeline, "CHUNK_BYTES", 1)  # a chunk a record
        with dedupdb.open(tmp_path / f"{bound}.db") as db:
            db.add([corpus], records=RecordOptions("jsonl", id_field="id"), workers=0)
            groups = [sorted(m.key.rsplit("#", 1)[1] for m in c.members) for c in db.clusters()]
        return sorted(groups), batches

    whole, one = stores(None)
    bounded, many = stores(700)
    assert len(one) == 1 and len(many) > 3
    assert all(size >= 700 for size in many[:-1])
    assert bounded == whole and len(whole) >= 2
