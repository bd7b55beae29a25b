"""Processes, signals, concurrency and read-only databases.

Workers end with the `add` that started them, even a SIGKILLed one; Ctrl-C, SIGTERM and SIGHUP stop an `add` with
one line and leave a store a rerun completes; processes creating one database at once all succeed; a read-only
database answers questions and refuses writes in one line; a closed standard input and a reader that goes away
(`| head -1`) end cleanly. Real processes are started where real signals are needed; every wait has a deadline,
none is a measurement.
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

import dedupdb
from dedupdb.storage import schema as migrate
from dedupdb.ingest import workers as parallel
from dedupdb.config import INGEST_BATCH, Settings
from dedupdb.errors import DatabaseError, InputError, SettingsError
from dedupdb.ingest.records import RecordOptions
from dedupdb.storage.store import Store

from .conftest import ENGLISH, ENGLISH_EDITED, ENGLISH_OTHER, write

needs_proc = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds worker processes in /proc")
posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX signals and file descriptors")

FILES = 4 * INGEST_BATCH  # enough batches for the workers to start (at the second) and work a while


def _dedupdb(*args: str) -> list[str]:
    return [sys.executable, "-m", "dedupdb", *args]


def _run(*args: str, **kwargs) -> subprocess.CompletedProcess:
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    return subprocess.run(_dedupdb(*args), capture_output=True, text=True, timeout=120, **kwargs)


# --- processes, seen through /proc ---------------------------------------------------------------------------


def _state(pid: int) -> str | None:
    """The process's state letter (R, S, T, Z, ...), or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _alive(pid: int) -> bool:
    return _state(pid) not in (None, "Z", "X")  # a zombie has ended: only its exit status is left


def _children(pid: int) -> list[int]:
    """Living processes whose parent is pid (by scanning /proc, so no kernel option is needed)."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            found.append(int(entry))
    return found


def _wait_until(condition, seconds: float = 15.0, pause: float = 0.02) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(pause)
    return condition()


def _reaches_eof(stream, seconds: float = 15.0) -> bool:
    """Whether everyone holding the pipe's write end lets go of it in time (a reader then sees end of file)."""
    fd = stream.fileno()
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
        if ready and os.read(fd, 1 << 16) == b"":
            return True
    return False


def _kill_leftovers(pids: list[int], process: subprocess.Popen | None = None) -> None:
    """After a failed test: end what it started (the add's own process group, and its workers by pid)."""
    if process is not None and process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


@pytest.fixture(scope="module")
def big_folder(tmp_path_factory) -> Path:
    """FILES small files of distinct text (no pairs to verify, so the batches go quickly)."""
    root = tmp_path_factory.mktemp("big")
    rng = random.Random(11)
    vocabulary = [f"w{i}" for i in range(4000)]
    for i in range(FILES):
        (root / f"{i // 500}").mkdir(exist_ok=True)
        (root / f"{i // 500}" / f"doc{i:05d}.txt").write_text(" ".join(rng.choices(vocabulary, k=40)))
    return root


def _default_signals() -> None:
    """In the child: the stop signals as a terminal's foreground job has them. An ignored signal is inherited
    through exec, and a suite started with nohup, or as a background job (which ignores SIGINT), would hand that
    on: the add then rightly ignores it too, as `nohup dedupdb add` must."""
    for signum in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(signum, signal.SIG_DFL)


def _start_add(folder: Path, db: Path) -> subprocess.Popen:
    """`add` with two workers, in a process group of its own (so a signal can reach all of it, as Ctrl-C does)."""
    return subprocess.Popen(
        _dedupdb("add", str(folder), "--db", str(db), "--workers", "2"),
        stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        preexec_fn=_default_signals,
    )


def _stopped_with_workers(process: subprocess.Popen, whole_group: bool, count: int = 2) -> list[int] | None:
    """Wait for the add's `count` workers, then stop the add (SIGSTOP: its state cannot move on while the test
    acts) and return the workers, alive; None if the add finished before its workers were caught. (Only once
    all are forked: a child being forked while its group is stopped can be left stopped for good.)"""
    while process.poll() is None:
        if len(_children(process.pid)) >= count:
            if whole_group:
                os.killpg(process.pid, signal.SIGSTOP)
            else:
                os.kill(process.pid, signal.SIGSTOP)
            workers = _children(process.pid)
            if len(workers) >= count:
                return workers
            (os.killpg if whole_group else os.kill)(process.pid, signal.SIGCONT)
        time.sleep(0.002)
    return None


def _caught(folder: Path, tmp_path: Path, whole_group: bool) -> tuple[subprocess.Popen, Path, list[int]]:
    for attempt in range(5):
        db = tmp_path / f"caught{attempt}.db"
        process = _start_add(folder, db)
        workers = _stopped_with_workers(process, whole_group)
        if workers:
            return process, db, workers
        process.communicate(timeout=60)
    pytest.fail("the add finished each time before its workers could be caught")


