"""JSON Schema (draft 2020-12) for every RAWP frame, generated from :mod:`protocol.frames`.

The msgspec Structs are the single source of truth; :func:`generate` turns them into one
schema per frame type (``session.turn.start.json``, …) and one per union of
:mod:`protocol.frames` (``any-frame.json``, ``client-frame.json``, ``edge-frame.json``,
``master-frame.json``). The files are checked in under ``schemas/`` (notes §1) and rendered
readably (sorted keys, indent 2, trailing newline); ``rawp schemas --out schemas`` rewrites
them and ``rawp schemas --check`` fails when they are stale.

Two things are added to what :func:`msgspec.json.schema` produces:

* every ``format: date-time`` string also gets an RFC 3339 ``pattern``, so a validator that
  treats ``format`` as an annotation only (the 2020-12 default) still checks timestamps;
* ``any-frame.json`` also accepts an envelope of an unknown ``type`` whose
  ``metadata.ignorable`` is true, as :func:`protocol.codec.decode` does (notes §3).

What a schema cannot express — the session state machine (notes §6), ``renamed_by`` matching
the sender, ``current_token_count`` ≤ ``previous_token_count`` — is checked by
:mod:`protocol.state` only.
"""

from __future__ import annotations

import inspect
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from .frames import (
    PROTOCOL_VERSION,
    AnyFrame,
    ClientFrame,
    EdgeFrame,
    Frame,
    GenericFrame,
    MasterFrame,
    frame_types,
)

__all__ = [
    "BASE_URI",
    "DIALECT",
    "UNIONS",
    "generate",
    "render",
    "stale_files",
    "write",
]

DIALECT: Final = "https://json-schema.org/draft/2020-12/schema"
_ID_ROOT: Final = "https://rawp.dev/schemas/"
BASE_URI: Final = f"{_ID_ROOT}{PROTOCOL_VERSION}/"
"""Prefix of every generated ``$id`` (an identifier, not necessarily a fetchable URL)."""

RFC3339: Final = r"^\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$"
"""RFC 3339 ``date-time`` (the grammar; calendar validity is left to ``format``)."""

UNIONS: Final[Mapping[str, tuple[Any, str, str]]] = {
    "any-frame": (
        AnyFrame,
        "Any RAWP frame",
        "Every frame type of RAWP {version}, plus an envelope of an unknown type marked "
        "metadata.ignorable (relayed untouched, notes §3). A participant's socket is decoded "
        "with this union, so a frame of the wrong direction is refused as `direction`, not "
        "`unknown_type`.",
    ),
    "client-frame": (
        ClientFrame,
        "RAWP client frame",
        "The frames a client (the agent runtime that owns the session's turns) may send in "
        "RAWP {version}.",
    ),
    "edge-frame": (
        EdgeFrame,
        "RAWP edge frame",
        "The frames an edge (a UI or observer attached to a session) may send in RAWP {version}.",
    ),
    "master-frame": (
        MasterFrame,
        "RAWP master frame",
        "The frames the master relay originates in RAWP {version} (it also relays the "
        "participants' frames, stamped with seq and sender).",
    ),
}
"""File stem → (union, title, description) for the union schemas."""

_REF_PREFIX: Final = "#/$defs/"


def generate() -> dict[str, dict[str, Any]]:
    """Every schema by file name (``session.usage.json``, ``any-frame.json``, …)."""
    schemas: dict[str, dict[str, Any]] = {}
    for tag, cls in sorted(frame_types().items()):
        schemas[f"{tag}.json"] = _frame_schema(tag, cls)
    for stem, (union, title, description) in UNIONS.items():
        schemas[f"{stem}.json"] = _union_schema(stem, union, title, description)
    return schemas


