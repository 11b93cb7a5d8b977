"""ACP both ways (notes §17.11): ``rawp bridge acp`` puts an ACP agent behind a session
(:class:`AcpBridge`), ``rawp acp attach`` lets an ACP editor attach to one (``AcpAttach``).

:class:`AcpBridge` is imported on first use: the ACP package's models take a second to load,
and every ``rawp`` command builds its parser from this package's ``cli`` module.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .bridge import AcpBridge

__all__ = ["AcpBridge"]


def __getattr__(name: str) -> Any:
    if name == "AcpBridge":
        from .bridge import AcpBridge

        return AcpBridge
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
