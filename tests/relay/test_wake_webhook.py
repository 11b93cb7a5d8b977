"""The wake webhook's sender against a real HTTP server on a loopback port."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import re
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from aiohttp import web

from relay.config import ConfigError, Settings, settings_from_args
from relay.wake_webhook import (
    RETRY_CAP_S,
    Outcome,
    WakeNotice,
    WakeWebhook,
    check_url,
    sign,
)

SECRET = b"whsec-test-0123456789"
NOTICE = WakeNotice(
    session_id="sess-1",
    revisit_id="rv-1",
    at="2026-12-08T01:00:00Z",
    reason="check the build \u00e9",
    wake_seq=42,
)
DOCS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


@dataclass
class Receiver:
    """A local HTTP server that records what it is sent and answers with ``respond``."""

    url: str = ""
    requests: list[tuple[dict[str, str], bytes]] = field(default_factory=list)
    respond: Callable[[web.Request], Awaitable[web.StreamResponse]] | None = None


@pytest.fixture
async def receiver() -> AsyncIterator[Receiver]:
    box = Receiver()

    async def handle(request: web.Request) -> web.StreamResponse:
        box.requests.append((dict(request.headers), await request.read()))
        if box.respond is not None:
            return await box.respond(request)
        return web.Response(status=204)

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handle)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    box.url = f"http://127.0.0.1:{port}/hooks/wake"
    try:
        yield box
    finally:
        await runner.cleanup()


def _verify(secret: bytes, header: str, body: bytes) -> bool:
    parts = dict(item.split("=", 1) for item in header.split(","))
    expected = hmac.new(secret, f"{parts['t']}.".encode() + body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, parts["v1"])


async def test_delivered_body_and_signature(receiver: Receiver) -> None:
    """A 2xx is DELIVERED; the body is the compact wake, signed under the secret only."""
    hook = WakeWebhook(receiver.url, SECRET)
    try:
        outcome, reason = await hook.post(NOTICE)
    finally:
        await hook.aclose()
    assert (outcome, reason) == (Outcome.DELIVERED, "HTTP 204")
    headers, body = receiver.requests[0]
    assert body == (
        b'{"type":"session.wake","session_id":"sess-1","revisit_id":"rv-1",'
        b'"at":"2026-12-08T01:00:00Z","reason":"check the build \\u00e9","wake_seq":42}'
    )
    assert headers["Content-Type"] == "application/json"
    assert headers["RAWP-Webhook-Id"] == "sess-1/rv-1"
    signature = headers["RAWP-Signature"]
    assert re.fullmatch(r"t=\d+,v1=[0-9a-f]{64}", signature)
    assert abs(int(signature[2:].split(",")[0]) - time.time()) < 60
    assert _verify(SECRET, signature, body)
    assert not _verify(b"another-secret", signature, body)
    assert not _verify(SECRET, signature, body.replace(b"42", b"43"))


def test_sign_is_hmac_of_timestamp_dot_body() -> None:
    """sign() is t=<unix>,v1=<hex HMAC-SHA256(secret, "<unix>." + body)>."""
    mac = hmac.new(b"k", b"1700000000.{}", hashlib.sha256).hexdigest()
    assert sign(b"k", 1_700_000_000, b"{}") == f"t=1700000000,v1={mac}"


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (200, Outcome.DELIVERED),
        (202, Outcome.DELIVERED),
        (500, Outcome.RETRY),
        (503, Outcome.RETRY),
        (408, Outcome.RETRY),
        (429, Outcome.RETRY),
        (410, Outcome.GIVE_UP),
        (400, Outcome.GIVE_UP),
        (401, Outcome.GIVE_UP),
    ],
)
async def test_status_outcomes(receiver: Receiver, status: int, expected: Outcome) -> None:
    """2xx is delivered, 408/429/5xx are retried, any other 4xx gives up."""

    async def answer(request: web.Request) -> web.StreamResponse:
        return web.Response(status=status, text="x" * 10)

    receiver.respond = answer
    hook = WakeWebhook(receiver.url, SECRET)
    try:
        outcome, reason = await hook.post(NOTICE)
    finally:
        await hook.aclose()
    assert outcome is expected
    assert str(status) in reason


async def test_redirect_is_not_followed(receiver: Receiver) -> None:
    """A 3xx is retried, and its Location is never requested."""

    async def answer(request: web.Request) -> web.StreamResponse:
        if request.path == "/elsewhere":
            return web.Response(status=200)
        raise web.HTTPFound("/elsewhere")

    receiver.respond = answer
    hook = WakeWebhook(receiver.url, SECRET)
    try:
        outcome, reason = await hook.post(NOTICE)
    finally:
        await hook.aclose()
    assert outcome is Outcome.RETRY
    assert "redirect" in reason
    assert len(receiver.requests) == 1


async def test_slow_receiver_times_out(receiver: Receiver) -> None:
    """A receiver slower than the timeout is retried, within about the timeout."""

    async def answer(request: web.Request) -> web.StreamResponse:
        await asyncio.sleep(1.5)  # past the timeout; short so the server's teardown is quick
        return web.Response(status=200)

    receiver.respond = answer
    hook = WakeWebhook(receiver.url, SECRET, timeout=0.3)
    try:
        outcome, reason = await asyncio.wait_for(hook.post(NOTICE), 4)
    finally:
        await hook.aclose()
    assert outcome is Outcome.RETRY
    assert "0.3s" in reason


async def test_endless_body_is_read_bounded(receiver: Receiver) -> None:
    """A 2xx whose body never ends still returns: only a bounded part of it is read."""

    async def answer(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(status=200)
        await response.prepare(request)
        chunk = b"y" * 65536
        for _ in range(200):  # 13 MB, far past what the sender reads
            await response.write(chunk)
        return response

    receiver.respond = answer
    hook = WakeWebhook(receiver.url, SECRET)
    try:
        outcome, _ = await asyncio.wait_for(hook.post(NOTICE), 5)
    finally:
        await hook.aclose()
    assert outcome is Outcome.DELIVERED


async def test_receiver_down_is_retried() -> None:
    """A port nobody listens on is retried, not raised."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    hook = WakeWebhook(f"http://127.0.0.1:{port}/", SECRET)
    try:
        outcome, reason = await hook.post(NOTICE)
    finally:
        await hook.aclose()
    assert outcome is Outcome.RETRY
    assert reason.startswith("cannot connect")