def render(schema: Mapping[str, Any]) -> str:
    """The file text of a schema: sorted keys, indent 2, UTF-8 characters kept, final newline."""
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write(out_dir: Path) -> list[str]:
    """Write every schema into ``out_dir``; returns the names of the files changed or removed.

    Schema files this module wrote earlier (a RAWP ``$id``, any version) that are no longer
    generated are removed; other files are left alone.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    changed: list[str] = []
    wanted = {name: render(schema) for name, schema in generate().items()}
    for name, text in wanted.items():
        path = out_dir / name
        if not path.exists() or path.read_text(encoding="utf-8") != text:
            path.write_text(text, encoding="utf-8")
            changed.append(name)
    for name in _ours(out_dir) - wanted.keys():
        (out_dir / name).unlink()
        changed.append(name)
    return sorted(changed)


def stale_files(out_dir: Path) -> list[str]:
    """Names of the schema files in ``out_dir`` that are missing, outdated or obsolete."""
    wanted = {name: render(schema) for name, schema in generate().items()}
    stale = [
        name
        for name, text in wanted.items()
        if not (out_dir / name).is_file() or (out_dir / name).read_text(encoding="utf-8") != text
    ]
    stale.extend(_ours(out_dir) - wanted.keys())
    return sorted(stale)


# --- building ------------------------------------------------------------------------------


def _frame_schema(tag: str, cls: type[Frame]) -> dict[str, Any]:
    generated = msgspec.json.schema(cls)
    defs: dict[str, Any] = generated["$defs"]
    root_name = generated["$ref"].removeprefix(_REF_PREFIX)
    if _refers_to(defs, root_name):  # recursive: keep the root as a reference
        root: dict[str, Any] = {"$ref": generated["$ref"]}
    else:
        root = defs.pop(root_name)
    doc = _doc(cls)
    payload_doc = _doc(_payload_class(cls))
    root.update(
        {
            "$schema": DIALECT,
            "$id": f"{BASE_URI}{tag}.json",
            "title": f"RAWP {tag} frame",
            "description": f"The `{tag}` envelope of RAWP {PROTOCOL_VERSION}: {doc}"
            + (f"\n\nPayload: {payload_doc}" if payload_doc else ""),
        }
    )
    if defs:
        root["$defs"] = defs
    _add_timestamp_patterns(root)
    return root


def _union_schema(stem: str, union: Any, title: str, description: str) -> dict[str, Any]:
    schema: dict[str, Any] = msgspec.json.schema(union)
    if union is AnyFrame:
        schema = _with_ignorable(schema)
    schema.update(
        {
            "$schema": DIALECT,
            "$id": f"{BASE_URI}{stem}.json",
            "title": title,
            "description": description.format(version=PROTOCOL_VERSION),
        }
    )
    _add_timestamp_patterns(schema)
    return schema


def _with_ignorable(schema: dict[str, Any]) -> dict[str, Any]:
    """Add the unknown-but-ignorable envelope to the AnyFrame union (notes §3)."""
    known = sorted(frame_types())
    _, components = msgspec.json.schema_components(
        [GenericFrame], ref_template=_REF_PREFIX + "{name}"
    )
    defs: dict[str, Any] = schema["$defs"]
    for name, component in components.items():
        defs.setdefault(name, component)
    defs["IgnorableFrame"] = {
        "title": "IgnorableFrame",
        "description": "An envelope of a type this version does not know. Accepted and relayed "
        "untouched only when metadata.ignorable is true; otherwise refused as unknown_type.",
        "allOf": [{"$ref": f"{_REF_PREFIX}GenericFrame"}],
        "properties": {
            "type": {"not": {"enum": known}},
            "metadata": {
                "type": "object",
                "properties": {"ignorable": {"const": True}},
                "required": ["ignorable"],
            },
        },
        "required": ["type", "metadata"],
    }
    schema["anyOf"] = [*schema["anyOf"], {"$ref": f"{_REF_PREFIX}IgnorableFrame"}]
    # The OpenAPI discriminator lists the known types only; it would misdescribe the extra
    # alternative, and JSON Schema validators ignore it anyway.
    schema.pop("discriminator", None)
    return schema


def _add_timestamp_patterns(node: Any) -> None:
    """Give every ``format: date-time`` string the :data:`RFC3339` pattern too (in place)."""
    if isinstance(node, dict):
        if node.get("format") == "date-time" and node.get("type") == "string":
            node.setdefault("pattern", RFC3339)
        for value in node.values():
            _add_timestamp_patterns(value)
    elif isinstance(node, list):
        for value in node:
            _add_timestamp_patterns(value)


def _refers_to(node: Any, name: str) -> bool:
    if isinstance(node, dict):
        if node.get("$ref") == _REF_PREFIX + name:
            return True
        return any(_refers_to(value, name) for value in node.values())
    if isinstance(node, list):
        return any(_refers_to(value, name) for value in node)
    return False


def _payload_class(cls: type[Frame]) -> type | None:
    for field in msgspec.structs.fields(cls):
        if field.name == "payload" and isinstance(field.type, type):
            return field.type
    return None


def _doc(cls: type | None) -> str:
    if cls is None or cls.__doc__ is None:
        return ""
    return inspect.cleandoc(cls.__doc__)


def _ours(out_dir: Path) -> set[str]:
    """Names of the ``*.json`` files in ``out_dir`` that are RAWP schemas (by their ``$id``)."""
    names: set[str] = set()
    if not out_dir.is_dir():
        return names
    for path in out_dir.glob("*.json"):
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and str(data.get("$id", "")).startswith(_ID_ROOT):
            names.add(path.name)
    return names
