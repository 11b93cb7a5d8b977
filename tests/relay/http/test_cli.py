"""``rawp tokens create|revoke`` against a running master, ``rawp keys revoke`` on Redis."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from protocol.errors import BadCredential
from rawp.cli import main
from relay.auth import Authenticator, digest
from relay.server import Master
from relay.store import open_store
from tests.e2e.conftest import API_KEY
from tests.relay.http.conftest import Api


async def test_tokens_create_and_revoke(
    api: Api, master: Master, capsys: pytest.CaptureFixture[str]
) -> None:
    """The CLI issues a token over HTTP (printed once) and revokes it by id."""
    await api.create("s-cli")
    base = ["--url", master.http_url, "--api-key", API_KEY]
    code = await asyncio.to_thread(
        main, ["tokens", "create", "s-cli", "--grant", "delete", "--ttl", "60", *base]
    )
    assert code == 0
    out, err = capsys.readouterr()
    token = out.strip()
    assert token.startswith("st_")
    assert "shown once" in err
    who = await api.get("/v1/whoami", token=token)
    assert who.body["grants"] == ["delete"]
    code = await asyncio.to_thread(main, ["tokens", "revoke", digest(token), *base])
    assert code == 0
    assert (await api.get("/v1/whoami", token=token)).status == 401
    with pytest.raises(SystemExit, match="404"):
        await asyncio.to_thread(main, ["tokens", "create", "s-nope", *base])


@pytest.mark.redis
def test_keys_revoke_in_a_shared_store(
    redis_server: object, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A key created in Redis with the CLI is refused once revoked with the CLI."""
    url = redis_server.url  # type: ignore[attr-defined]
    assert main(["keys", "create", "--workspace", "cli", "--store", url]) == 0
    key = capsys.readouterr().out.strip()

    async def check() -> str:
        store = open_store(url)
        await store.start()
        try:
            auth = Authenticator(store)
            try:
                principal = await auth.authenticate(key)
            except BadCredential as exc:
                return exc.message
            return principal.workspace
        finally:
            await store.close()

    assert asyncio.run(check()) == "cli"
    assert main(["keys", "revoke", key, "--store", url]) == 0
    assert "revoked" in asyncio.run(check())
    assert main(["keys", "revoke", "0" * 64, "--store", url]) == 1
