"""The TypeScript SDK as an edge at a 5,000 frames/s session, beside the Python client library.

One pacing client (``bench._loadgen pace``: :class:`bench._workload.AgentStream` at 5,000
frames/s, each frame stamped with CLOCK_MONOTONIC just before the write) and two edges in
their own processes on the same session of a master with the memory store:

* the TypeScript SDK in Node (``sdk/typescript/bench/edge-bench.ts``: ``RawpClient`` with
  ``ws``; every frame is parsed, validated against the schemas and folded into the
  ``SessionView`` before its latency is taken);
* the Python client library (:class:`protocol.client.RawpClient`, this module's
  ``--worker``; the stamp is read from the raw message, then the client decodes and folds it).

Both report delivery latency (receive − send stamp) p50 / p99 / p99.9 over the recording
window (after 0.5 s of warm-up) and whether they kept up (every stamped frame sent arrived).
Needs Node >= 20 and the SDK's dev dependencies (``npm ci`` in sdk/typescript, done here when
``node_modules`` is missing); skipped with the reason otherwise.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import time
from array import array
from typing import Any, Final

from ._procs import (
    API_KEY,
    PYTHON,
    ROOT,
    UNTHROTTLED,
    Worker,
    _spawn,
    percentiles,
    start_master,
    start_worker,
)
from ._report import environment, figure, figures_table, markdown_footer, now_iso, table
from ._workload import read_stamp

__all__ = ["DESCRIPTION", "NAME", "markdown", "run"]

NAME: Final = "sdk_edge"
DESCRIPTION: Final = "TypeScript SDK edge vs Python client edge at 5,000 frames/s: p50/p99"
RATE: Final = 5000
SDK_DIR: Final = ROOT / "sdk" / "typescript"
EDGE_JS: Final = SDK_DIR / "dist" / "bench" / "edge-bench.js"
AIM_P99_MS: Final = 5.0


def _build_sdk() -> str | None:
    """Build the SDK's bench script; returns why it cannot run, or None."""
    node = shutil.which("node")
    npm = shutil.which("npm")
    if node is None or npm is None:
        return "node/npm not found (Node >= 20 is needed)"
    major = subprocess.run(
        [node, "-p", "process.versions.node.split('.')[0]"], capture_output=True, text=True
    )
    if major.returncode != 0 or int(major.stdout.strip() or 0) < 20:
        return f"Node >= 20 is needed (found {major.stdout.strip()})"
    if not (SDK_DIR / "node_modules").exists():
        subprocess.run([npm, "ci", "--no-audit", "--no-fund"], cwd=SDK_DIR, check=True)
    subprocess.run([npm, "run", "--silent", "build"], cwd=SDK_DIR, check=True)
    return None


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    duration = 3.0 if args.quick else 10.0
    server = await start_master(UNTHROTTLED, loop=getattr(args, "loop", "asyncio"))
    sid = f"s-sdk-{time.monotonic_ns()}"
    common = {"host": server.host, "port": server.port, "session_id": sid, "max_seconds": 120}
    edge_cfg = {"url": server.ws_url, "session_id": sid, "token": API_KEY, "max_seconds": 120}
    try:
        client = await _start_worker_pace(common, duration)
        ts_edge = Worker(
            await _spawn(["node", str(EDGE_JS), json.dumps(edge_cfg)], stderr_path=None), "ts-edge"
        )
        await ts_edge.expect("ready", timeout=30)
        py_edge = Worker(
            await _spawn(
                [PYTHON, "-m", "bench.sdk_edge", "--worker", json.dumps(edge_cfg)],
                stderr_path=None,
            ),
            "py-edge",
        )
        await py_edge.expect("ready", timeout=30)
        await client.send(cmd="go")
        await asyncio.sleep(0.5)
        for edge in (ts_edge, py_edge):
            await edge.send(cmd="record")
        done = await client.expect("done", timeout=duration + 60)
        await asyncio.sleep(0.5)  # let the last frames arrive
        results = {}
        for name, edge in (("typescript", ts_edge), ("python", py_edge)):
            await edge.send(cmd="stop")
            results[name] = await edge.expect("result", timeout=30)
            await edge.finish()
        await client.send(cmd="close")
        await client.finish()
    finally:
        await server.stop()
    rows = []
    for name, label in (("typescript", "TypeScript SDK (Node)"), ("python", "Python client")):
        r = results[name]
        lat = r["latency_us"]
        rows.append(
            {
                "edge": label,
                "sent": done["sent"],
                "received": r["received"],
                "kept_up": r["received"] >= done["sent"],
                "samples": int(lat["count"]),
                "p50_ms": lat["p50"] / 1000,
                "p99_ms": lat["p99"] / 1000,
                "p999_ms": lat["p999"] / 1000,
                "max_ms": lat["max"] / 1000,
                "errors": r.get("errors", 0),
            }
        )
    return {"rows": rows, "send_rate": round(done["sent"] / done["seconds"])}


