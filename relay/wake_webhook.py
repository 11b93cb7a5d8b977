"""The sender of ``--wake-webhook``: one signed HTTP POST per due wake (notes §17.5, §17.12).

The master's durable outbox decides *when* to call :meth:`WakeWebhook.post` and how often to
try again (:meth:`WakeWebhook.retry_delay`); this module only says how one attempt went, as an
:class:`Outcome` and a short reason for the logs, and never raises into its caller.

The request: ``POST`` of a compact JSON body with a stable key order::

    {"type":"session.wake","session_id":…,"revisit_id":…,"at":…,"reason":…,"wake_seq":…}

with ``Content-Type: application/json``, ``RAWP-Signature: t=<unix>,v1=<hex>`` (HMAC-SHA256
of ``"<unix>." + body`` under the secret: :func:`sign`) and ``RAWP-Webhook-Id:
<session_id>/<revisit_id>``, the same at every attempt, so a receiver can drop a repeat.

Answers: 2xx is delivered; 408, 429 and 5xx, a timeout or a connection that fails are tried
again; a 3xx is tried again too — redirects are never followed, since following one would
send the signed body to a place the operator did not configure; any other 4xx gives up (the
receiver refuses this wake for good). At most :data:`MAX_RESPONSE_BYTES` of an answer are read.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import json
import random
import time
import urllib.parse
from dataclasses import dataclass
from typing import Final

import aiohttp

from protocol.version import VERSION

__all__ = [
    "MAX_RESPONSE_BYTES",
    "RETRY_BASE_S",
    "RETRY_CAP_S",
    "SIGNATURE_HEADER",
    "WEBHOOK_ID_HEADER",
    "Outcome",
    "WakeNotice",
    "WakeWebhook",
    "check_url",
    "sign",
    "wake_body",
]

SIGNATURE_HEADER: Final = "RAWP-Signature"
WEBHOOK_ID_HEADER: Final = "RAWP-Webhook-Id"
MAX_RESPONSE_BYTES: Final = 64 << 10
"""At most this much of an answer is read (and dropped): a receiver cannot make the master
hold a large or endless body."""
RETRY_BASE_S: Final = 1.0
RETRY_CAP_S: Final = 300.0


@dataclass(frozen=True)
class WakeNotice:
    """One due wake, as the webhook's body states it."""

    session_id: str
    revisit_id: str
    at: str
    reason: str | None
    wake_seq: int


class Outcome(enum.Enum):
    """How one attempt went."""

    DELIVERED = "delivered"
    RETRY = "retry"
    GIVE_UP = "give_up"


def sign(secret: bytes, timestamp: int, body: bytes) -> str:
    """The ``RAWP-Signature`` value: ``t=<unix>,v1=<hex HMAC-SHA256(secret, "<unix>." + body)>``.

    The timestamp is inside the signed text, so a receiver that refuses old timestamps
    (e.g. more than 5 minutes off) cannot be fed a recorded request again later.
    """
    mac = hmac.new(secret, f"{timestamp}.".encode("ascii") + body, hashlib.sha256)
    return f"t={timestamp},v1={mac.hexdigest()}"


def wake_body(notice: WakeNotice) -> bytes:
    """The POST body: compact JSON, keys in a fixed order, non-ASCII escaped."""
    return json.dumps(
        {
            "type": "session.wake",
            "session_id": notice.session_id,
            "revisit_id": notice.revisit_id,
            "at": notice.at,
            "reason": notice.reason,
            "wake_seq": notice.wake_seq,
        },
        separators=(",", ":"),
    ).encode("ascii")


def check_url(url: str) -> str:
    """``url`` when it is an ``http://`` or ``https://`` URL with a host; else ValueError."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - a port that is not a number raises here
    except ValueError:
        raise ValueError("an http:// or https:// URL is needed") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("an http:// or https:// URL with a host is needed")
    if any(ch.isspace() or ord(ch) < 0x20 or ord(ch) == 0x7F for ch in url):
        raise ValueError("a URL without spaces or control characters is needed")
    return url


def _retryable(status: int) -> bool:
    return status in (408, 429) or status >= 500 or 300 <= status < 400


class WakeWebhook:
    """Posts wake notices to one URL, signed with one secret.

    The HTTP session is made on the first :meth:`post` (inside the running loop) and reused;
    :meth:`aclose` closes it.
    """

    def __init__(self, url: str, secret: bytes, *, timeout: float = 10.0) -> None:
        self._url = check_url(url)
        if not secret:
            raise ValueError("the webhook secret is empty")
        self._secret = secret
        self._timeout = timeout
        self._session: aiohttp.ClientSession | None = None

    def __repr__(self) -> str:  # the secret never shows
        return f"WakeWebhook({self._url!r}, secret=***)"

    @property
    def url(self) -> str:
        """Where the wakes go."""
        return self._url

    async def post(self, notice: WakeNotice) -> tuple[Outcome, str]:
        """One attempt to deliver ``notice``: its outcome and a short reason for the logs."""
        body = wake_body(notice)
        headers = {
            "Content-Type": "application/json",
            "User-Agent": f"rawp/{VERSION}",
            SIGNATURE_HEADER: sign(self._secret, int(time.time()), body),
            WEBHOOK_ID_HEADER: f"{notice.session_id}/{notice.revisit_id}",
        }
        try:
            session = self._client()
            async with session.post(
                self._url, data=body, headers=headers, allow_redirects=False
            ) as response:
                status = response.status
                # Read a bounded part so the connection can be reused; the content is not used.
                await response.content.read(MAX_RESPONSE_BYTES)
        except TimeoutError:
            return Outcome.RETRY, f"no answer within {self._timeout:g}s"
        except aiohttp.ClientConnectorError as exc:
            return Outcome.RETRY, f"cannot connect: {exc.os_error.strerror or 'refused'}"
        except (aiohttp.ClientError, OSError, ValueError) as exc:
            return Outcome.RETRY, f"request failed: {type(exc).__name__}"
        if 200 <= status < 300:
            return Outcome.DELIVERED, f"HTTP {status}"
        if 300 <= status < 400:
            return Outcome.RETRY, f"HTTP {status}: redirect not followed"
        if _retryable(status):
            return Outcome.RETRY, f"HTTP {status}"
        return Outcome.GIVE_UP, f"HTTP {status}: refused by the receiver"

    def retry_delay(self, attempt: int) -> float:
        """Seconds to wait after the ``attempt``-th failed attempt (1, 2, …): full jitter,
        a random time from 0 up to 1 s doubled per attempt, never more than 300 s."""
        exponent = min(max(attempt, 1) - 1, 16)  # 2**16 s is past the cap already
        ceiling = min(RETRY_CAP_S, RETRY_BASE_S * 2.0**exponent)
        return random.uniform(0.0, ceiling)

    async def aclose(self) -> None:
        """Close the HTTP session (its pooled connections)."""
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=self._timeout),
                # The webhook's host is the operator's: no proxy or .netrc from the environment.
                trust_env=False,
                raise_for_status=False,
            )
        return self._session
