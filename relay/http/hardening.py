"""The HTTP port's own defences, below the routes (issue 12; notes §10, §16.7).

* **Incomplete requests time out.** A connection must complete a request's headers within
  ``header_timeout_s`` (the WebSocket port's hello timeout) of its opening, or of the first
  byte of its next request on a kept-alive connection; an idle kept-alive connection is
  closed after :data:`IDLE_KEEPALIVE_S`. A connection that trickles bytes (slowloris) or
  sends nothing is closed then, so nobody exhausts the process's descriptors without a
  credential. A request being handled (an SSE stream) is not cut; a request *body* has its
  own deadline where it is read (:func:`relay.http.models.decode_body`).
* **Every error is problem+json**, aiohttp's own too: the parser's 400s (a bad request line,
  an unknown method, a malformed header) and any 500 are answered by
  :meth:`ProblemRequestHandler.handle_error` with ``application/problem+json`` — never a
  ``text/plain`` page and never a traceback.
* **No version banner.** ``Server: rawp`` on every answer instead of aiohttp's and
  Python's versions.
"""

from __future__ import annotations

import asyncio
from typing import Any, Final

import structlog
from aiohttp import web
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from protocol import names

from .problems import problem

__all__ = [
    "IDLE_KEEPALIVE_S",
    "SERVER_HEADER",
    "HardenedRunner",
    "ProblemRequestHandler",
    "hide_server_version",
    "peer_gone",
]

log = structlog.get_logger("rawp.http")

SERVER_HEADER: Final = "rawp"
_PEER_GONE: Final = 499  # the access log's status of an answer whose client left first
IDLE_KEEPALIVE_S: Final = 30.0


class ProblemRequestHandler(RequestHandler):
    """aiohttp's connection handler with a header deadline, answering its errors as problems."""

    header_timeout_s: float = 10.0
    _header_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        """A new connection has ``header_timeout_s`` to send its first request's headers."""
        super().connection_made(transport)
        self._arm_header_deadline()

    def data_received(self, data: bytes) -> None:
        """Bytes of a request whose headers are not complete yet start (or keep) the clock."""
        super().data_received(data)
        if self._messages:
            self._disarm_header_deadline()  # a whole request arrived: the handler takes it
        elif self._waiter is not None:
            self._arm_header_deadline()  # idle between requests, and bytes came: a new one
        # else a request is being handled (its body, an SSE stream): no header deadline

    def connection_lost(self, exc: BaseException | None) -> None:
        """Forget the deadline with the connection."""
        self._disarm_header_deadline()
        super().connection_lost(exc)

    def _arm_header_deadline(self) -> None:
        if self._header_deadline is None:
            self._header_deadline = self._loop.call_later(
                self.header_timeout_s, self._header_deadline_passed
            )

    def _disarm_header_deadline(self) -> None:
        if self._header_deadline is not None:
            self._header_deadline.cancel()
            self._header_deadline = None

    def _header_deadline_passed(self) -> None:
        self._header_deadline = None
        waiting = self._waiter is not None and not self._waiter.done()
        if waiting and not self._messages:
            self.log_debug("closing a connection that did not complete its request headers")
            self.force_close()

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        """The parser's 4xx (and any unexpected 500) as problem+json; the connection closes.

        A peer that reset or dropped its connection under a handler is the peer's doing, not
        the master's: logged at info, without a traceback (nothing can be answered to it).
        """
        if isinstance(exc, ConnectionError):
            peer_gone(request, exc)
            # Never reaches the client, which left: for the access log and the metrics.
            response = problem(_PEER_GONE, "the client closed the connection", code="client_gone")
        elif status >= 500:
            # Logged once, by aiohttp's own handler (which also checks nothing was sent yet).
            super().handle_error(request, status, exc, message)
            response = problem(status, "the master could not answer this request", code="internal")
        else:
            self.log_debug("refused a malformed request: %s", message)
            detail = "malformed HTTP request"
            if message:
                # aiohttp's parser messages echo received bytes: one line, cut short.
                detail += ": " + names.one_line(message.splitlines()[0][:200])
            response = problem(status, detail, code="bad_request")
        response.headers["Server"] = SERVER_HEADER
        response.force_close()
        return response


class _Server(web.Server):
    """aiohttp's server, making :class:`ProblemRequestHandler` connections."""

    header_timeout_s: float = 10.0

    def __call__(self) -> RequestHandler:
        handler = ProblemRequestHandler(self, loop=self._loop, **self._kwargs)
        handler.header_timeout_s = self.header_timeout_s
        return handler


class HardenedRunner(web.AppRunner):
    """``web.AppRunner`` with a header deadline and problem+json for aiohttp's own errors.

    ``header_timeout_s``: how long a connection may take to complete a request's headers.
    An idle kept-alive connection (nothing sent since its last answer) is closed after
    :data:`IDLE_KEEPALIVE_S`.
    """

    def __init__(self, app: web.Application, *, header_timeout_s: float, **kwargs: Any) -> None:
        super().__init__(app, keepalive_timeout=IDLE_KEEPALIVE_S, **kwargs)
        self._header_timeout_s = header_timeout_s

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _Server  # same state; only the connection class differs
        assert isinstance(server, _Server)
        server.header_timeout_s = self._header_timeout_s
        return server


def peer_gone(request: BaseRequest, exc: BaseException) -> None:
    """Log (info, no traceback) a client that reset or dropped its connection mid-answer."""
    log.info("http_client_gone", path=names.one_line(request.path[:200]), error=type(exc).__name__)


async def hide_server_version(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: ``Server: rawp``, not aiohttp's and Python's versions."""
    response.headers["Server"] = SERVER_HEADER
