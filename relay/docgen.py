"""The master's reference tables generated from its code (as :mod:`protocol.docgen` does for
the protocol's): the exit statuses of a failed start in ``docs/operations.md``.

``make schemas`` runs ``python -m relay.docgen``; a test checks the document is current.
"""

from __future__ import annotations

from typing import Final

from protocol import docgen

from .startup import exit_code_table

__all__ = ["DOC_SECTIONS", "main"]

DOC_SECTIONS: Final = {"docs/operations.md": {"exit-codes": exit_code_table}}
"""Which generated sections each document of the master holds."""


def main() -> int:
    """``python -m relay.docgen [--check]``: rewrite (or check) the sections."""
    return docgen.main(DOC_SECTIONS)


if __name__ == "__main__":
    raise SystemExit(main())
