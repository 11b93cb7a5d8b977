"""Where the master's time goes: py-spy (when installed) or cProfile, summarised as tables.

py-spy is not a project dependency: ``.venv/bin/python -m pip install py-spy`` puts it in
the venv for whoever wants profiles; without it the benchmarks say so and, where asked,
fall back to the master's own cProfile (``bench._master --profile``).

:func:`pyspy_record` samples a running process into collapsed stacks and
:func:`summarise_collapsed` turns them into "self" and "inclusive" shares per function,
plus shares per *area* (a package or file of interest), which is what a report needs.
"""

from __future__ import annotations

import asyncio
import pstats
import shutil
import sys
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["AREAS", "markdown_profile", "pyspy_path", "pyspy_record", "summarise_collapsed"]

# Ordered: the first match names the frame's area.
AREAS: tuple[tuple[str, str], ...] = (
    ("relay/fanout.py", "relay.fanout (outbox, writer)"),
    ("relay/session/", "relay.session (worker, commit, deliver)"),
    ("relay/ws.py", "relay.ws (connection: hello, attach, frames)"),
    ("relay/store/", "relay.store"),
    ("relay/", "relay (other)"),
    ("protocol/codec.py", "protocol.codec (decode, stamp)"),
    ("protocol/state.py", "protocol.state (fold)"),
    ("protocol/", "protocol (other)"),
    ("prometheus_client", "prometheus_client (metrics)"),
    ("structlog", "structlog"),
    ("websockets/", "websockets (framing, reader, writer)"),
    ("picows", "picows (upgrade, framing)"),
    ("asyncio/", "asyncio (event loop, tasks, transports)"),
    ("uvloop", "uvloop"),
    ("redis/", "redis-py"),
)


def pyspy_path() -> str | None:
    """The py-spy binary next to this interpreter or on PATH."""
    local = Path(sys.executable).parent / "py-spy"
    return str(local) if local.exists() else shutil.which("py-spy")


async def pyspy_record(pid: int, seconds: float, out: Path, rate: int = 250) -> Path | None:
    """Sample ``pid`` for ``seconds`` into collapsed stacks at ``out``; None without py-spy."""
    binary = pyspy_path()
    if binary is None:
        return None
    proc = await asyncio.create_subprocess_exec(
        binary, "record", "--pid", str(pid), "--duration", str(max(1, round(seconds))),
        "--rate", str(rate), "--format", "raw", "--output", str(out), "--nonblocking", "--idle",
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        await asyncio.wait_for(proc.wait(), seconds + 30)
    except TimeoutError:
        proc.kill()
        await proc.wait()
        return None
    return out if await asyncio.to_thread(out.exists) else None


def _frame_name(frame: str) -> tuple[str, str]:
    """('func (file:line)' → (func, file))."""
    name, _, rest = frame.partition(" (")
    path = rest.rsplit(":", 1)[0] if rest else ""
    return name, path


def _area(path: str) -> str:
    for needle, label in AREAS:
        if needle in path:
            return label
    return "other (stdlib, C)"


def _short(path: str) -> str:
    checkout = str(Path(__file__).resolve().parent.parent) + "/"
    for marker in ("site-packages/", checkout, "lib/python3.11/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def summarise_collapsed(path: Path, top: int = 15) -> dict[str, Any]:
    """Self and inclusive shares per function and self share per area, from py-spy raw."""
    self_counts: Counter[str] = Counter()
    incl_counts: Counter[str] = Counter()
    area_counts: Counter[str] = Counter()
    idle = 0
    total = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack:
            continue
        count = int(count_text)
        total += count
        frames = stack.split(";")
        leaf_name, leaf_path = _frame_name(frames[-1])
        if leaf_name.endswith(("select", "poll", "epoll_wait")) and "selectors" in leaf_path:
            idle += count
            continue
        label = f"{leaf_name} ({_short(leaf_path)})"
        self_counts[label] += count
        area_counts[_area(leaf_path)] += count
        seen: set[str] = set()
        for frame in frames:
            name, fpath = _frame_name(frame)
            key = f"{name} ({_short(fpath)})"
            if key not in seen:
                seen.add(key)
                incl_counts[key] += count
    busy = total - idle
    if not busy:
        return {"samples": 0}

    def share(counter: Counter[str]) -> list[tuple[str, float]]:
        return [(k, round(100 * v / busy, 1)) for k, v in counter.most_common(top)]

    return {
        "samples": total,
        "idle_pct": round(100 * idle / total, 1),
        "self": share(self_counts),
        "inclusive": share(incl_counts),
        "areas": share(area_counts),
    }


def summarise_cprofile(path: Path, top: int = 15) -> dict[str, Any]:
    """The same shape from a cProfile dump (tottime as self, cumtime as inclusive)."""
    stats = pstats.Stats(str(path))
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    total = sum(v[2] for v in raw.values()) or 1.0
    selfs = sorted(raw.items(), key=lambda kv: kv[1][2], reverse=True)[:top]
    incl = sorted(raw.items(), key=lambda kv: kv[1][3], reverse=True)[:top]
    areas: Counter[str] = Counter()
    for (file, _line, _name), v in raw.items():
        areas[_area(file)] += v[2]

    def label(key: Any) -> str:
        return f"{key[2]} ({_short(key[0])}:{key[1]})"

    return {
        "samples": round(total, 3),
        "self": [(label(k), round(100 * v[2] / total, 1)) for k, v in selfs],
        "inclusive": [(label(k), round(100 * v[3] / total, 1)) for k, v in incl],
        "areas": [(k, round(100 * v / total, 1)) for k, v in areas.most_common(top)],
    }


def markdown_profile(title: str, summary: dict[str, Any], rows: int = 12) -> str:
    """A profile summary as Markdown: areas, then self and inclusive tables."""
    if not summary or not summary.get("samples"):
        return (
            f"_{title}: no profile (py-spy is not installed: "
            "`.venv/bin/python -m pip install py-spy`)._\n"
        )
    lines = [f"#### {title}", ""]
    if "idle_pct" in summary:
        lines.append(
            f"{summary['samples']:,} samples; event loop idle in select: {summary['idle_pct']}%."
        )
        lines.append("")
    lines += ["| area (self time) | % |", "|---|---:|"]
    lines += [f"| {k} | {v} |" for k, v in summary["areas"][:rows]]
    lines += ["", "| function (self time) | % |", "|---|---:|"]
    lines += [f"| `{k}` | {v} |" for k, v in summary["self"][:rows]]
    lines += ["", "| function (inclusive) | % |", "|---|---:|"]
    lines += [f"| `{k}` | {v} |" for k, v in _useful(summary["inclusive"])[:rows]]
    lines.append("")
    return "\n".join(lines)


def _useful(rows: Sequence[tuple[str, float]]) -> list[tuple[str, float]]:
    boring = ("<module>", "run (", "run_forever", "_run_once", "_run (", "main (", "run_until")
    return [r for r in rows if not any(r[0].startswith(b) for b in boring)]
