"""Fuzzing, long run: ≥ 1,000,000 inputs through the session path, plus a socket share.

1. **In process** (the bulk, for speed): :class:`tests.reliability.fuzzing.InProcessFuzzer`
   — the real ``WebSocketEndpoint`` handler, hub, session worker, state machine and memory
   store on in-memory connections — fed 1,000,000 inputs (``--quick``: 100,000): a corpus
   seeded with 2,000 Hypothesis examples (:func:`tests.reliability.fuzzing.frames`) and
   seeded mutations of valid frames (:class:`~tests.reliability.fuzzing.Mutator`).
   Checked after every chunk: nothing escaped the handler or the worker, the session's
   state equals a replay of its log, and a control session's frame reached its edge as
   head + 1.
2. **Over sockets** (a smaller share): a master process (``bench._master``) gets
   mutated frames after a hello, garbage first frames and broken framing on raw sockets
   (invalid UTF-8 text, reserved opcodes and bits, unmasked frames), while a control client
   streams to a control edge; at the end ``/healthz`` must answer and the control stream
   must have had no gap.

Crashes that match a known, reported bug are counted apart (``known_bug_hits``).
Aim: 0 unknown crashes, 0 replay mismatches, 0 control gaps, the master up.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import time
import urllib.request
from collections import Counter
from typing import Any, Final

import structlog

from ._procs import API_KEY, UNTHROTTLED, start_master
from ._report import environment, figure, figures_table, now_iso, table
from ._workload import hello
from ._wsraw import CONT, TEXT, encode_frame, open_raw

__all__ = ["DESCRIPTION", "NAME", "markdown", "run"]

NAME: Final = "fuzz"
DESCRIPTION: Final = "≥ 1,000,000 fuzzed inputs through the session path, plus a socket share"


def _hypothesis_corpus(n: int, session_id: str) -> list[bytes]:
    """``n`` examples drawn by Hypothesis from the frames strategy (seeded)."""
    from hypothesis import HealthCheck, given, seed, settings

    from tests.reliability.fuzzing import frames

    out: list[bytes] = []

    @seed(20261129)
    @settings(
        max_examples=n,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(frames(session_id))
    def collect(data: bytes) -> None:
        out.append(data)

    collect()
    return out


def _inputs(n_hypothesis: int) -> Any:
    from tests.reliability.fuzzing import TARGET, Mutator, valid_corpus

    corpus = _hypothesis_corpus(n_hypothesis, TARGET)
    mutator = Mutator(1, valid_corpus(TARGET))
    i = 0
    while True:
        # every 10th input is a Hypothesis example, the rest mutations
        if i % 10 == 0 and corpus:
            yield corpus[(i // 10) % len(corpus)]
        else:
            yield mutator.next()
        i += 1


async def _in_process(count: int) -> dict[str, Any]:
    from tests.reliability.fuzzing import InProcessFuzzer

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    started = time.perf_counter()
    inputs = _inputs(2000)
    async with InProcessFuzzer() as fuzzer:
        stats = await fuzzer.run(inputs, count)
    out = stats.as_dict()
    out["seconds"] = round(time.perf_counter() - started, 1)
    return out


async def _socket_share(count: int, args: argparse.Namespace) -> dict[str, Any]:
    from tests.reliability.fuzzing import Mutator, as_message, expected_code, valid_corpus

    master = await start_master([*UNTHROTTLED, "--max-frame-bytes", str(256 * 1024)])
    host, port = master.host, master.port
    closes: Counter[str] = Counter()
    answered: Counter[str] = Counter()
    unanswered = 0
    sent = 0
    control = {"sent": 0, "seen": 0, "gaps": 0, "last": 0}
    stop = asyncio.Event()

    async def control_stream() -> None:
        sid = "s-fuzz-ctl"
        client = await open_raw(host, port)
        client.send_text(hello(sid, "client", API_KEY, create=True))
        await client.recv()
        edge = await open_raw(host, port)
        edge.send_text(hello(sid, "edge", API_KEY))
        welcome = json.loads(await edge.recv())
        control["last"] = welcome["payload"]["session"]["head_seq"] + 1

        def on_edge(data: bytes) -> None:
            frame = json.loads(data)
            if frame["type"] != "session.presence":
                control["seen"] += 1
                if frame["seq"] != control["last"] + 1:
                    control["gaps"] += 1
            control["last"] = frame["seq"]

        edge.on_message = on_edge
        n = 0
        while not stop.is_set():
            n += 1
            client.send_text(
                b'{"type":"agent.state","message_id":"ctl-%d","session_id":"%s",'
                b'"timestamp":"2026-11-29T09:00:00.123Z","payload":{"state":"thinking"}}'
                % (n, sid.encode())
            )
            control["sent"] += 1
            await asyncio.sleep(0.005)
        await asyncio.sleep(0.5)
        await client.close()
        await edge.close()

    task = asyncio.get_running_loop().create_task(control_stream())
    await asyncio.sleep(0.3)
    mutator = Mutator(99, valid_corpus("s-fuzz-sock"))
    session = 0
    try:
        while sent < count:
            session += 1
            sid = f"s-fuzz-sock-{session}"
            ws = await open_raw(host, port)
            if session % 10 == 0:  # handshake abuse: a fuzzed first frame
                data = mutator.next()
                ws.write_frame(TEXT if isinstance(as_message(data), str) else 0x2, data)
                sent += 1
                code = await ws.wait_closed(timeout=10)
                closes[str(code)] += 1
                continue
            ws.send_text(hello(sid, "client", API_KEY, create=True))
            await ws.recv(timeout=10)
            owed: Counter[str] = Counter()
            for _ in range(200):
                data = mutator.next().replace(b"s-fuzz-sock", sid.encode())
                if len(data) > 200 * 1024 and session % 5:
                    continue  # over max_frame_bytes closes 1009: only in every 5th session
                message = as_message(data)
                answer = expected_code(message)
                if isinstance(message, bytes):
                    ws.write_frame(0x2, message)
                else:
                    ws.send_text(data)
                sent += 1
                if answer is not None:
                    owed[answer] += 1
            if session % 7 == 0:  # broken framing at the end of some sessions
                ws.write_raw(
                    [
                        encode_frame(TEXT, b'{"a":"\xff"}'),
                        encode_frame(0x3, b"x"),
                        encode_frame(TEXT, b"{}", rsv=4),
                        encode_frame(TEXT, b"{}", mask=False),
                        encode_frame(CONT, b"x"),
                    ][session % 5]
                )
                sent += 1
            got: Counter[str] = Counter()
            while True:
                try:
                    frame = json.loads(await ws.recv(timeout=0.5))
                except (TimeoutError, ConnectionError):
                    break
                if frame.get("type") == "session.error" and frame["sender"]["role"] == "master":
                    got[frame["payload"]["error_code"]] += 1
            answered.update(got)
            if ws.open:
                await ws.close()
                unanswered += sum((owed - got).values())
            else:
                closes[str(ws.close_code)] += 1
    finally:
        stop.set()
        await task
        healthy = await asyncio.to_thread(_healthz, master.http_url)
        alive = master.process.returncode is None
        await master.stop()
    return {
        "inputs": sent,
        "sessions": session,
        "error_answers": dict(answered.most_common()),
        "closes": dict(closes.most_common()),
        "unanswered_invalid": unanswered,
        "healthz_ok": healthy,
        "master_alive": alive,
        "control": control,
    }


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    count = 100_000 if args.quick else 1_000_000
    sock_count = 5_000 if args.quick else 30_000
    env = environment()
    started = time.perf_counter()
    inproc = await _in_process(count)
    sock = await _socket_share(sock_count, args)
    total = inproc["inputs"] + sock["inputs"]
    ok = (
        inproc["crash_count"] == 0
        and inproc["replay_mismatches"] == 0
        and inproc["control_gaps"] == 0
        and sock["healthz_ok"]
        and sock["master_alive"]
        and sock["control"]["gaps"] == 0
    )
    return {
        "benchmark": NAME,
        "command": "make bench ARGS=" + ('"fuzz --quick"' if args.quick else "fuzz"),
        "in_process": inproc,
        "socket": sock,
        "seconds": round(time.perf_counter() - started, 1),
        "figures": [
            figure(
                f"fuzzed inputs ({total:,}), unknown crashes",
                inproc["crash_count"],
                "crashes",
                aim="0 crashes, master up, control stream gapless",
                met=ok,
                note=f"known bug hits {inproc.get('known_bug_hits')}",
            )
        ],
        "environment": env,
        "generated_at": now_iso(),
    }


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run both shares (see the module docstring)."""
    return asyncio.run(_run(args))