async def _start_worker_pace(common: dict[str, Any], duration: float) -> Worker:
    client = await start_worker("pace", {**common, "rate": RATE, "duration_s": duration})
    await client.expect("ready", timeout=30)
    return client


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure both edges (see the module docstring)."""
    base: dict[str, Any] = {
        "benchmark": NAME,
        "command": "make bench ARGS=" + ('"sdk_edge --quick"' if args.quick else "sdk_edge"),
        "rate": RATE,
        "environment": environment(),
        "generated_at": now_iso(),
    }
    missing = _build_sdk()
    if missing is not None:
        return {**base, "skipped": missing, "rows": [], "figures": []}
    measured = asyncio.run(_measure(args))
    figures = []
    ts, py = measured["rows"]
    for key, name in (("p50_ms", "p50"), ("p99_ms", "p99")):
        figures.append(
            figure(
                f"SDK edge delivery latency {name} at {RATE:,} frames/s",
                round(ts[key], 3),
                "ms",
                baseline=round(py[key], 3),
                baseline_label="Python client edge",
                aim=f"≤ {AIM_P99_MS} ms" if name == "p99" else "",
                met=ts["kept_up"] and ts[key] <= AIM_P99_MS if name == "p99" else None,
            )
        )
    return {**base, **measured, "figures": figures}


def markdown(result: dict[str, Any]) -> str:
    lines = [f"# The TypeScript SDK as an edge at {result['rate']:,} frames/s", ""]
    if result.get("skipped"):
        return "\n".join([*lines, f"Skipped: {result['skipped']}.", ""])
    lines += [
        figures_table(result["figures"]),
        table(
            ["edge", "sent", "received", "kept up", "samples", "p50 ms", "p99 ms", "p99.9 ms"],
            [
                [
                    r["edge"],
                    r["sent"],
                    r["received"],
                    "yes" if r["kept_up"] else "no",
                    r["samples"],
                    round(r["p50_ms"], 3),
                    round(r["p99_ms"], 3),
                    round(r["p999_ms"], 3),
                ]
                for r in result["rows"]
            ],
        ),
        "Both edges watch the same session at once, each in its own process; one-way latency "
        "from the pacing client's CLOCK_MONOTONIC stamp to the edge library delivering the "
        "frame (Node's hrtime and Python's monotonic clock are the same Linux clock).",
        "",
    ]
    return "\n".join(lines + markdown_footer(result))


# --- the Python client edge worker (python -m bench.sdk_edge --worker CONFIG) -------------


async def _worker(cfg: dict[str, Any]) -> None:
    from protocol.client import RawpClient

    samples = array("d")
    state = {"recording": False, "received": 0}

    class StampedClient(RawpClient):
        def _handle(self, message: str | bytes) -> None:
            now = time.monotonic_ns()
            data = message.encode() if isinstance(message, str) else message
            stamp = read_stamp(data)
            super()._handle(message)  # decode + fold, as a user's edge pays for
            if stamp is not None:
                state["received"] += 1
                if state["recording"]:
                    samples.append((now - stamp) / 1000.0)

    edge = StampedClient(
        cfg["url"], cfg["session_id"], role="edge", token=cfg["token"], max_queue=1
    )
    await edge.connect()
    print(json.dumps({"event": "ready"}), flush=True)
    reader = asyncio.StreamReader()
    loop = asyncio.get_running_loop()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = await reader.readline()
        if not line:
            break
        cmd = json.loads(line)["cmd"]
        if cmd == "record":
            state["recording"] = True
        elif cmd == "stop":
            state["recording"] = False
            result = percentiles(samples)  # nearest rank, as the other benchmarks
            print(
                json.dumps(
                    {"event": "result", "received": state["received"], "latency_us": result}
                ),
                flush=True,
            )
            break
    await edge.close()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--worker":
        asyncio.run(asyncio.wait_for(_worker(json.loads(sys.argv[2])), 300))
    else:
        sys.exit("usage: python -m bench.sdk_edge --worker CONFIG_JSON (run it with make bench)")
