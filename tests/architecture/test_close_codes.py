"""Close codes are defined once, in :class:`protocol.errors.CloseCode` (issue 14)."""

from __future__ import annotations

import ast
from pathlib import Path

from protocol.errors import CloseCode, HandshakeError
from tests.architecture.private_names import PRODUCT_PACKAGES, ROOT

__all__: list[str] = []

_RAWP_RANGE = range(4400, 4500)  # the RAWP close codes (notes §5, §11)


def _subclasses(cls: type[HandshakeError]) -> list[type[HandshakeError]]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def test_every_handshake_error_closes_with_a_close_code_member() -> None:
    """Each handshake error's close code is one of the enum's members."""
    for cls in _subclasses(HandshakeError):
        assert cls.close_code in set(CloseCode), cls


def test_no_module_but_errors_names_a_rawp_close_code_literal() -> None:
    """``X = 4409`` anywhere else would be the second definition issue 14 removed."""
    errors_py = ROOT / "protocol" / "errors.py"
    offenders: list[str] = []
    for path in sorted(p for pkg in PRODUCT_PACKAGES for p in (ROOT / pkg).rglob("*.py")):
        if path == errors_py:
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            value = node.value if isinstance(node, ast.Assign | ast.AnnAssign) else None
            if (
                isinstance(value, ast.Constant)
                and isinstance(value.value, int)
                and value.value in _RAWP_RANGE
            ):
                offenders.append(f"{Path(path).relative_to(ROOT)}:{node.lineno}")
    assert not offenders, "use protocol.errors.CloseCode: " + ", ".join(offenders)
