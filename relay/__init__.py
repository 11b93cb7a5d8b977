"""The RAWP master relay: WebSocket and HTTP front ends over a session store."""

__all__: list[str] = []
