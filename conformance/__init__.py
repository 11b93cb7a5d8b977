"""Black-box conformance runner: checks any RAWP master against the spec."""

__all__: list[str] = []
