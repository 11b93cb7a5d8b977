// A hostile or buggy master (a real WebSocket server on 127.0.0.1 written for the test):
// malformed frames surface as "error" events, never as exceptions out of the event loop, and
// frame content stays inert text.
import assert from "node:assert/strict";
import type { AddressInfo } from "node:net";
import { test } from "node:test";
import { WebSocketServer } from "ws";
import { FrameRefused, RawpClient } from "../src/client.js";
import { NodeWebSocket, until } from "./helpers.js";

const TS = "2026-11-29T09:00:00Z";
const TURN = "00000001-0000-4000-8000-000000000001";

test("malformed frames from a master become error events; the client stays connected and folds the good ones", async () => {
  const server = new WebSocketServer({ host: "127.0.0.1", port: 0, handleProtocols: () => "rawp.1" });
  await new Promise<void>((r) => server.once("listening", () => r()));
  const port = (server.address() as AddressInfo).port;
  let seq = 0;
  const env = (type: string, payload: unknown) => JSON.stringify({
    type, message_id: `m-${++seq}`, session_id: "s-h", timestamp: TS, seq,
    sender: { role: "client", participant_id: "p-agent" }, payload,
  });
  server.on("connection", (socket) => {
    socket.once("message", () => {
      socket.send(JSON.stringify({
        type: "connection.welcome", message_id: "w", session_id: "s-h", timestamp: TS,
        payload: {
          participant_id: "p-edge", generation: 1, resumed: false,
          session: { session_id: "s-h", name: "", status: "idle", head_seq: 0, epoch: "e", created_at: TS },
          reattach_window_ms: 1000, heartbeat_interval_ms: 20000, max_frame_bytes: 1 << 20,
          buffer: { policy: "RING", capacity_bytes: 1024 },
        },
      }));
      const garbage = [
        "not json", "[]", "null", '{"type":"agent.text.delta"}', '{"type":"vendor.x","message_id":"x","session_id":"s-h","timestamp":"' + TS + '"}',
        JSON.stringify({ type: "agent.text.delta", message_id: "z", session_id: "s-h", timestamp: TS, seq: "9", payload: { block_id: "b", delta: 1 } }),
        "{".repeat(5000),
        JSON.stringify({ type: "connection.ack", message_id: "a", session_id: "s-h", timestamp: TS, payload: { last_seq: -1 } }),
      ];
      socket.send(env("session.turn.start", { turn_id: TURN, turn_index: 0 }));
      for (const g of garbage) socket.send(g);
      socket.send(Buffer.from([0xff, 0x00]), { binary: true });
      socket.send(env("agent.text.delta", { block_id: "b", delta: '<img src=x onerror="globalThis.pwned=1">' }));
      socket.send(env("agent.text.delta", { block_id: 7, delta: "bad payload" })); // invalid, seq 3 skipped
      seq -= 1;
      socket.send(env("agent.text.delta", { block_id: "b", delta: "!" }));
    });
  });
  const edge = new RawpClient({ url: `ws://127.0.0.1:${port}/v1/ws`, sessionId: "s-h", role: "edge", token: "t", WebSocket: NodeWebSocket, backoff: { maxAttempts: 1 } });
  const errors: Error[] = [];
  edge.on("error", (e) => errors.push(e));
  edge.on("frame", () => {
    throw new Error("a listener's own bug"); // reported as an error event, not thrown
  });
  try {
    await edge.connect();
    await until(() => edge.view.blocks.some((b) => b.kind === "text" && b.text.endsWith("!")), "the good frames");
    assert.equal(edge.status, "connected");
    assert.equal(edge.undecodableFrames, 10); // 8 garbage texts, the binary message, the bad payload
    const text = edge.view.blocks.find((b) => b.kind === "text");
    assert.ok(text && text.kind === "text");
    assert.equal(text.text, '<img src=x onerror="globalThis.pwned=1">!');
    assert.equal((globalThis as Record<string, unknown>).pwned, undefined);
    assert.ok(errors.some((e) => e.message === "a listener's own bug"));
  } finally {
    await edge.close();
    await new Promise<void>((r) => server.close(() => r()));
  }
});

