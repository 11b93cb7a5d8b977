"""The ``rawp`` command: a thin dispatcher over each package's own ``cli`` module."""

__all__: list[str] = []
