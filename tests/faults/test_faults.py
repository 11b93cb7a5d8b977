"""A short seeded slice of the fault suite (``make bench ARGS=fault_suite`` runs 500 trials).

Each trial runs against real ``rawp serve`` nodes and a real redis-server through fault
proxies (tests/faults/harness.py); the checker's findings are the assertion.
"""

from __future__ import annotations

import asyncio
import json
import random

import pytest

from bench._workload import hello
from bench._wsraw import open_raw
from tests.faults.harness import API_KEY, FAULTS, FaultCluster, _history, _script, run_trial

__all__: list[str] = []

# one cluster for the module (each trial heals it and uses a session of its own)
pytestmark = [
    pytest.mark.redis,
    pytest.mark.timeout(120),
    pytest.mark.asyncio(loop_scope="module"),
]


@pytest.mark.parametrize("fault", FAULTS)
async def test_each_fault_keeps_the_log_true(cluster: FaultCluster, fault: str) -> None:
    """Under each fault alone, the checker finds the log exact, ordered, fenced and replayable."""
    seed = 100 + FAULTS.index(fault)
    result = await run_trial(cluster, seed=seed, faults=(fault,), fault_count=1)
    assert result.ok, f"seed {result.seed}: {result.problems}"


@pytest.mark.parametrize("seed", range(4))
async def test_seeded_mixed_faults_keep_the_log_true(cluster: FaultCluster, seed: int) -> None:
    """Two to three faults of any kind in one trial: the checker finds nothing."""
    result = await run_trial(cluster, seed=seed, fault_count=2 + seed % 2)
    assert result.ok, f"seed {result.seed} {dict(result.faults)}: {result.problems}"


async def test_the_seed_whose_sweep_came_late_keeps_the_log_true(cluster: FaultCluster) -> None:
    """Suite seed 10136 (edge drop, lost replies, a long pause of the client's node): the
    sweep often reaches the session after the client reattached under the node's new lease;
    it must leave that client alone (it finalized it in about 4 runs of 10 before)."""
    seed = 10136
    result = await run_trial(cluster, seed=seed, fault_count=random.Random(seed).randint(1, 3))
    assert result.ok, f"seed {seed} {dict(result.faults)}: {result.problems}"


async def test_a_node_declared_dead_logs_nothing_after_its_sweep(cluster: FaultCluster) -> None:
    """A client's node paused past dead-after is swept; what it held, sent on resume, is
    refused (fenced), it closes the client 1001, and the log ends with the finalization."""
    sid = "s-fenced"
    victim, other = cluster.nodes
    client = await open_raw("127.0.0.1", victim.ws_port)
    client.send_text(hello(sid, "client", API_KEY, create=True))
    client_welcome = await client.recv()
    assert json.loads(client_welcome)["type"] == "connection.welcome"
    script = _script(sid, random.Random(7), 1)
    client.send_text(script[0])  # the turn starts
    client.send_text(script[1])
    async with asyncio.timeout(10):
        # presence, start, the master's session.status (running, notes §17.4), delta
        while len(await cluster.log(sid)) < 4:
            await asyncio.sleep(0.05)
    cluster.pause(victim)
    async with asyncio.timeout(30):  # the other node sweeps: the turn is finalized
        while not any(b'"synthetic":true' in e.data for e in await cluster.log(sid)):
            await asyncio.sleep(0.05)
    for frame in script[2:6]:  # buffered in the paused node's socket
        client.send_text(frame)
    swept = len(await cluster.log(sid))
    cluster.resume(victim)
    assert await client.wait_closed(timeout=20) == 1001
    log = await cluster.log(sid)
    assert [e.sender_role for e in log[swept:]] == [], "the fenced node logged after the sweep"
    assert all(e.sender_role != "client" for e in log[4:])
    # Under its new lease the node serves again: the client comes back through it, its
    # history unfinalizes, and what it sends from there is logged.
    welcome_frame = json.loads(client_welcome)
    again = await open_raw("127.0.0.1", victim.ws_port)
    pid = welcome_frame["payload"]["participant_id"]
    again.send_text(hello(sid, "client", API_KEY, participant_id=pid))
    welcome = json.loads(await again.recv())
    received = welcome["payload"]["received"]["last_message_id"]
    assert received == json.loads(script[1])["message_id"]
    again.send_text(_history(sid, script[2:6], received))
    async with asyncio.timeout(20):
        while not any(e.type == "session.history" for e in await cluster.log(sid)):
            await asyncio.sleep(0.05)
    again.abort()
    assert other.up
