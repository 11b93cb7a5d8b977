"""The instructions a server process runs over a window, counted by callgrind (issue 16).

Attach rates and CPU time move with whatever else the machine's two shared cores run (the
same code measured up to 2× apart between runs of ``make bench ARGS=storm``); the user-space
instructions one process executes for the same work do not: valgrind's callgrind counts them,
the same total for the same interpreter, code and inputs whatever else the machine is doing.
What it does not count is the kernel's part (system calls, the loopback network stack), and
the process runs ~50× slower under it, so the counts come from a few hundred attaches.

A server is started under :func:`callgrind_wrapper` with instrumentation off (startup, the
warm-up round: not counted); :class:`CountedWindow` switches it on around the window and reads
the total of the dump it asks for at the end.
"""

from __future__ import annotations

import asyncio
import shutil
from pathlib import Path

__all__ = ["CountedWindow", "callgrind_wrapper"]

_DUMP_WAIT_S = 60.0


def callgrind_wrapper(directory: Path) -> list[str] | None:
    """The command to run a server's interpreter under callgrind (instrumentation off, dumps
    into ``directory``); None when valgrind is not installed."""
    valgrind, control = shutil.which("valgrind"), shutil.which("callgrind_control")
    if valgrind is None or control is None:
        return None
    return [
        valgrind,
        "--tool=callgrind",
        "--instr-atstart=no",
        f"--callgrind-out-file={directory}/callgrind.%p",
        "-q",
    ]


async def _control(*args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        "callgrind_control",
        *args,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    await asyncio.wait_for(proc.wait(), _DUMP_WAIT_S)


def _dumps(directory: Path, pid: int) -> list[Path]:
    return sorted(
        directory.glob(f"callgrind.{pid}.*"), key=lambda p: int(p.suffix.removeprefix("."))
    )


def _total(dump: Path) -> int:
    for line in dump.read_text().splitlines():
        if line.startswith("totals:"):
            return int(line.split()[1])
    raise ValueError(f"{dump}: no totals line")


class CountedWindow:
    """``async with CountedWindow(pid, directory):`` counts the instructions process ``pid``
    (started under :func:`callgrind_wrapper`) runs inside the block — counters zeroed and
    instrumentation on at entry, off and dumped at exit — into :attr:`instructions`."""

    def __init__(self, pid: int, directory: Path) -> None:
        self.pid = pid
        self.directory = directory
        self.instructions = 0
        self._dumps_before = 0

    async def __aenter__(self) -> CountedWindow:
        self._dumps_before = len(_dumps(self.directory, self.pid))
        await _control("--zero", str(self.pid))
        await _control("--instr=on", str(self.pid))
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await _control("--instr=off", str(self.pid))
        await _control("--dump=window", str(self.pid))
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _DUMP_WAIT_S
        while len(_dumps(self.directory, self.pid)) <= self._dumps_before:
            if loop.time() > deadline:
                raise TimeoutError(f"callgrind wrote no dump for process {self.pid}")
            await asyncio.sleep(0.1)
        await asyncio.sleep(0.2)  # the dump is complete once its file has its totals line
        self.instructions = _total(_dumps(self.directory, self.pid)[-1])
