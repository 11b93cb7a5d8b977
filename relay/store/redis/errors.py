"""redis-py's failures as the store's errors (protocol.errors), in one place."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Final

import redis.exceptions as rexc

from protocol.errors import StoreError, StoreUnavailableError

__all__ = ["NodeFencedError", "mapped", "store_error"]

# ResponseError prefixes that mean "Redis cannot take writes right now", not "bad request".
_UNAVAILABLE_REPLIES: Final = (
    "LOADING",
    "MISCONF",
    "NOREPLICAS",
    "OOM",
    "READONLY",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MASTERDOWN",
    "BUSY",
)


class NodeFencedError(StoreUnavailableError):
    """The session refused this node's entries: the node was declared dead and the session
    recovered by another node (notes §12; docs/operations.md "fencing"). Nothing accepted
    under the fenced lease epoch may be logged; the node closes its connections."""


def store_error(exc: BaseException) -> StoreError:
    """The store's error for a redis-py (or socket) failure."""
    if isinstance(exc, TimeoutError | rexc.ConnectionError | rexc.TimeoutError | OSError):
        return StoreUnavailableError(f"redis unreachable: {exc}")
    if isinstance(exc, rexc.ResponseError):
        text = str(exc)
        if text.startswith(_UNAVAILABLE_REPLIES) or isinstance(exc, rexc.ClusterDownError):
            return StoreUnavailableError(f"redis refused the command: {text}")
        return StoreError(f"redis error: {text}")
    if isinstance(exc, rexc.RedisClusterException):
        return StoreUnavailableError(f"redis cluster unavailable: {exc}")
    return StoreError(f"redis error: {exc}")


@contextlib.contextmanager
def mapped() -> Iterator[None]:
    """Raise the store's errors (StoreUnavailableError et al.) instead of redis-py's."""
    try:
        yield
    except (TimeoutError, OSError, rexc.RedisError) as exc:
        raise store_error(exc) from exc
