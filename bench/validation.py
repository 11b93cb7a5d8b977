"""Decode + validate throughput: :func:`protocol.codec.decode` next to ``jsonschema``.

The frame is a realistic ``session.usage`` (§7.3.1, every optional field set) as a client
sends it. Rows:

* ``protocol.codec.decode`` — parse and validate into the typed frame (the AnyFrame union,
  exactly what the master does with every incoming message);
* ``jsonschema session.usage.json`` — ``json.loads`` then a ``Draft202012Validator``, built
  once, validating against the generated schema of that one type (the favourable case for
  jsonschema: it is told the type);
* ``jsonschema any-frame.json`` — the same against the union schema (what the master would
  need, not knowing the type in advance);
* ``json.loads only`` — the parse alone, as a floor for the jsonschema rows.

Targets: ≥ 500,000 frames/s for the codec and ≥ 50× the jsonschema row on the type's schema.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
from importlib import metadata
from typing import Any, Final

from jsonschema import Draft202012Validator  # type: ignore[import-untyped]

from bench import Measurement, measure
from protocol import codec, schema
from protocol.frames import Usage

__all__ = ["DESCRIPTION", "NAME", "USAGE_FRAME", "markdown", "run"]

NAME: Final = "validation"
DESCRIPTION: Final = "session.usage decode+validate: protocol.codec vs jsonschema"

MIN_FRAMES_PER_S: Final = 500_000
MIN_SPEEDUP: Final = 50.0

USAGE_FRAME: Final[bytes] = json.dumps(
    {
        "type": "session.usage",
        "message_id": "0193b0c2-7e5a-4c1d-8f00-3a9d2b7c4e10",
        "session_id": "s-7f3a9c21",
        "timestamp": "2026-11-29T09:00:00.123Z",
        "payload": {
            "turn_id": "5b0f3c1e-8a4d-4f6b-9c2e-1d7a8b9c0e1f",
            "token_usage": {
                "input_tokens": 18234,
                "output_tokens": 1290,
                "cache_read_tokens": 15000,
                "cache_write_tokens": 2100,
                "thinking_tokens": 512,
            },
            "cost_usage": {"limit": 50.0, "used": 12.37, "unit": "USD"},
            "message_usage": {"limit": -1, "used": 214, "unit": "COUNT"},
            "context_window": {"capacity": 200000, "used": 19524, "utilization": 0.0976},
            "time_to_reset": "2026-12-01T00:00:00Z",
        },
    },
    separators=(",", ":"),
).encode()


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measure every row; returns the JSON-able result."""
    seconds: float = getattr(args, "seconds", 1.0)
    rounds: int = getattr(args, "rounds", 5)
    schemas = schema.generate()
    usage_validator = Draft202012Validator(schemas["session.usage.json"])
    any_validator = Draft202012Validator(schemas["any-frame.json"])
    data = USAGE_FRAME

    # Both sides must accept the frame, or the comparison means nothing.
    assert isinstance(codec.decode(data), Usage)
    usage_validator.validate(json.loads(data))
    any_validator.validate(json.loads(data))

    decode = codec.decode
    loads = json.loads
    rows: dict[str, Measurement] = {
        "protocol.codec.decode": measure(lambda: decode(data), seconds=seconds, rounds=rounds),
        "jsonschema session.usage.json": measure(
            lambda: usage_validator.validate(loads(data)), seconds=seconds, rounds=rounds
        ),
        "jsonschema any-frame.json": measure(
            lambda: any_validator.validate(loads(data)), seconds=seconds, rounds=rounds
        ),
        "json.loads only": measure(lambda: loads(data), seconds=seconds, rounds=rounds),
    }
    codec_rate = rows["protocol.codec.decode"].median
    speedup = codec_rate / rows["jsonschema session.usage.json"].median
    return {
        "benchmark": NAME,
        "frame": "session.usage",
        "frame_bytes": len(data),
        "rows": [
            {
                "name": name,
                "frames_per_s_median": round(m.median),
                "frames_per_s_best": round(m.best),
                "us_per_frame_median": round(1e6 / m.median, 3),
                "x_codec": round(codec_rate / m.median, 1),
                "calls_per_round": m.calls_per_round,
                "rounds": len(m.rounds),
            }
            for name, m in rows.items()
        ],
        "speedup_vs_jsonschema": round(speedup, 1),
        "speedup_vs_jsonschema_any_frame": round(
            codec_rate / rows["jsonschema any-frame.json"].median, 1
        ),
        "targets": {"min_frames_per_s": MIN_FRAMES_PER_S, "min_speedup": MIN_SPEEDUP},
        "meets_targets": codec_rate >= MIN_FRAMES_PER_S and speedup >= MIN_SPEEDUP,
        "environment": _environment(),
        "generated_at": dt.datetime.now(dt.UTC).replace(microsecond=0).isoformat(),
    }


def markdown(result: dict[str, Any]) -> str:
    """The result as a Markdown table with a verdict line."""
    lines = [
        f"# Validation throughput ({result['frame']}, {result['frame_bytes']} bytes)",
        "",
        "| implementation | frames/s (median) | frames/s (best) | µs/frame | codec is × faster |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in result["rows"]:
        lines.append(
            f"| {row['name']} | {row['frames_per_s_median']:,} | {row['frames_per_s_best']:,} "
            f"| {row['us_per_frame_median']:.3f} | {row['x_codec']:.1f} |"
        )
    targets = result["targets"]
    verdict = "met" if result["meets_targets"] else "NOT met"
    env = result["environment"]
    lines += [
        "",
        f"Codec vs jsonschema on the type's schema: **{result['speedup_vs_jsonschema']}×** "
        f"(on any-frame.json: {result['speedup_vs_jsonschema_any_frame']}×). "
        f"Targets ≥ {targets['min_frames_per_s']:,} frames/s and ≥ {targets['min_speedup']:.0f}×: "
        f"**{verdict}**.",
        "",
        f"Python {env['python']} ({env['implementation']}), msgspec {env['msgspec']}, "
        f"jsonschema {env['jsonschema']}, {env['machine']}, {env['cpus']} CPUs; "
        f"run {result['generated_at']}. Garbage collector paused while timing (as timeit).",
        "",
    ]
    return "\n".join(lines)


def _environment() -> dict[str, Any]:
    return {
        "python": platform.python_version(),
        "implementation": sys.implementation.name,
        "msgspec": metadata.version("msgspec"),
        "jsonschema": metadata.version("jsonschema"),
        "machine": f"{platform.system()} {platform.machine()}",
        "cpus": os.cpu_count(),
    }
