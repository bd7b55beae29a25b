#!/usr/bin/env python
"""Chart the S-curves of dedupdb's presets: the chance that a pair of documents becomes a candidate against
their Jaccard similarity, for every preset (config.PRESETS) at the given threshold and permutations.

Each preset's candidate scheme and its probability come from the library itself
(database.candidate_scheme and the scheme's probability, the same figures `dedupdb init` prints), so the
chart follows any change of the banding or the super-shingles. The left panel is linear; the right one has a
logarithmic axis, where the chance of unrelated pairs (low Jaccard) can be read.

Usage:
    python scripts/chart_presets.py --chart docs/img/preset-curves.png
    python scripts/chart_presets.py --threshold 0.7 --permutations 128 --chart curves.png

Without --chart it prints the curves at a few similarities. --chart needs matplotlib (the bench extra).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

import dedupdb
from dedupdb.config import PRESETS, SUPER_SHINGLE_VALUES, Settings
from dedupdb.database import candidate_scheme

COLORS = ("tab:blue", "tab:orange", "tab:green", "tab:red")


def preset_curves(threshold: float, num_perm: int, points: int = 401) -> tuple[np.ndarray, list[dict]]:
    """The Jaccard grid and, for every preset these settings allow, its scheme, its curve on the grid and its
    probability at the threshold."""
    jaccard = np.linspace(0.0, 1.0, points)
    curves = []
    for preset in PRESETS:
        if num_perm < SUPER_SHINGLE_VALUES and preset != Settings().preset:
            continue  # super-shingles need their 84 MinHash values
        scheme = candidate_scheme(Settings(threshold=threshold, num_perm=num_perm, preset=preset))
        curves.append({"preset": preset, "scheme": scheme.describe(),
                       "probability": np.asarray(scheme.probability(jaccard), dtype=np.float64),
                       "at_threshold": float(scheme.probability(threshold))})
    return jaccard, curves


def write_chart(path: Path, jaccard: np.ndarray, curves: list[dict], threshold: float, caption: str) -> None:
    """A PNG of the curves: linear on the left, logarithmic on the right. matplotlib is imported here only
    (Agg, no display)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 5.2), dpi=100)
    FigureCanvasAgg(fig)
    linear, log = fig.subplots(1, 2)
    for curve, color in zip(curves, COLORS):
        linear.plot(jaccard, curve["probability"], color=color, linewidth=2,
                    label=f"{curve['preset']}: {curve['scheme']}; at the threshold {curve['at_threshold']:.3g}")
        linear.plot([threshold], [curve["at_threshold"]], "o", color=color, markersize=5)
        inside = (jaccard > 0) & (curve["probability"] > 0)
        log.semilogy(jaccard[inside], curve["probability"][inside], color=color, linewidth=2)
    for ax in (linear, log):
        ax.axvline(threshold, color="tab:gray", linestyle="--", linewidth=1)
        ax.set_xlim(0, 1)
        ax.set_xlabel("Jaccard similarity of the pair")
        ax.grid(True, alpha=0.3)
    linear.text(threshold + 0.01, 0.02, f"threshold {threshold:g}", color="dimgray", fontsize=8)
    linear.set_ylim(0, 1.02)
    linear.set_ylabel("chance of becoming a candidate")
    linear.set_title("S-curves of the presets")
    log.set_ylim(1e-10, 2)
    log.set_ylabel("chance of becoming a candidate (log scale)")
    log.set_title("the same on a log scale: dissimilar pairs")
    fig.text(0.01, 0.01, caption, fontsize=8, color="dimgray", family="monospace")
    fig.legend(*linear.get_legend_handles_labels(), loc="lower center", bbox_to_anchor=(0.5, 0.05), fontsize=9,
               frameon=False)
    fig.tight_layout(rect=(0, 0.16, 1, 1))
    fig.savefig(path, format="png")


def main(argv: list[str] | None = None) -> None:
    defaults = Settings()
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--threshold", type=float, default=defaults.threshold, help="Jaccard threshold of the store")
    parser.add_argument("--permutations", type=int, default=defaults.num_perm, help="MinHash permutations")
    parser.add_argument("--chart", type=Path, default=None, metavar="PATH.png", help="write the PNG chart here")
    args = parser.parse_args(argv)

    jaccard, curves = preset_curves(args.threshold, args.permutations)
    print(f"dedupdb {dedupdb.__version__}: threshold {args.threshold:g}, {args.permutations} permutations")
    shown = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9)
    print(f"{'Jaccard':<9}" + "".join(f"{c['preset']:>16}" for c in curves))
    for j in shown:
        i = int(round(j * (len(jaccard) - 1)))
        print(f"{j:<9g}" + "".join(f"{c['probability'][i]:>16.3g}" for c in curves))
    for c in curves:
        print(f"{c['preset']}: {c['scheme']}; at the threshold {c['at_threshold']:.3g}")
    if args.chart:
        command = " ".join(["python scripts/chart_presets.py", *(argv if argv is not None else sys.argv[1:])])
        write_chart(args.chart, jaccard, curves, args.threshold, command)
        print(f"wrote {args.chart}", file=sys.stderr)


if __name__ == "__main__":
    main()
