"""The redis store's Lua scripts: every file shipped, loaded, registered, documented, valid."""

from __future__ import annotations

import contextlib
import re
from importlib.resources import files
from typing import Any

import pytest

from relay.store.redis import lua
from tests.support.redis_server import RedisServer

__all__: list[str] = []


def script_files() -> dict[str, str]:
    """Every ``scripts/*.lua`` of the installed package, by file stem."""
    folder = files("relay.store.redis").joinpath("scripts")
    return {
        item.name.removesuffix(".lua"): item.read_text(encoding="utf-8")
        for item in folder.iterdir()
        if item.name.endswith(".lua")
    }


class _Recorder:
    """Stands in for a redis client: records what is registered."""

    def __init__(self) -> None:
        self.registered: list[str] = []

    def register_script(self, source: str) -> Any:
        self.registered.append(source)
        return source


def test_every_script_file_is_loaded() -> None:
    """Each .lua file in the package is in SOURCES, byte for byte, and nothing else is."""
    found = script_files()
    assert found, "no scripts/*.lua in the package (package data missing?)"
    assert found == lua.SOURCES


def test_every_script_is_registered() -> None:
    """Scripts registers each loaded script once, under its file stem."""
    recorder = _Recorder()
    scripts = lua.Scripts(recorder)
    assert sorted(recorder.registered) == sorted(lua.SOURCES.values())
    assert {name: getattr(scripts, name) for name in lua.SOURCES} == lua.SOURCES


@pytest.mark.parametrize("name", sorted(lua.SOURCES))
def test_each_script_opens_with_its_keys_argv_and_returns(name: str) -> None:
    """A script's leading comment says what it does, its KEYS, its ARGV and what it returns."""
    header: list[str] = []
    for line in lua.SOURCES[name].splitlines():
        if not line.startswith("--"):
            break
        header.append(line)
    assert header, f"{name}.lua has no header comment"
    assert header[0].startswith("-- rawp "), header[0]
    for word in ("KEYS", "ARGV", "Returns"):
        assert any(re.match(rf"--\s+{word}\b", line) for line in header), (name, word)


@pytest.mark.redis
def test_every_script_compiles_on_redis(redis_server: RedisServer) -> None:
    """Redis accepts every script (SCRIPT LOAD compiles it; a syntax error fails here)."""
    with contextlib.closing(redis_server.client()) as client:
        for name, source in lua.SOURCES.items():
            assert client.script_load(source), name
