"""ACP both ways (notes §17.11): ``rawp bridge acp`` puts an ACP agent behind a session
(:class:`AcpBridge`), ``rawp acp attach`` lets an ACP editor attach to one (``AcpAttach``)."""

from .bridge import AcpBridge

__all__ = ["AcpBridge"]