def _assert_sound_after_rerun(folder: Path, db: Path) -> dict:
    rerun = _run("add", str(folder), "--db", str(db), "--workers", "2", "--format", "json")
    assert rerun.returncode == 0, rerun.stderr
    counts = json.loads(rerun.stdout)
    conn = sqlite3.connect(db)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("SELECT count(*) FROM documents").fetchone()[0] == FILES
    finally:
        conn.close()
    return counts


# --- 1. workers end with their parent ------------------------------------------------------------------------


@needs_proc
@posix_only
def test_workers_die_with_a_killed_add_and_free_its_pipe(big_folder, tmp_path):
    process, db, workers = _caught(big_folder, tmp_path, whole_group=False)
    try:
        os.kill(process.pid, signal.SIGKILL)
        process.wait(timeout=30)
        assert _wait_until(lambda: not any(_alive(w) for w in workers)), "workers outlived the add"
        # `dedupdb add big/ | cat`: cat ends once no process holds the pipe (the workers inherited it)
        assert _reaches_eof(process.stdout)
    finally:
        _kill_leftovers(workers, process)
        process.stdout.close()
        process.stderr.close()
    _assert_sound_after_rerun(big_folder, db)


def _pool_facts(settings: Settings, items: list) -> list:
    """Run in a worker: how it treats signals, and what the kernel is to send it when its parent dies."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    deathsig = ctypes.c_int(-1)
    libc.prctl(2, ctypes.byref(deathsig), 0, 0, 0)  # PR_GET_PDEATHSIG
    handlers = tuple(signal.getsignal(s) for s in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM))
    return [(handlers, deathsig.value, os.getpid())] * len(items)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux's")
def test_pool_workers_ignore_signals_and_are_killed_with_their_parent():
    handlers = [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)]
    pool = parallel.WorkPool(Settings(), workers=2)
    try:
        facts = pool.submit(_pool_facts, list(range(200))).result()
    finally:
        pool.close()
    assert {f[1] for f in facts} == {int(signal.SIGKILL)}
    # Ctrl-C and a hang-up are the parent's to handle; SIGTERM (the executor's way to end a broken pool) ends one
    assert {f[0] for f in facts} == {(signal.SIG_IGN, signal.SIG_IGN, signal.SIG_DFL)}
    assert os.getpid() not in {f[2] for f in facts}
    assert [signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)] == handlers  # the parent's
    assert not signal.pthread_sigmask(signal.SIG_BLOCK, [])  # nothing left blocked in the parent


@needs_proc
@posix_only
def test_parent_watch_ends_an_orphan(tmp_path):
    """The fallback where prctl is missing: a thread sees its parent go and ends the process."""
    script = (
        "import os, sys, time\n"
        "parent = os.getpid()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    from dedupdb.ingest.workers import _watch_parent\n"
        "    _watch_parent(parent, 0.02)\n"
        "    print('watching', flush=True)\n"
        "    time.sleep(60)\n"
        "    os._exit(0)\n"
        "print(pid, flush=True)\n"
        "time.sleep(20)\n"
    )
    middle = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    orphan = int(middle.stdout.readline())
    try:
        assert middle.stdout.readline() == "watching\n"  # (were the watch to fail, at the end of the sleep below)
        assert _alive(orphan)
        middle.kill()
        middle.wait(timeout=30)
        assert _wait_until(lambda: not _alive(orphan)), "the orphan outlived its parent"
    finally:
        _kill_leftovers([orphan])
        middle.stdout.close()


@needs_proc
@posix_only
def test_a_killed_worker_is_one_line_and_a_rerun_finishes(big_folder, tmp_path):
    for attempt in range(3):
        (tmp_path / str(attempt)).mkdir()
        process, db, workers = _caught(big_folder, tmp_path / str(attempt), whole_group=True)
        try:
            # Every worker: one killed before it took any work loses none, and the other may then finish the add
            # (the executor looks at its workers' deaths only when no result is waiting), sound but not this test.
            for worker in workers:
                os.kill(worker, signal.SIGKILL)
            os.killpg(process.pid, signal.SIGCONT)
            _, err = process.communicate(timeout=60)
        finally:
            _kill_leftovers(workers, process)
        err = err.decode()
        if process.returncode == 0:
            # Caught only once the workers had done their part (a machine too loaded for the catch): sound, and
            # another try.
            conn = sqlite3.connect(db)
            try:
                assert conn.execute("SELECT count(*) FROM documents").fetchone()[0] == FILES
            finally:
                conn.close()
            continue
        assert process.returncode == 1, err
        assert "Traceback" not in err
        assert [line for line in err.splitlines() if line.strip()] == [
            line for line in err.splitlines() if "worker process ended unexpectedly" in line
        ]
        _assert_sound_after_rerun(big_folder, db)
        return
    pytest.fail("the add finished every time despite its killed workers: they were caught too late")


# --- 2. Ctrl-C, SIGTERM, SIGHUP --------------------------------------------------------------------------------


@needs_proc
@posix_only
@pytest.mark.parametrize(
    "signum, whole_group",
    [(signal.SIGINT, True), (signal.SIGTERM, False), (signal.SIGTERM, True), (signal.SIGHUP, True)],
    ids=["ctrl-c", "sigterm", "sigterm-group", "sighup-group"],
)
def test_a_signal_stops_add_with_one_line_and_a_rerun_resumes(big_folder, tmp_path, signum, whole_group):
    """Ctrl-C reaches the whole foreground process group, workers included; a service manager may signal the
    main process or the group. Either way: one line, exit status 128 + the signal, the store whole."""
    process, db, workers = _caught(big_folder, tmp_path, whole_group=True)
    try:
        (os.killpg if whole_group else os.kill)(process.pid, signum)
        os.killpg(process.pid, signal.SIGCONT)
        out, err = process.communicate(timeout=60)
        assert _wait_until(lambda: not any(_alive(w) for w in workers))
    finally:
        _kill_leftovers(workers, process)
    err = err.decode()
    lines = [line for line in err.splitlines() if line.strip()]
    assert process.returncode == 128 + signum, err
    assert "Traceback" not in err and len(lines) == 1, err
    assert "work committed so far is kept" in lines[0]
    assert out == b""
    counts = _assert_sound_after_rerun(big_folder, db)
    assert counts["added"] + counts["unchanged"] == FILES and counts["failed"] == 0


def test_terminated_is_handled_like_ctrl_c(cli, tmp_path, monkeypatch):
    """In-process: the exception SIGTERM becomes rolls back like Ctrl-C and says so in one line."""
    from dedupdb.cli import commands as cli_module
    from dedupdb.database import Database

    def stopped(self, *args, **kwargs):
        raise cli_module.Terminated(signal.SIGTERM)

    write(tmp_path / "a.txt", ENGLISH)
    monkeypatch.setattr(Database, "add", stopped)
    result = cli("add", str(tmp_path / "a.txt"))
    assert result.exit_code == 128 + signal.SIGTERM
    assert "Stopped by SIGTERM" in result.output and "Traceback" not in result.output


# --- 3. processes creating one database at once ---------------------------------------------------------------


def test_processes_creating_one_database_at_once_all_succeed(tmp_path):
    folders = []
    for p in range(4):
        folder = tmp_path / f"src{p}"
        for i in range(15):
            write(folder / f"{i}.txt", f"process {p} document {i}: {ENGLISH_OTHER if i % 2 else ENGLISH} {p * 100 + i}")
        folders.append(folder)
    for round_ in range(3):
        db = tmp_path / f"shared{round_}.db"
        processes = [
            subprocess.Popen(_dedupdb("add", str(f), "--db", str(db), "--workers", "0"), stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for f in folders
        ]
        results = [(p.wait(timeout=120), p.communicate()[1]) for p in processes]
        assert [code for code, _ in results] == [0] * 4, results
        with dedupdb.open(db, create=False) as database:
            assert database.store.counts()["documents"] == 60
            assert database.store.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
            assert migrate.schema_version(database.store.conn) == len(migrate.available())


def _stored_state(db: Path) -> tuple:
    """What a store holds, by keys and texts rather than row ids: documents, contents with their document counts
    and SimHash, and pairs with their scores."""
    with dedupdb.open(db, create=False) as database:
        report = database.check()
        assert report.sound, report
        conn = database.store.conn
        documents = sorted(conn.execute(
            "SELECT d.key, d.record, d.bytes, c.hash FROM documents d JOIN contents c ON c.id = d.content_id"
        ).fetchall())
        contents = sorted(conn.execute("SELECT hash, documents, chars, shingles, simhash FROM contents").fetchall())
        pairs = sorted((p.a, p.b, p.jaccard, p.hamming, p.exact) for p in database.pairs())
    return documents, contents, pairs


def test_two_adds_of_one_folder_at_once_store_what_one_add_does(tmp_path):
    """Each add decides which files are new before it takes the write lock: the second to take it finds them
    stored meanwhile and counts them unchanged, and leaves a record file the first is reading to it (without
    calling its records duplicates), on a new database and on one holding other files alike."""
    rng = random.Random(5)
    vocabulary = [f"w{i}" for i in range(400)]
    bases = [rng.choices(vocabulary, k=70) for _ in range(10)]
    folder, other = tmp_path / "src", tmp_path / "other"
    for i in range(30):
        words = list(bases[i % 10])
        words[rng.randrange(70)] = f"edit{i}"
        write(folder / f"{i}.txt", " ".join(words))
    write(folder / "records.jsonl", "".join(
        json.dumps({"id": str(i), "text": " ".join(bases[i % 10][i:] + [f"record{i}"])}) + "\n" for i in range(20)
    ))
    for i in range(5):
        write(other / f"{i}.txt", " ".join(bases[i]) + f" other {i}")
    add = ("add", str(folder), "--records", "auto", "--workers", "0")
    holding_other = tmp_path / "other.db"
    assert _run("add", str(other), "--db", str(holding_other)).returncode == 0
    expected = {}
    for kind in ("new", "existing"):
        db = tmp_path / f"reference-{kind}.db"
        if kind == "existing":
            shutil.copy(holding_other, db)
        result = _run(*add, "--db", str(db))
        assert result.returncode == 0, result.stderr
        expected[kind] = _stored_state(db)
        assert expected[kind][2]  # near-duplicate pairs to agree on
    for round_ in range(20):
        kind = ("new", "existing")[round_ % 2]
        db = tmp_path / f"both{round_}.db"
        if kind == "existing":
            shutil.copy(holding_other, db)
        processes = [
            subprocess.Popen(_dedupdb(*add, "--db", str(db)), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
            for _ in range(2)
        ]
        results = [(p.wait(timeout=120), "".join(p.communicate())) for p in processes]
        assert [code for code, _ in results] == [0, 0], (round_, kind, results)
        assert not any("duplicate id" in output for _, output in results), (round_, kind, results)
        assert _stored_state(db) == expected[kind], (round_, kind)


def test_query_beside_the_first_add_never_breaks_it(tmp_path):
    folder = tmp_path / "src"
    for i in range(30):
        write(folder / f"{i}.txt", f"{ENGLISH} {i}")
    for round_ in range(3):
        db = tmp_path / f"q{round_}.db"
        add = subprocess.Popen(_dedupdb("add", str(folder), "--db", str(db), "--threshold", "0.7"),
                               stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        query = subprocess.Popen(_dedupdb("query", ENGLISH, "--db", str(db)), stdin=subprocess.DEVNULL,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _, add_err = add.communicate(timeout=120)
        _, query_err = query.communicate(timeout=120)
        assert add.returncode == 0, add_err
        assert query.returncode == 0 or ("no database at" in query_err or "empty" in query_err), query_err
        assert "Traceback" not in query_err
        with dedupdb.open(db, create=False) as database:
            assert database.settings.threshold == 0.7  # the query wrote no settings of its own


def test_migration_already_applied_by_another_process_is_skipped(db_path, monkeypatch):
    """The version read before the lock can be stale: apply() reads it again under the lock."""
    Store.open(db_path).close()  # "the other process" created and migrated it
    conn = sqlite3.connect(db_path, isolation_level=None)
    real = migrate.schema_version
    calls = []

    def stale_then_real(c):
        calls.append(1)
        return 0 if len(calls) == 1 else real(c)

    monkeypatch.setattr(migrate, "schema_version", stale_then_real)
    try:
        assert migrate.apply(conn, migrate.available()) == 0  # not "table meta already exists"
    finally:
        conn.close()


def test_second_creator_adopts_the_first_ones_settings(db_path, monkeypatch):
    """Two creators both find no settings before the lock; the second, under it, finds the first's."""
    dedupdb.open(db_path, threshold=0.7).close()
    before = sqlite3.connect(db_path).execute("SELECT value FROM meta WHERE key = 'created_at'").fetchone()
    real = Store.read_meta
    state = {"first": True}

    def stale_once(self):
        if state["first"]:
            state["first"] = False
            return {}
        return real(self)

    monkeypatch.setattr(Store, "read_meta", stale_once)
    with dedupdb.open(db_path) as db:
        assert db.settings.threshold == 0.7
    state["first"] = True
    with pytest.raises(SettingsError, match="threshold=0.7"):
        dedupdb.open(db_path, threshold=0.6)
    after = sqlite3.connect(db_path).execute("SELECT value FROM meta WHERE key = 'created_at'").fetchone()
    assert before == after  # written once


