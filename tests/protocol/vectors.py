"""Loading the test vectors under ``tests/vectors/<type>/`` (valid-*.json, invalid-*.json).

A valid vector is ``{"frame": {...}}``. An invalid one is ``{"frame": {...}, "error_code":
"invalid_frame", "why": "..."}``, plus ``"schema_rejects": false`` when the rule it breaks is
not expressible in JSON Schema (the generated schemas then accept it), and ``"refused_by":
"frame_rules"`` when the frame decodes and is refused by the frame-level rules the master
applies beyond decoding (``protocol.cli.frame_problem``: compaction counts, history frames).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["VECTORS_DIR", "Vector", "load_vectors"]

VECTORS_DIR = Path(__file__).resolve().parent.parent / "vectors"


@dataclass(frozen=True)
class Vector:
    """One vector file."""

    path: Path
    frame_type: str
    valid: bool
    frame: Any
    error_code: str | None
    why: str | None
    schema_rejects: bool
    refused_by: str = "decode"

    @property
    def id(self) -> str:
        """A readable pytest id: ``<type>/<file stem>``."""
        return f"{self.frame_type}/{self.path.stem}"

    def frame_bytes(self) -> bytes:
        """The frame as compact JSON bytes."""
        return json.dumps(self.frame, separators=(",", ":"), ensure_ascii=False).encode()


def load_vectors() -> list[Vector]:
    """Every vector, sorted by type then file name."""
    vectors: list[Vector] = []
    for path in sorted(VECTORS_DIR.glob("*/*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        valid = path.name.startswith("valid-")
        vectors.append(
            Vector(
                path=path,
                frame_type=path.parent.name,
                valid=valid,
                frame=data["frame"],
                error_code=data.get("error_code"),
                why=data.get("why"),
                schema_rejects=data.get("schema_rejects", True),
                refused_by=data.get("refused_by", "decode"),
            )
        )
    return vectors
