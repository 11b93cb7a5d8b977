"""``python -m bench [NAME ...]``: run benchmarks (all by default) and save their results.

Every module of the :mod:`bench` package that defines ``NAME`` and ``run`` is a benchmark (see
the package docstring). Results go to ``bench/results/<NAME>.json`` and ``<NAME>.md``; after
the run, ``summary.md`` collects the headline figures of every saved result.
"""

from __future__ import annotations

import argparse
import importlib
import json
import pkgutil
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import bench
from bench import _plot
from bench._report import summary_markdown

__all__ = ["Benchmark", "discover", "main"]

RESULTS_DIR = Path(__file__).resolve().parent / "results"


@dataclass(frozen=True)
class Benchmark:
    """One registered benchmark module."""

    name: str
    description: str
    run: Callable[[argparse.Namespace], dict[str, Any]]
    markdown: Callable[[dict[str, Any]], str]
    plot: Callable[[dict[str, Any], Path], dict[str, str]] | None = None
    """Writes the benchmark's PNGs into a directory; returns {file name: caption}."""


def discover() -> dict[str, Benchmark]:
    """Every benchmark module of the package, by name."""
    found: dict[str, Benchmark] = {}
    for info in sorted(pkgutil.iter_modules(bench.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"bench.{info.name}")
        if hasattr(module, "NAME") and hasattr(module, "run"):
            found[module.NAME] = _benchmark(module)
    return found


def _benchmark(module: ModuleType) -> Benchmark:
    def plain(result: dict[str, Any]) -> str:
        return "```json\n" + json.dumps(result, indent=2) + "\n```\n"

    return Benchmark(
        name=module.NAME,
        description=getattr(module, "DESCRIPTION", ""),
        run=module.run,
        markdown=getattr(module, "markdown", plain),
        plot=getattr(module, "plot", None),
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmarks named in ``argv`` (all when none); returns the exit status."""
    benchmarks = discover()
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", metavar="NAME", help="benchmarks to run (default: all)")
    parser.add_argument("--list", action="store_true", help="list the benchmarks and exit")
    parser.add_argument(
        "--seconds", type=float, default=1.0, help="target duration of one timed round"
    )
    parser.add_argument("--rounds", type=int, default=5, help="timed rounds per measurement")
    parser.add_argument(
        "--results", type=Path, default=RESULTS_DIR, help="where to write <NAME>.json and .md"
    )
    parser.add_argument("--no-save", action="store_true", help="print only, write no files")
    parser.add_argument(
        "--quick", action="store_true", help="short runs (smaller N, fewer rounds, fewer trials)"
    )
    parser.add_argument(
        "--loop",
        choices=("auto", "asyncio", "uvloop"),
        default="auto",
        help="event loop of the relays under test (auto: uvloop when installed, as rawp serve)",
    )
    parser.add_argument(
        "--no-profile", action="store_true", help="never run the extra profiled rounds"
    )
    parser.add_argument(
        "--sessions",
        type=int,
        default=None,
        metavar="N",
        help="lifecycle: detached sessions per store (default 10,000; --quick 2,000)",
    )
    parser.add_argument(
        "--redis-sessions",
        type=int,
        default=None,
        metavar="N",
        help="lifecycle: detached sessions on Redis (default: --sessions)",
    )
    parser.add_argument(
        "--before", default=None, metavar="REF", help="before_after: the commit to compare with"
    )
    args = parser.parse_args(argv)
    if args.list:
        for name, entry in benchmarks.items():
            print(f"{name:<16} {entry.description}")
        return 0
    unknown = [name for name in args.names if name not in benchmarks]
    if unknown:
        parser.error(f"unknown benchmark(s): {', '.join(unknown)}; known: {', '.join(benchmarks)}")
    for name in args.names or list(benchmarks):
        entry = benchmarks[name]
        print(f"== {name}: {entry.description}", flush=True)
        result = entry.run(args)
        if entry.plot is not None and not args.no_save:
            reason = _plot.missing()
            if reason is None:
                args.results.mkdir(parents=True, exist_ok=True)
                result["plots"] = entry.plot(result, args.results)
            else:
                result["plots_missing"] = reason
        text = entry.markdown(result)
        print(text, flush=True)
        if not args.no_save:
            args.results.mkdir(parents=True, exist_ok=True)
            json_path = args.results / f"{name}.json"
            json_path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
            (args.results / f"{name}.md").write_text(text, encoding="utf-8")
            print(f"wrote {name}.json and {name}.md to {args.results}")
    if not args.no_save and args.results.exists():
        (args.results / "summary.md").write_text(summary_markdown(args.results), encoding="utf-8")
        print(f"wrote summary.md to {args.results}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
