"""Shared pieces of the benchmark reports: environment, verdicts, figure rows, tables.

Every benchmark result carries ``figures``: one row per headline number with its baseline,
its aim and whether the aim is met. :func:`summary_markdown` collects them from every
``bench/results/*.json`` into ``summary.md``.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import platform
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

__all__ = [
    "environment",
    "figure",
    "figures_table",
    "markdown_footer",
    "now_iso",
    "relay_label",
    "summary_markdown",
    "table",
]


def relay_label(variant: str) -> str:
    """How a report names a relay variant ("baseline", "memory", "redis")."""
    return "minimal relay (baseline)" if variant == "baseline" else f"master, {variant} store"


def markdown_footer(
    result: dict[str, Any], *, profile_title: str = "py-spy profile: {}"
) -> list[str]:
    """The end of a benchmark's report: plots, a skipped Redis variant, the profiles by
    variant (``profile_title`` formatted with the variant), and where and how it was run."""
    from ._plot import markdown_images
    from ._profile import markdown_profile

    env = result["environment"]
    lines = markdown_images(result)
    if result.get("redis_skipped"):
        lines += [f"Redis variant skipped: {result['redis_skipped']}.", ""]
    for variant, summary in result.get("profiles", {}).items():
        lines.append(markdown_profile(profile_title.format(variant), summary))
    load = " ".join(env.get("loadavg_at_start", [])) or "unknown"
    lines += [
        f"Python {env['python']}, websockets {env['websockets']}, msgspec {env['msgspec']}, "
        f"{env['cpus']} CPUs, load average at start {load}; run {result['generated_at']}. "
        f"Reproduce: `{result['command']}`.",
        "",
    ]
    return lines


def now_iso() -> str:
    return dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat()


def environment() -> dict[str, Any]:
    """What the numbers were measured on (load average included: the machine is shared)."""

    def version(name: str) -> str:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            return "-"

    try:
        load = Path("/proc/loadavg").read_text().split()[:3]
    except OSError:
        load = []
    return {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "websockets": version("websockets"),
        "msgspec": version("msgspec"),
        "uvloop": version("uvloop"),
        "machine": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
        "loadavg_at_start": load,
    }


def figure(
    name: str,
    value: float | None,
    unit: str,
    *,
    baseline: float | None = None,
    baseline_label: str = "",
    aim: str = "",
    met: bool | None = None,
    note: str = "",
) -> dict[str, Any]:
    """One headline number."""
    return {
        "name": name,
        "value": value,
        "unit": unit,
        "baseline": baseline,
        "baseline_label": baseline_label,
        "aim": aim,
        "met": met,
        "note": note,
    }


def _num(value: Any) -> str:
    if value is None:
        return "–"
    if isinstance(value, float):
        if value != value:  # NaN
            return "–"
        if abs(value) >= 100:
            return f"{value:,.0f}"
        if abs(value) >= 10:
            return f"{value:,.1f}"
        return f"{value:,.2f}"
    if isinstance(value, int):
        return f"{value:,}"
    return str(value)


def verdict(met: bool | None) -> str:
    return {True: "met", False: "**not met**", None: "–"}[met]


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]], align: str = "") -> str:
    """A Markdown table; numbers formatted with thousands separators."""
    align = align or "l" + "r" * (len(headers) - 1)
    marks = ["---:" if a == "r" else "---" for a in align]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(marks) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(_num(c) for c in row) + " |")
    return "\n".join(lines) + "\n"


def figures_table(figures: Sequence[dict[str, Any]]) -> str:
    """The figures of one benchmark: value, baseline, aim, verdict."""
    rows = []
    for f in figures:
        base = _num(f["baseline"]) + (f" ({f['baseline_label']})" if f["baseline_label"] else "")
        rows.append(
            [f["name"], f"{_num(f['value'])} {f['unit']}", base, f["aim"] or "–", verdict(f["met"])]
        )
    return table(["figure", "value", "baseline", "aim", "verdict"], rows, "lrrll")


def summary_markdown(results_dir: Path) -> str:
    """summary.md: every figure of every saved result, with its command."""
    lines = [
        "# Benchmark summary",
        "",
        "Every figure of the latest saved run of each benchmark (`bench/results/*.json`).",
        "Reproduce one with `make bench ARGS=NAME` (or `.venv/bin/python -m bench NAME`).",
        "",
    ]
    for path in sorted(results_dir.glob("*.json")):
        try:
            result = json.loads(path.read_text())
        except ValueError:
            continue
        figures = result.get("figures")
        name = result.get("benchmark", path.stem)
        when = result.get("generated_at", "?")
        lines.append(f"## {name} ({when})")
        lines.append("")
        if figures:
            lines.append(figures_table(figures))
        else:
            lines.append("(no figures: see the benchmark's own .md)\n")
        cmd = result.get("command")
        if cmd:
            lines.append(f"Command: `{cmd}`\n")
    return "\n".join(lines)
