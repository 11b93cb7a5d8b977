"""The JSON Schemas under schemas/ are current and agree with the decoder on the vectors."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest
from jsonschema import Draft202012Validator

from protocol import schema
from protocol.frames import frame_types
from protocol.state import SenderRole, allowed_types
from rawp.cli import main

from .vectors import Vector, load_vectors

SCHEMAS_DIR = Path(__file__).resolve().parents[2] / "schemas"
VECTORS = load_vectors()
VALID = [v for v in VECTORS if v.valid]
INVALID = [v for v in VECTORS if not v.valid and v.schema_rejects]
BEYOND_SCHEMA = [v for v in VECTORS if not v.valid and not v.schema_rejects]
UNION_ROLES: dict[str, SenderRole] = {
    "client-frame": "client",
    "edge-frame": "edge",
    "master-frame": "master",
}


@cache
def validator(name: str) -> Draft202012Validator:
    """A validator for the checked-in schema ``schemas/<name>.json``."""
    document = json.loads((SCHEMAS_DIR / f"{name}.json").read_text(encoding="utf-8"))
    return Draft202012Validator(document, format_checker=Draft202012Validator.FORMAT_CHECKER)


def test_checked_in_schemas_are_current() -> None:
    """The files under schemas/ equal what protocol.schema generates (run `make schemas`)."""
    stale = schema.stale_files(SCHEMAS_DIR)
    assert not stale, f"stale schema files, run `make schemas`: {stale}"


@pytest.mark.parametrize("name", sorted(schema.generate()))
def test_schema_file_is_a_described_2020_12_schema(name: str) -> None:
    """Each schema is valid 2020-12 and carries $schema, $id, title and description."""
    document: dict[str, Any] = schema.generate()[name]
    Draft202012Validator.check_schema(document)
    assert document["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert document["$id"] == f"{schema.BASE_URI}{name}"
    assert document["title"]
    assert document["description"]


def test_one_schema_per_frame_type_and_union() -> None:
    """There is a schema file for every frame type and for each of the four unions."""
    expected = {f"{tag}.json" for tag in frame_types()} | {f"{stem}.json" for stem in schema.UNIONS}
    assert set(schema.generate()) == expected
    assert set(schema.UNIONS) == {"any-frame", "client-frame", "edge-frame", "master-frame"}


def test_rendering_is_readable() -> None:
    """Schemas are rendered with sorted keys, indent 2 and a trailing newline."""
    text = schema.render({"b": 1, "a": {"d": 2, "c": 3}})
    assert text == '{\n  "a": {\n    "c": 3,\n    "d": 2\n  },\n  "b": 1\n}\n'


@pytest.mark.parametrize("vector", VALID, ids=[v.id for v in VALID])
def test_schemas_accept_valid_vector(vector: Vector) -> None:
    """A valid vector passes its type's schema, any-frame and every union its type belongs to."""
    validator(vector.frame_type).validate(vector.frame)
    validator("any-frame").validate(vector.frame)
    for union, role in UNION_ROLES.items():
        if vector.frame_type in allowed_types(role):
            validator(union).validate(vector.frame)
        else:
            assert not validator(union).is_valid(vector.frame)


@pytest.mark.parametrize("vector", INVALID, ids=[v.id for v in INVALID])
def test_schemas_reject_invalid_vector(vector: Vector) -> None:
    """An invalid vector (whose rule is expressible in JSON Schema) fails the schemas."""
    assert not validator(vector.frame_type).is_valid(vector.frame)
    assert not validator("any-frame").is_valid(vector.frame)


@pytest.mark.parametrize("vector", BEYOND_SCHEMA, ids=[v.id for v in BEYOND_SCHEMA])
def test_schema_rejects_false_marks_a_real_gap(vector: Vector) -> None:
    """A vector marked schema_rejects: false is accepted by its schema (a decoder-only rule)."""
    assert validator(vector.frame_type).is_valid(vector.frame)


def test_any_frame_accepts_only_ignorable_unknown_types() -> None:
    """any-frame accepts an unknown type only with metadata.ignorable true, like the codec."""
    frame = {
        "type": "agent.plan.update",
        "message_id": "m-1",
        "session_id": "s-1",
        "timestamp": "2026-11-29T09:00:00Z",
        "metadata": {"ignorable": True},
        "payload": {"steps": 3},
    }
    assert validator("any-frame").is_valid(frame)
    assert not validator("any-frame").is_valid({**frame, "metadata": {"ignorable": False}})
    assert not validator("any-frame").is_valid({k: v for k, v in frame.items() if k != "metadata"})
    assert not validator("any-frame").is_valid({**frame, "type": "session.usage"})


def test_schemas_command_writes_then_checks(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rawp schemas --out DIR` writes every file; `--check` then passes (exit 0)."""
    assert main(["schemas", "--out", str(tmp_path)]) == 0
    assert {p.name for p in tmp_path.iterdir()} == set(schema.generate())
    assert main(["schemas", "--out", str(tmp_path), "--check"]) == 0
    capsys.readouterr()


def test_schemas_check_fails_on_stale_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`rawp schemas --check` exits 1 naming a changed, a missing and an obsolete file."""
    main(["schemas", "--out", str(tmp_path)])
    (tmp_path / "session.usage.json").write_text("{}\n", encoding="utf-8")
    (tmp_path / "user.message.json").unlink()
    obsolete = {"$id": f"{schema.BASE_URI}session.gone.json"}
    (tmp_path / "session.gone.json").write_text(json.dumps(obsolete), encoding="utf-8")
    (tmp_path / "notes.json").write_text("{}", encoding="utf-8")  # not ours: ignored
    capsys.readouterr()
    assert main(["schemas", "--out", str(tmp_path), "--check"]) == 1
    out = capsys.readouterr().out
    for name in ("session.usage.json", "user.message.json", "session.gone.json"):
        assert name in out
    assert "notes.json" not in out
    assert main(["schemas", "--out", str(tmp_path)]) == 0
    assert not (tmp_path / "session.gone.json").exists()
    assert (tmp_path / "notes.json").exists()
    assert main(["schemas", "--out", str(tmp_path), "--check"]) == 0
