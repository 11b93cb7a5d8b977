"""PNG plots of benchmark results, where a curve says more than a number.

Drawn from what the result JSON holds, so a saved result can be plotted again. Matplotlib
comes with the ``bench`` dependency group (``make bench`` installs it); without it the
benchmarks still run and say why no plot was written.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = ["markdown_images", "missing", "percentile_curves", "series_by_x"]

# percentiles a latency curve is drawn through (nearest rank)
CURVE_QS: tuple[float, ...] = (1, 10, 25, 50, 75, 90, 95, 99, 99.5, 99.9, 99.95, 99.99)


def missing() -> str | None:
    """Why no plot can be drawn here, or None."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return "matplotlib is not installed (it comes with `make bench`)"
    return None


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    import matplotlib.pyplot as plt

    return plt


def _nines(q: float) -> float:
    """Position of percentile ``q`` on a "number of nines" axis: 90 → 1, 99 → 2, 99.9 → 3."""
    return -math.log10(max(1e-6, 1 - q / 100))


def percentile_curves(
    path: Path,
    title: str,
    series: Mapping[str, Sequence[Sequence[float]]],
    *,
    unit: str = "ms",
    aims: Sequence[tuple[float, float, str]] = (),
) -> None:
    """One line per series through its ``[percentile, value]`` points, on a nines axis."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    for label, points in series.items():
        pts = [(q, v) for q, v in points if v == v and v > 0]  # drop NaN and zeros (log axis)
        if pts:
            ax.plot([_nines(q) for q, _ in pts], [v for _, v in pts], marker="o", ms=3, label=label)
    for q, value, label in aims:
        ax.plot([_nines(q)], [value], marker="*", ms=12, color="crimson", linestyle="none")
        ax.annotate(label, (_nines(q), value), textcoords="offset points", xytext=(6, 6))
    ticks = [0, 50, 90, 99, 99.9, 99.99]
    ax.set_xticks([_nines(q) for q in ticks], [f"p{q:g}" for q in ticks])
    ax.set_yscale("log")
    ax.set_ylabel(unit)
    ax.set_xlabel("percentile")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def series_by_x(
    path: Path,
    title: str,
    series: Mapping[str, Sequence[Sequence[float]]],
    *,
    x_label: str,
    y_label: str,
    log_x: bool = False,
) -> None:
    """One line per series through its ``[x, y]`` points."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.5), dpi=110)
    for label, points in series.items():
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=label)
    if log_x:
        ax.set_xscale("log")
        xs = sorted({p[0] for points in series.values() for p in points})
        ax.set_xticks(xs, [f"{x:g}" for x in xs])
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.set_ylim(bottom=0)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def markdown_images(result: Mapping[str, Any]) -> list[str]:
    """Markdown lines showing the plots a saved result lists (none when it has none)."""
    lines = []
    for name, caption in result.get("plots", {}).items():
        lines += [f"![{caption}]({name})", ""]
    if result.get("plots_missing"):
        lines += [f"(no plot: {result['plots_missing']})", ""]
    return lines