def markdown(result: dict[str, Any]) -> str:
    from tests.reliability.fuzzing import KNOWN_BUGS

    i, s = result["in_process"], result["socket"]
    lines = [
        "# Fuzzing",
        "",
        figures_table(result["figures"]),
        table(
            ["", "in process (handler + session path)", "over sockets (master process)"],
            [
                ["inputs", f"{i['inputs']:,}", f"{s['inputs']:,}"],
                ["sessions", f"{i['sessions']:,}", f"{s['sessions']:,}"],
                ["binary messages", f"{i['binary_messages']:,}", "–"],
                ["session.error answers", _codes(i["error_answers"]), _codes(s["error_answers"])],
                ["close codes", _codes(i["closes"]) or "–", _codes(s["closes"]) or "–"],
                ["unknown crashes", i["crash_count"], "–"],
                ["known-bug hits", _codes(i["known_bug_hits"]) or "0", "(1011 closes)"],
                ["state ≠ replay of the log", i["replay_mismatches"], "–"],
                ["invalid inputs left unanswered", "–", s["unanswered_invalid"]],
                [
                    "control stream: frames / gaps",
                    f"{i['control_frames']:,} / {i['control_gaps']}",
                    f"{s['control']['seen']:,} / {s['control']['gaps']}",
                ],
                [
                    "master up, /healthz",
                    "–",
                    "yes" if s["healthz_ok"] and s["master_alive"] else "NO",
                ],
                ["duration", f"{i['seconds']} s", ""],
            ],
            "lll",
        ),
    ]
    if i["crashes"]:
        lines += ["Unknown crashes:", ""] + [f"- `{c[:300]}`" for c in i["crashes"]] + [""]
    if i.get("known_bug_hits"):
        lines += ["Known bugs hit (reported, pinned by a strict xfail in tests/reliability):", ""]
        lines += [f"- **{k}**: {KNOWN_BUGS.get(k, '')}" for k in i["known_bug_hits"]] + [""]
    lines += [
        f"Run {result['generated_at']}, {result['seconds']} s. Reproduce: `{result['command']}`.",
        "",
    ]
    return "\n".join(lines)


def _healthz(base: str) -> bool:
    try:
        with urllib.request.urlopen(base + "/healthz", timeout=5) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _codes(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v:,}" for k, v in counts.items())