def test_reader_of_a_database_without_settings_writes_none(db_path):
    """A creation cut short after the schema, before the settings: readers see an empty store and leave the
    settings to whoever creates it."""
    Store.open(db_path).close()
    with dedupdb.open(db_path, create=False) as db:
        assert db.is_empty()
    assert "setting.threshold" not in dict(sqlite3.connect(db_path).execute("SELECT key, value FROM meta").fetchall())
    with dedupdb.open(db_path, threshold=0.8) as db:
        assert db.settings.threshold == 0.8


def test_reader_of_an_empty_file_does_not_create_a_database(cli, db_path):
    db_path.touch()
    result = cli("stats")
    assert result.exit_code == 1 and "no database at" in result.output and "Traceback" not in result.output
    assert db_path.stat().st_size == 0


# --- 4. read-only databases --------------------------------------------------------------------------------------


@pytest.fixture
def stored(tmp_path, db_path) -> Path:
    folder = tmp_path / "docs"
    write(folder / "a.txt", ENGLISH)
    write(folder / "b.txt", ENGLISH_EDITED)
    write(folder / "c.txt", ENGLISH)
    with dedupdb.open(db_path) as db:
        db.add([folder])
    return folder


def _as_if_read_only(monkeypatch, *paths: Path) -> None:
    """What a user without write permission sees: os.access denies writing. (chmod alone does not stop root,
    under whom these tests may run.)"""
    real = os.access
    denied = {str(p.absolute()) for p in paths}

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and str(Path(path).absolute()) in denied:
            return False
        return real(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


def _read_only_for_real(*paths: Path) -> None:
    for p in paths:
        p.chmod(stat.S_IMODE(p.stat().st_mode) & ~0o222)


@pytest.mark.parametrize("what", ["file", "folder", "both"])
def test_read_only_database_answers_and_refuses_writes_in_one_line(cli, db_path, stored, monkeypatch, what):
    paths = {"file": [db_path], "folder": [db_path.parent], "both": [db_path, db_path.parent]}[what]
    before = db_path.read_bytes()
    real_access = os.access
    _as_if_read_only(monkeypatch, *paths)
    _read_only_for_real(*paths)
    try:
        for command in (["stats"], ["report"], ["query", ENGLISH], ["pairs"], ["export"], ["report", "--format", "json"]):
            result = cli(*command)
            assert result.exit_code == 0, (command, result.output)
        write(stored / "d.txt", ENGLISH_OTHER)  # something to add
        for command in (["add", str(stored)], ["clean", "--action", "trash", "--yes"], ["rm", str(stored / "a.txt")]):
            result = cli(*command)
            assert result.exit_code == 1, (command, result.output)
            assert "Traceback" not in result.output
            errors = [line for line in result.output.splitlines() if line.startswith("Error:")]
            assert len(errors) == 1 and "read-only" in errors[0], result.output
        assert (stored / "b.txt").exists() and (stored / "c.txt").exists()  # clean touched nothing
    finally:
        for p in paths:
            p.chmod(p.stat().st_mode | 0o200)
    assert db_path.read_bytes() == before
    assert not Path(str(db_path) + "-wal").exists()  # read as immutable: no -wal or -shm left for its owner
    monkeypatch.setattr(os, "access", real_access)
    with dedupdb.open(db_path) as db:  # writable again
        assert db.store.readonly is False
        assert db.add([stored]).counts()["added"] == 1


def test_read_only_database_in_the_library(db_path, stored, monkeypatch):
    _as_if_read_only(monkeypatch, db_path)
    with dedupdb.open(db_path) as db:
        assert db.store.readonly
        assert db.query(ENGLISH)[0].exact
        assert db.stats()["documents"] == 3
        write(stored / "d.txt", ENGLISH_OTHER)
        with pytest.raises(DatabaseError, match="read-only"):
            db.add([stored])
        with pytest.raises(DatabaseError, match="read-only"):
            db.forget([str(stored / "a.txt")])
        assert db.stats()["documents"] == 3


def test_opened_read_only_on_request(db_path, stored):
    with dedupdb.open(db_path, readonly=True) as db:
        assert db.store.readonly and len(db.clusters()) == 1
        with pytest.raises(DatabaseError, match="read-only"):
            db.reindex(0.6)
    with pytest.raises(DatabaseError, match="no database"):
        dedupdb.open(db_path.with_name("absent.db"), readonly=True)


def test_read_only_database_that_needs_a_migration_says_so(db_path, stored, monkeypatch):
    conn = sqlite3.connect(db_path, isolation_level=None)
    conn.execute(f"PRAGMA user_version = {len(migrate.available()) - 1}")
    conn.close()
    _as_if_read_only(monkeypatch, db_path)
    with pytest.raises(DatabaseError, match="read-only.*upgrade"):
        dedupdb.open(db_path)


def test_new_database_in_a_read_only_folder(runner, tmp_path, monkeypatch):
    from dedupdb.cli.commands import app

    folder = tmp_path / "locked"
    folder.mkdir()
    write(tmp_path / "a.txt", ENGLISH)
    _as_if_read_only(monkeypatch, folder)
    result = runner.invoke(app, ["add", str(tmp_path / "a.txt"), "--db", str(folder / "new.db")])
    assert result.exit_code == 1 and "read-only" in result.output and "Traceback" not in result.output
    assert list(folder.iterdir()) == []


def _as_nobody() -> list[str] | None:
    """A command prefix that runs a program as the user 'nobody', where these tests run as root and one works."""
    import shutil

    setpriv = shutil.which("setpriv")
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or setpriv is None:
        return None
    try:
        import pwd

        entry = pwd.getpwnam("nobody")
    except (ImportError, KeyError):
        return None
    prefix = [setpriv, f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}", "--clear-groups"]
    try:
        probe = subprocess.run([*prefix, sys.executable, "-c", "import dedupdb"], capture_output=True, cwd="/",
                               timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    return prefix if probe.returncode == 0 else None


@pytest.mark.skipif(os.name != "posix", reason="POSIX permissions")
def test_read_only_for_real_as_an_unprivileged_user(tmp_path):
    """Where the tests run as root, run dedupdb as 'nobody' on a root-owned database: real permissions,
    SQLite's own behaviour. (Run as any other user, the tests above already meet real permissions.)"""
    prefix = _as_nobody()
    if prefix is None:
        pytest.skip("needs root, setpriv and a 'nobody' user that can run this Python")
    import tempfile

    base = Path(tempfile.mkdtemp(prefix="dedupdb-ro-"))  # outside pytest's private tmp folders
    try:
        base.chmod(0o755)
        (base / "home").mkdir(mode=0o777)
        folder, db = base / "docs", base / "store" / "x.db"
        write(folder / "a.txt", ENGLISH)
        write(folder / "b.txt", ENGLISH)
        with dedupdb.open(db) as database:
            database.add([folder])
        before = db.read_bytes()
        db.chmod(0o444)
        db.parent.chmod(0o755)  # root's: neither file nor folder writable by nobody
        env = {**os.environ, "HOME": str(base / "home"), "XDG_DATA_HOME": str(base / "home"),
               "XDG_CACHE_HOME": str(base / "home")}

        def as_nobody(*args: str) -> subprocess.CompletedProcess:
            return subprocess.run([*prefix, *_dedupdb(*args, "--db", str(db))], capture_output=True, text=True,
                                  env=env, cwd="/", stdin=subprocess.DEVNULL, timeout=120)

        for command in (["stats"], ["query", ENGLISH], ["report"], ["pairs"]):
            result = as_nobody(*command)
            assert result.returncode == 0, (command, result.stderr)
        write(folder / "c.txt", ENGLISH_OTHER)
        result = as_nobody("add", str(folder))
        assert result.returncode == 1 and "read-only" in result.stderr and "Traceback" not in result.stderr
        assert len(result.stderr.strip().splitlines()) == 1
        db.parent.chmod(0o777)  # a folder nobody may write, the file still not: no -wal, -shm left behind
        assert as_nobody("stats").returncode == 0
        assert sorted(p.name for p in db.parent.iterdir()) == ["x.db"]
        assert db.read_bytes() == before
    finally:
        import shutil

        shutil.rmtree(base, ignore_errors=True)


# --- 5. standard input closed ------------------------------------------------------------------------------------


@posix_only
@pytest.mark.parametrize(
    "args",
    [["query", "-"], ["filter"], ["add", "-", "--records", "lines"]],
    ids=["query", "filter", "add-records"],
)
def test_closed_standard_input_is_one_line(db_path, args):
    if args[0] != "filter":
        args = [*args, "--db", str(db_path)]
        if args[0] == "query":
            write(db_path.parent / "a.txt", ENGLISH)
            assert _run("add", str(db_path.parent / "a.txt"), "--db", str(db_path)).returncode == 0
    result = subprocess.run(_dedupdb(*args), capture_output=True, text=True, timeout=60,
                            preexec_fn=lambda: os.close(0))
    assert result.returncode == 1, result.stderr
    assert result.stderr.strip() == "Error: standard input is closed"


def test_closed_standard_input_in_the_library(db_path, monkeypatch):
    monkeypatch.setattr(sys, "stdin", None)
    with dedupdb.open(db_path) as db:
        with pytest.raises(InputError, match="standard input is closed"):
            db.add(["-"], records=RecordOptions("lines"))


# --- 6. a reader that goes away --------------------------------------------------------------------------------------


@pytest.fixture
def many_pairs(tmp_path, db_path) -> Path:
    """800 pairs of near-identical records: every listing is far longer than a pipe holds (64 KiB)."""
    rng = random.Random(3)
    vocabulary = [f"word{i}" for i in range(5000)]
    lines = []
    for g in range(800):
        words = rng.choices(vocabulary, k=30)
        for v in range(2):
            lines.append(json.dumps({"id": f"{g}-{v}", "text": " ".join(words[:-1] + [f"end{v}"])}))
    corpus = write(tmp_path / "corpus.jsonl", "\n".join(lines) + "\n")
    with dedupdb.open(db_path) as db:
        db.add([corpus], records=RecordOptions("jsonl", text_field="text", id_field="id"), workers=0)
    return db_path


@posix_only
@pytest.mark.parametrize(
    "args",
    [["pairs"], ["pairs", "--format", "csv"], ["report"], ["report", "--format", "json"], ["export"],
     ["export", "--format", "lines"]],
    ids=lambda a: "-".join(a),
)
def test_output_reader_going_away_ends_quietly(many_pairs, args):
    """`dedupdb pairs | head -1`: exit status 0, nothing on stderr (no 'Exception ignored', no traceback)."""
    process = subprocess.Popen(_dedupdb(*args, "--db", str(many_pairs)), stdin=subprocess.DEVNULL,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = process.stdout.readline()
    process.stdout.close()  # what head does after its line
    _, err = process.communicate(timeout=60)
    assert first.strip()
    assert process.returncode == 0, err.decode()
    assert err.decode().strip() == ""


def test_listing_is_longer_than_a_pipe(many_pairs):
    """What makes the test above meaningful: each output overflows the pipe, so the writer meets the closed end."""
    for args in (["pairs"], ["report"], ["export"]):
        result = _run(*args, "--db", str(many_pairs))
        assert result.returncode == 0 and len(result.stdout.encode()) > 2 * 65536, (args, len(result.stdout))


def record_compile() -> None:
    """A stand-in for the compile: writes its pid and priority where the test said (module level, for a process
    of its own to import)."""
    target = os.environ["DEDUPDB_TEST_COMPILE_OUT"]
    try:  # Linux's group of the process's session, "/autogroup-N nice K", where the kernel has them
        with open("/proc/self/autogroup") as group:
            group_nice = int(group.read().split()[-1])
    except OSError:
        group_nice = 19
    with open(target + ".tmp", "w") as out:
        out.write(f"{os.getpid()} {os.nice(0)} {group_nice}")
    os.replace(target + ".tmp", target)


def test_the_compile_runs_once_at_the_lowest_priority_and_clears_its_mark(tmp_path, monkeypatch):
    import time

    from dedupdb import compiled
    from dedupdb.ingest.workers import compile_detached

    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path / "numba"))
    compiled.marker.cache_clear()
    out = tmp_path / "compiled.txt"
    monkeypatch.setenv("DEDUPDB_TEST_COMPILE_OUT", str(out))
    try:
        assert compile_detached(record_compile)
        assert not compile_detached(record_compile)  # one at a time: the mark says a compile is under way
        for _ in range(200):
            if out.exists() and not compiled.compiling_mark().exists():
                break
            time.sleep(0.05)
        pid, priority, group_priority = map(int, out.read_text().split())
        # The session's group niced too: else the kernel gives it the share of any session (half of two cores).
        assert pid != os.getpid() and priority == 19 and group_priority == 19
        assert not compiled.compiling_mark().exists()
        # For a large add, the process is niced within its session alone, which keeps the share of one.
        out.unlink()
        assert compile_detached(record_compile, soon=True)
        for _ in range(200):
            if out.exists() and not compiled.compiling_mark().exists():
                break
            time.sleep(0.05)
        pid, priority, group_priority = map(int, out.read_text().split())
        assert priority == 19 and (group_priority == 0 or not os.path.exists("/proc/self/autogroup"))
    finally:
        compiled.marker.cache_clear()


# --- the end of a command: at once, with what the interpreter's exit does that anyone could see ---------------

_ENDING = """
import atexit, os, sys, threading, time
from pathlib import Path

out = Path(sys.argv[1])
# Called by the interpreter's own exit (threading._shutdown), first thing, and by nothing else.
threading._register_atexit(lambda: (out / "usual-exit").write_text("yes"))
atexit.register(lambda: (out / "exit-function").write_text("ran"))
atexit.register(lambda: sys.stdout.write("written by an exit function"))  # flushed only if flushed after them
def until_the_end():  # runs until the main thread is over, whatever the command's length
    while threading.main_thread().is_alive():
        time.sleep(0.01)
    (out / "thread").write_text("done")
if sys.argv[2] == "thread":
    threading.Thread(target=until_the_end).start()
sys.argv = ["dedupdb", *sys.argv[3:]]
from dedupdb.cli import run
run()
"""


@pytest.mark.parametrize("thread", [False, True], ids=["alone", "with-a-thread"])
def test_a_command_ends_at_once_with_its_output_status_and_exit_functions(many_pairs, tmp_path, thread):
    """The command line ends without the interpreter's teardown (0.19 s after an add of 100,000 reviews): its
    whole output flushed, its exit status, the exit functions run. A thread still running keeps the usual exit,
    which waits for it. The usual exit is seen by a function only it calls (threading's exit functions, which a
    finalizer at teardown, not always run, could not show)."""
    listing = _run("export", "--db", str(many_pairs)).stdout
    buffered = {name: value for name, value in os.environ.items() if name != "PYTHONUNBUFFERED"}
    for args, status in ((["export"], 0), (["query", "--records", str(tmp_path / "absent.jsonl")], 1),
                         (["report", "--no-such-option"], 2)):
        out = tmp_path / f"out-{status}"
        out.mkdir()
        result = subprocess.run([sys.executable, "-c", _ENDING, str(out), "thread" if thread else "alone", *args,
                                 "--db", str(many_pairs)], capture_output=True, text=True, timeout=120,
                                env=buffered, check=False)
        assert result.returncode == status, result.stderr
        assert result.stdout.endswith("written by an exit function")
        assert (out / "exit-function").read_text() == "ran"
        if status == 0:
            assert result.stdout == listing + "written by an exit function" and len(listing) > 2 * 65536
        else:
            assert result.stderr.startswith("Error: ") and len(result.stderr.strip().splitlines()) == 1
        assert (out / "thread").exists() == thread
        assert (out / "usual-exit").exists() == thread


def test_the_program_ends_at_once_and_main_raises_system_exit(tmp_path):
    """`dedupdb` (the console script) and `python -m dedupdb` run the command line as a program, which ends at
    once (cli.run); cli.main ends in SystemExit, so that a caller goes on after it."""
    import importlib
    import re

    from dedupdb.cli import commands

    project = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    scripts = project.split("[project.scripts]", 1)[1].split("\n[", 1)[0]
    module, name = re.search(r'^dedupdb = "([\w.]+):(\w+)"', scripts, re.MULTILINE).groups()
    assert getattr(importlib.import_module(module), name) is commands.run
    assert "run()" in (Path(commands.__file__).parents[1] / "__main__.py").read_text()
    script = ("import sys\nfrom dedupdb.cli import main\nsys.argv = ['dedupdb', '--version']\n"
              "try:\n    main()\nexcept SystemExit as exc:\n    print('went on after', exc.code)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert result.stdout.strip().endswith("went on after 0"), result.stderr


def test_a_profiled_command_keeps_the_usual_exit(tmp_path):
    """`python -m cProfile -o FILE -m dedupdb ...` writes its profile once the command is over: a process with a
    profiler (or a tracer) keeps the interpreter's own exit."""
    profile = tmp_path / "add.prof"
    (tmp_path / "note.txt").write_text(ENGLISH)
    result = subprocess.run([sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "dedupdb", "--db",
                             str(tmp_path / "x.db"), "add", str(tmp_path / "note.txt")], capture_output=True, text=True,
                            timeout=120, check=False)
    assert result.returncode == 0, result.stderr
    assert profile.stat().st_size > 0


def test_the_compiled_codes_mark_changes_with_its_sources_and_numba(tmp_path, monkeypatch):
    """The mark that says the compiled code is in numba's cache names the sources and numba as installed: an edit
    of a source, or another numba, wants another compile. Numba is known by its package's first file, so a
    process need not read the package metadata (importlib.metadata) to open a store."""
    import importlib.util

    from dedupdb import compiled

    first = tmp_path / "numba" / "__init__.py"
    first.parent.mkdir()
    first.write_text("__version__ = '1'\n")
    found = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: importlib.machinery.ModuleSpec(name, None, origin=str(first))
                        if name == "numba" else found(name, *a))
    before = compiled._stamp()
    assert str(first) in before
    first.write_text("__version__ = '2.0'\n")  # another numba installed over it
    assert compiled._stamp() != before
    monkeypatch.setattr(importlib.util, "find_spec", found)
    source = tmp_path / "fastsketch.py"  # a source of the compiled code, as the stamp finds it
    source.write_text("x = 1\n")
    monkeypatch.setattr(compiled, "_SOURCES", (*compiled._SOURCES, str(source)))
    stamp = compiled._stamp()
    source.write_text("x = 2 # edited\n")
    assert compiled._stamp() != stamp
    assert "importlib.metadata" not in subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "from dedupdb import compiled; compiled.marker()"],
        capture_output=True, text=True, timeout=60, check=False).stderr