// The SDK's side of notes §16.3 against a scripted peer (the real master's version is in
// acks.test.ts, gated until the master sends acks): the peer commits every frame it gets with
// a cumulative connection.ack, refuses a turn end with a session.error naming the frame, and
// drops the first connection after two frames without acking the second.
test("send() resolves on the peer's cumulative ack, rejects on a refusal naming the frame, and frames of a dropped socket resolve after the reattach", async () => {
  const server = new WebSocketServer({ host: "127.0.0.1", port: 0, handleProtocols: () => "rawp.1" });
  await new Promise<void>((r) => server.once("listening", () => r()));
  const port = (server.address() as AddressInfo).port;
  let seq = 0;
  let connections = 0;
  let lastCommitted: string | null = null;
  const committed: string[] = [];
  server.on("connection", (socket) => {
    connections += 1;
    const first = connections === 1;
    let count = 0;
    const send = (type: string, payload: unknown) =>
      socket.send(JSON.stringify({ type, message_id: `srv-${++seq}`, session_id: "s-a", timestamp: TS, payload }));
    socket.on("message", (data) => {
      const frame = JSON.parse(String(data)) as { type: string; message_id: string; payload: { frames?: Array<{ message_id: string }> } };
      if (frame.type === "connection.hello") {
        send("connection.welcome", {
          participant_id: "p-agent", generation: connections, resumed: !first,
          session: { session_id: "s-a", name: "", status: "idle", head_seq: seq, epoch: "e", created_at: TS },
          reattach_window_ms: 1000, heartbeat_interval_ms: 20000, max_frame_bytes: 1 << 20,
          buffer: { policy: "RING", capacity_bytes: 1 << 16 },
          ...(lastCommitted !== null ? { received: { last_message_id: lastCommitted } } : {}),
        });
        if (!first) send("session.history", { frames: [], buffer_status: { policy_applied: "RING", truncated: false, lost_frame_count: 0 }, last_sync_timestamp: TS, last_message_id: "" });
        return;
      }
      if (frame.type === "connection.ack") return;
      count += 1;
      if (first && count === 2) {
        socket.terminate(); // received, never committed
        return;
      }
      if (frame.type === "session.turn.end") {
        send("session.error", { error_code: "turn_state", message: "no turn is open", fatal: false, ref_message_id: frame.message_id });
        return;
      }
      for (const inner of frame.payload.frames ?? []) committed.push(inner.message_id);
      committed.push(frame.message_id);
      lastCommitted = frame.message_id;
      send("connection.ack", { last_seq: ++seq, last_message_id: frame.message_id });
    });
  });
  const agent = new RawpClient({
    url: `ws://127.0.0.1:${port}/v1/ws`, sessionId: "s-a", role: "client", token: "t",
    WebSocket: NodeWebSocket, backoff: { initialMs: 10, maxMs: 50 },
  });
  try {
    await agent.connect();
    const a = agent.textDelta("b1", "a"); // committed
    const b = agent.textDelta("b1", "b"); // the socket drops with it unacked
    const ra = await a;
    assert.equal(ra.via, "ack");
    assert.equal(typeof ra.seq, "number");
    await agent.waitStatus("reconnecting");
    const rb = await b; // resent in the reattach history, committed with it
    assert.equal(rb.via, "ack");
    assert.equal(rb.seq, null); // the ack named the history, not this frame
    assert.equal(agent.inFlightCount, 0);
    await assert.rejects(agent.turnEnd(TURN), (e: unknown) => e instanceof FrameRefused && e.errorCode === "turn_state");
    const rc = await agent.textDelta("b1", "c");
    assert.equal(rc.frame.payload.delta, "c");
    assert.deepEqual(committed.filter((id) => [ra, rb, rc].some((r) => r.frame.message_id === id)).length, 3);
  } finally {
    await agent.close();
    await new Promise<void>((r) => server.close(() => r()));
  }
});