@pytest.mark.parametrize("attempt", [0, 1, 2, 3, 5, 8, 9, 20, 1000, 10**9])
def test_retry_delay_bounds(attempt: int) -> None:
    """retry_delay is full jitter under 1 s doubled per attempt, never above 300 s."""
    hook = WakeWebhook("http://127.0.0.1:9/", SECRET)
    ceiling = min(RETRY_CAP_S, 2.0 ** (max(attempt, 1) - 1)) if attempt < 64 else RETRY_CAP_S
    delays = [hook.retry_delay(attempt) for _ in range(300)]
    assert all(0.0 <= d <= ceiling for d in delays)
    assert max(delays) > ceiling / 2  # jittered over the whole range, not pinned at 0


def test_secret_not_in_repr() -> None:
    """Neither the sender's nor the settings' repr shows the secret."""
    hook = WakeWebhook("https://example.invalid/hook", SECRET)
    assert SECRET.decode() not in repr(hook)
    settings = Settings(wake_webhook="https://h.invalid/", wake_webhook_secret="s3cr3t-value")
    assert "s3cr3t-value" not in repr(settings)


@pytest.mark.parametrize(
    "url", ["ftp://h/x", "file:///etc/passwd", "http://", "not a url", "http://h:abc/"]
)
def test_url_must_be_http(url: str) -> None:
    """Only http:// and https:// URLs with a host are accepted."""
    with pytest.raises(ValueError, match="http"):
        check_url(url)


def _serve_args(*argv: str) -> Settings:
    import argparse

    from relay.config import add_serve_arguments

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    return settings_from_args(parser.parse_args(list(argv)), environ={})


def test_url_without_secret_is_refused() -> None:
    """--wake-webhook without its secret is a one-line start-up error."""
    with pytest.raises(ConfigError, match="--wake-webhook-secret"):
        _serve_args("--wake-webhook", "https://hooks.example/wake")


def test_secret_from_environment_never_echoed() -> None:
    """RAWP_WAKE_WEBHOOK_SECRET is read; a bad one is refused without showing it."""
    import argparse

    from relay.config import add_serve_arguments

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args(["--wake-webhook", "https://hooks.example/wake"])
    settings = settings_from_args(args, environ={"RAWP_WAKE_WEBHOOK_SECRET": "env-secret"})
    assert settings.wake_webhook_secret == "env-secret"
    with pytest.raises(ConfigError) as refused:
        settings_from_args(args, environ={"RAWP_WAKE_WEBHOOK_SECRET": "   "})
    assert "RAWP_WAKE_WEBHOOK_SECRET=***" in str(refused.value)


def test_serve_refuses_webhook_without_secret_in_one_line() -> None:
    """rawp serve with --wake-webhook and no secret exits 2 with one stderr line naming it."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("RAWP_")}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rawp.cli",
            "serve",
            "--store",
            "memory",
            "--wake-webhook",
            "http://x/",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1
    assert "--wake-webhook-secret" in done.stderr


def test_a_refused_setting_never_shows_the_secret() -> None:
    """A refusal beside a given secret (a bad URL, a blank secret) does not print it."""
    import argparse

    from relay.config import add_serve_arguments

    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    env = {"RAWP_WAKE_WEBHOOK_SECRET": "top-secret-value", "RAWP_WAKE_WEBHOOK": "ftp://x/"}
    with pytest.raises(ConfigError) as refused:
        settings_from_args(parser.parse_args([]), environ=env)
    assert "top-secret-value" not in str(refused.value)
    assert "RAWP_WAKE_WEBHOOK=" in str(refused.value)


def test_docs_receiver_snippet_verifies() -> None:
    """The receiver snippet in docs/operations.md accepts a signed body and refuses others."""
    text = DOCS.read_text()
    section = text[text.index("## Wake webhook") :]
    snippet = re.search(r"```python\n(.*?)```", section, re.S)
    assert snippet is not None
    scope: dict[str, object] = {}
    exec(snippet.group(1), scope)
    verify = scope["verify"]
    assert callable(verify)
    body = json.dumps({"type": "session.wake"}).encode()
    now = int(time.time())
    header = sign(SECRET, now, body)
    assert verify(SECRET, header, body) is True
    assert verify(b"wrong", header, body) is False
    assert verify(SECRET, header, body + b" ") is False
    assert verify(SECRET, sign(SECRET, now - 3600, body), body) is False  # too old
    assert verify(SECRET, "garbage", body) is False