def test_what_compiled_code_needs_is_loaded_before_workers_are_forked():
    """A process that loads numba for its workers loads numpy.ma too, which numba's typing of an array asks for
    at the first call: workers forked after it find it loaded, rather than each loading it at its first batch."""
    script = ("import sys\nfrom dedupdb.ingest.workers import load_numba\n"
              "load_numba()\nprint('numba' in sys.modules, 'numpy.ma' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert result.stdout.split() == ["True", "True"], result.stderr


def test_a_database_another_add_is_creating_is_not_taken_for_another_programs(tmp_path, monkeypatch):
    """Opening a new database reads its schema version, then, at version 0, whether it holds tables (another
    program's file is refused). Read one after the other, a second add creating the same database could commit
    its first tables in between (one round in twenty of the test above, on CI), and the first took the file for
    another program's. Both are read in one transaction now: a write between them waits for it."""
    from dedupdb.storage import connection

    path = tmp_path / "new.db"
    calls, blocked = [], []
    real = migrate.schema_version

    def meanwhile(conn):
        version = real(conn)
        calls.append(version)
        if len(calls) == 2:  # the read the tables are judged by: another process commits its first table now
            other = sqlite3.connect(path, timeout=0, isolation_level=None)
            try:
                other.execute("CREATE TABLE files (id INTEGER PRIMARY KEY)")
            except sqlite3.OperationalError as exc:
                blocked.append(str(exc))
            finally:
                other.close()
        return version

    monkeypatch.setattr(migrate, "schema_version", meanwhile)
    conn = connection.connect_writable(path, create=True)
    conn.close()
    assert blocked == ["database is locked"]
