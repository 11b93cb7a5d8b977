"""docs/http-api.md's route table lists exactly the routes the master's router serves: a
route added to the code and not to the table (or the other way round) fails here."""

from __future__ import annotations

import re
from pathlib import Path

from relay.config import Settings
from relay.http import create_app
from relay.hub import Hub
from relay.store.memory import MemoryStore

DOC = Path(__file__).resolve().parents[2] / "docs" / "http-api.md"
_ROUTE = re.compile(r"`((?:GET|POST|PUT|PATCH|DELETE) /[^`\s]*)")


def _shape(method: str, path: str) -> tuple[str, str]:
    """A route without its query string, every ``{parameter}`` as ``{}``."""
    return method, re.sub(r"\{[^}]*\}", "{}", path.split("?")[0])


def documented() -> set[tuple[str, str]]:
    """Every ``METHOD /path`` in the first column of the table under "## Routes"."""
    text = DOC.read_text(encoding="utf-8")
    table = text.split("## Routes", 1)[1].split("\n\n", 2)[1]
    routes: set[tuple[str, str]] = set()
    for row in table.splitlines()[2:]:
        first = row.split(" | ")[0]
        for found in _ROUTE.findall(first):
            method, path = found.split(" ", 1)
            routes.add(_shape(method, path))
    return routes


async def test_the_route_table_is_the_router() -> None:
    """Each route of the application is in the table, and the table names no other."""
    app = create_app(Hub(Settings(), MemoryStore()))  # the application a master serves
    served = {
        _shape(route.method, route.resource.canonical)
        for route in app.router.routes()
        if route.method != "HEAD" and route.resource is not None
    }
    table = documented()
    assert ("POST", "/v1/sessions/{}/ag-ui") in served  # the walk sees the AG-UI routes
    assert served - table == set(), "routes the table does not list"
    assert table - served == set(), "routes the table lists that are not served"
