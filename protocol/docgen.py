"""Reference tables generated from the code, so the docs cannot drift from it.

* :func:`frame_table`: every frame type's direction and payload fields, read from the msgspec
  Structs of :mod:`protocol.frames` (notes §4) — the table of ``docs/protocol.md`` §4.
* :func:`client_reference`: every public method and property of
  :class:`protocol.client.RawpClient` with its signature and the first line of its docstring —
  the reference at the end of ``docs/client.md``.

:func:`replace_section` swaps the text between ``<!-- NAME:begin -->`` and ``<!-- NAME:end -->``
markers; ``make schemas`` (``rawp schemas``) rewrites both documents and the tests check they
are current.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import msgspec

from . import frames as F

__all__ = [
    "DOC_SECTIONS",
    "client_reference",
    "frame_table",
    "main",
    "render_docs",
    "replace_section",
]

_ROLES: Final = (("C", F.ClientFrame), ("E", F.EdgeFrame), ("M", F.MasterFrame))


def _unwrap(info: Any) -> Any:
    """The type behind ``Annotated`` metadata and ``X | None``."""
    while True:
        if isinstance(info, msgspec.inspect.Metadata):
            info = info.type
        elif isinstance(info, msgspec.inspect.UnionType):
            rest = [t for t in info.types if not isinstance(t, msgspec.inspect.NoneType)]
            if len(rest) != 1:
                return info
            info = rest[0]
        else:
            return info


def _describe(info: Any) -> str:
    """A field's type in a few words: enum values, nested fields, list of …"""
    inner = _unwrap(info)
    if isinstance(inner, msgspec.inspect.LiteralType):
        return " " + " / ".join(str(v) for v in inner.values)
    if isinstance(inner, msgspec.inspect.StructType):
        return " {" + _fields(inner) + "}"
    if isinstance(inner, msgspec.inspect.ListType):
        item = _unwrap(inner.item_type)
        if isinstance(item, msgspec.inspect.RawType):
            return " [envelopes]"
        if isinstance(item, msgspec.inspect.StructType):
            return " [{" + _fields(item) + "}]"
        return " [list]"
    if isinstance(inner, msgspec.inspect.DictType):
        return " (object)"
    return ""


def _fields(struct: msgspec.inspect.StructType) -> str:
    parts = []
    for field in struct.fields:
        name = f"**{field.name}**" if field.required else field.name
        parts.append(name + _describe(field.type))
    return ", ".join(parts)


def frame_table() -> str:
    """The Markdown table of every frame type: who may send it and its payload fields.

    Required fields are in bold; ``{…}`` opens a nested object, ``a / b`` lists the values
    an enum field takes.
    """
    senders: dict[str, list[str]] = {}
    for letter, union in _ROLES:
        for cls in union.__args__:
            senders.setdefault(str(cls.__struct_config__.tag), []).append(letter)
    lines = ["| type | from | payload (required in bold) |", "|---|---|---|"]
    for tag, cls in F.frame_types().items():
        info = msgspec.inspect.type_info(cls)
        assert isinstance(info, msgspec.inspect.StructType)
        payload = next(f for f in info.fields if f.name == "payload")
        inner = _unwrap(payload.type)
        assert isinstance(inner, msgspec.inspect.StructType)
        lines.append(f"| {tag} | {', '.join(senders.get(tag, []))} | {_fields(inner)} |")
    return "\n".join(lines) + "\n"


def client_reference() -> str:
    """The Markdown reference of :class:`~protocol.client.RawpClient`'s public API."""
    from .client import RawpClient  # the one I/O module: imported only when asked for

    lines = ["| member | what it does |", "|---|---|"]
    for name, member in inspect.getmembers(RawpClient):
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(member, property):
            signature = f"`{name}` (property)"
            doc = inspect.getdoc(member.fget) or ""
        elif inspect.isfunction(member) or inspect.ismethod(member):
            shown = "RawpClient" if name == "__init__" else name
            params = _signature(member)
            prefix = "await " if inspect.iscoroutinefunction(member) else ""
            if inspect.isasyncgenfunction(member):
                prefix = "async for … in "
            signature = f"`{prefix}{shown}({params})`"
            doc = inspect.getdoc(member) or ""
            if name == "__init__":
                doc = inspect.getdoc(RawpClient) or ""
        else:
            continue
        first = _markdown(doc.strip().split("\n\n")[0].replace("\n", " ").replace("|", "\\|"))
        lines.append(f"| {signature} | {first} |")
    return "\n".join(lines) + "\n"


def _signature(function: Any) -> str:
    params = []
    listed = list(inspect.signature(function).parameters.values())
    if inspect.isfunction(function):
        listed = listed[1:]  # self (a bound classmethod has no cls left to drop)
    for param in listed:
        if param.kind is param.VAR_POSITIONAL:
            params.append(f"*{param.name}")
            continue
        if param.kind is param.VAR_KEYWORD:
            params.append(f"**{param.name}")
            continue
        if param.kind is param.KEYWORD_ONLY and not any(p.startswith("*") for p in params):
            params.append("*")
        text = param.name
        if param.default is not param.empty:
            text += "=…"
        params.append(text)
    return ", ".join(params)


def _markdown(doc: str) -> str:
    """A docstring's reST roles and literals as Markdown code spans."""
    doc = re.sub(r":(?:meth|class|attr|func|data|mod|exc):`~?([^`]+)`", r"`\1`", doc)
    return doc.replace("``", "`")


DOC_SECTIONS: Final = {
    "docs/protocol.md": {"frames": frame_table},
    "docs/client.md": {"reference": client_reference},
}
"""Which generated sections each document holds (paths relative to the repository)."""


def replace_section(text: str, name: str, body: str) -> str:
    """``text`` with the lines between the ``name`` markers replaced by ``body``."""
    pattern = re.compile(
        rf"(<!-- {re.escape(name)}:begin[^>]*-->\n).*?(<!-- {re.escape(name)}:end -->)", re.S
    )
    if not pattern.search(text):
        raise ValueError(f"no <!-- {name}:begin --> … <!-- {name}:end --> markers")
    return pattern.sub(lambda m: m.group(1) + body + m.group(2), text, count=1)


def render_docs(
    root: Path, documents: Mapping[str, Mapping[str, Callable[[], str]]] | None = None
) -> dict[Path, str]:
    """Each document under ``root`` with its generated sections as the code makes them now
    (``documents``: another package's sections, e.g. the master's; default these)."""
    rendered: dict[Path, str] = {}
    for relative, sections in (DOC_SECTIONS if documents is None else documents).items():
        path = root / relative
        text = path.read_text(encoding="utf-8")
        for name, make in sections.items():
            text = replace_section(text, name, make())
        rendered[path] = text
    return rendered


def main(documents: Mapping[str, Mapping[str, Callable[[], str]]] | None = None) -> int:
    """``python -m protocol.docgen [--check]``: rewrite (or check) the generated sections."""
    import sys

    root = Path.cwd()
    check = "--check" in sys.argv[1:]
    stale = []
    for path, text in render_docs(root, documents).items():
        if path.read_text(encoding="utf-8") != text:
            stale.append(path)
            if not check:
                path.write_text(text, encoding="utf-8")
                print(f"wrote {path.relative_to(root)}")
    if check and stale:
        for path in stale:
            print(f"stale: {path.relative_to(root)}; run `make schemas`", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
