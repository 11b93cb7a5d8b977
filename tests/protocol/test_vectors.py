"""The frame test vectors under tests/vectors decode (or fail) as they say."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from protocol import codec
from protocol.cli import frame_problem
from protocol.errors import ProtocolError
from protocol.frames import frame_types

from .vectors import VECTORS_DIR, Vector, load_vectors

VECTORS = load_vectors()
VALID = [v for v in VECTORS if v.valid]
INVALID = [v for v in VECTORS if not v.valid]


@pytest.mark.parametrize("vector", VALID, ids=[v.id for v in VALID])
def test_valid_vector_decodes(vector: Vector) -> None:
    """A valid vector decodes to a frame of its directory's type and survives a round trip."""
    frame = codec.decode(vector.frame_bytes())
    assert frame.type == vector.frame_type
    assert codec.decode(codec.encode(frame)) == frame


@pytest.mark.parametrize("vector", INVALID, ids=[v.id for v in INVALID])
def test_invalid_vector_is_refused_with_its_code(vector: Vector) -> None:
    """An invalid vector is refused with its error_code: by decoding, or by the frame rules."""
    if vector.refused_by == "frame_rules":
        problem = frame_problem(codec.decode(vector.frame_bytes()))
        assert problem is not None
        assert problem.code == vector.error_code
        return
    with pytest.raises(ProtocolError) as info:
        codec.decode(vector.frame_bytes())
    assert info.value.code == vector.error_code


def test_every_frame_type_has_vectors() -> None:
    """Every frame type has at least one valid and two invalid vectors."""
    valid = Counter(v.frame_type for v in VALID)
    invalid = Counter(v.frame_type for v in INVALID)
    missing = {
        tag: (valid[tag], invalid[tag])
        for tag in frame_types()
        if valid[tag] < 1 or invalid[tag] < 2
    }
    assert not missing, f"types without 1 valid + 2 invalid vectors (valid, invalid): {missing}"


def test_vector_files_are_well_formed() -> None:
    """Vector directories are frame types and every file follows the vector format."""
    assert {path.name for path in VECTORS_DIR.iterdir() if path.is_dir()} <= set(frame_types())
    for path in VECTORS_DIR.glob("*/*"):
        assert path.name.startswith(("valid-", "invalid-")), path
        assert path.suffix == ".json", path
        data = json.loads(path.read_text(encoding="utf-8"))
        assert isinstance(data["frame"], dict), path
        assert data["frame"].get("type") == path.parent.name or "type" in data.get("why", ""), path
        if path.name.startswith("valid-"):
            assert set(data) == {"frame"}, path
        else:
            assert {"frame", "error_code", "why"} <= set(data), path
            assert set(data) <= {"frame", "error_code", "why", "schema_rejects", "refused_by"}, path
            assert data["why"], path
