"""The --chart option of the benchmark scripts: each chart-writing function, given tiny made-up figures, writes a
PNG (skipped without matplotlib, which only the bench extra installs)."""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path

import pytest

pytest.importorskip("matplotlib")

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def _script(name: str):
    """scripts/NAME.py as a module (registered, so its dataclasses resolve their module)."""
    module_name = f"_chart_script_{name}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[module_name]
        raise
    return module


def _png_size(path: Path) -> tuple[int, int]:
    """Width and height from a PNG's IHDR chunk, after checking the signature and that the file ends with IEND."""
    data = path.read_bytes()
    assert data[:8] == PNG_SIGNATURE, f"{path} is not a PNG"
    assert data[12:16] == b"IHDR" and data.endswith(b"IEND\xaeB`\x82")
    return struct.unpack(">II", data[16:24])


def test_add_pace_chart(tmp_path):
    bench_query = _script("bench_query")
    path = tmp_path / "pace.png"
    bench_query.write_pace_chart(path, [(500, 0.10), (500, 0.12), (500, 0.15)],
                                 "python scripts/bench_query.py --n 1500\nrecord files of 500 documents")
    width, height = _png_size(path)
    assert width > 300 and height > 200


def test_pace_of_each_tenth_and_its_chart(tmp_path):
    bench_query = _script("bench_query")
    pace = tmp_path / "store.db.pace.jsonl"
    # 20 files of 100 documents, written out of order (a resumed build); each tenth is two files.
    entries = [{"shard": k, "stored": 100 * (k + 1), "docs": 100, "seconds": 1.0 + (k // 2), "peak_pss_mib": 1}
               for k in range(20)]
    pace.write_text("".join(bench_query.json.dumps(e) + "\n" for e in reversed(entries)), encoding="utf-8")
    total, rates = bench_query.pace_tenths(pace)
    assert total == 2000
    assert rates == pytest.approx([200 / (2 * (1.0 + t)) for t in range(10)])
    other = tmp_path / "other.db.pace.jsonl"
    other.write_text("".join(bench_query.json.dumps({**e, "seconds": 0.5}) + "\n" for e in entries), encoding="utf-8")
    path = tmp_path / "tenths.png"
    bench_query.write_tenths_chart(path, [pace, other], "python scripts/bench_query.py --tenths-chart ...")
    width, height = _png_size(path)
    assert width > 300 and height > 200


def test_preset_curves_chart(tmp_path, capsys):
    chart_presets = _script("chart_presets")
    path = tmp_path / "curves.png"
    chart_presets.main(["--threshold", "0.5", "--permutations", "96", "--chart", str(path)])
    width, height = _png_size(path)
    assert width > 300 and height > 200
    out = capsys.readouterr().out
    assert "banding" in out and "super-shingles" in out


def test_preset_curves_are_the_library_schemes():
    from dedupdb.config import PRESETS, Settings
    from dedupdb.database import candidate_scheme

    chart_presets = _script("chart_presets")
    jaccard, curves = chart_presets.preset_curves(0.5, 128, points=11)
    assert [c["preset"] for c in curves] == list(PRESETS)
    for c in curves:
        scheme = candidate_scheme(Settings(threshold=0.5, num_perm=128, preset=c["preset"]))
        assert c["scheme"] == scheme.describe()
        assert c["probability"][5] == pytest.approx(float(scheme.probability(0.5)))
    # Fewer MinHash values than super-shingles need: the default preset alone.
    _, few = chart_presets.preset_curves(0.5, 64, points=11)
    assert [c["preset"] for c in few] == [Settings().preset]


def test_recall_chart(tmp_path):
    eval_precision = _script("eval_precision")
    results = {}
    for k, corpus in enumerate(("reuters", "sophon")):
        results[corpus] = {
            system: {"found": {lvl: 18 - j - k for j, lvl in enumerate(eval_precision.LEVELS)},
                     "variants": {lvl: 20 for lvl in eval_precision.LEVELS}, "false": j, "pairs": 100}
            for j, system in enumerate(("dedupdb", "ds:char3", "ds:word"))
        }
    results["clough"] = {"dedupdb": {"recall": {"cut": 1.0}}}  # other levels: left out of the chart
    path = tmp_path / "recall.png"
    eval_precision.write_chart(path, results, "python scripts/eval_precision.py --quick")
    width, height = _png_size(path)
    assert width > 300 and height > 200
