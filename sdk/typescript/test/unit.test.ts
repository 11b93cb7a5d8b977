// Unit tests: generated types, decoder, buffers, backoff, persistence, the view's §7.8 path.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { BoundedBuffer, selectBacklog } from "../src/buffers.js";
import { Backoff } from "../src/client.js";
import { decode } from "../src/codec.js";
import { memoryStore, webStore } from "../src/persistence.js";
import { continueSession } from "../src/continue.js";
import { SessionState, check, allowedTypes } from "../src/state.js";
import { SessionView, pyRepr } from "../src/view.js";
import { packageDir, repoDir } from "./helpers.js";

test("the checked-in frame types, schema module and direction table equal a fresh generation from schemas/", () => {
  const run = spawnSync(process.execPath, [join(packageDir, "scripts", "gen-types.mjs"), "--check"], { encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr + run.stdout);
});

test("the direction table is each role's frame union in schemas/", () => {
  for (const role of ["client", "edge", "master"] as const) {
    const schema = JSON.parse(readFileSync(join(repoDir, "schemas", `${role}-frame.json`), "utf8"));
    const types = (schema.anyOf as Array<{ $ref: string }>).map((m) => schema.$defs[m.$ref.replace("#/$defs/", "")].properties.type.enum[0]);
    assert.deepEqual([...allowedTypes(role)].sort(), [...types].sort(), role);
  }
  assert.ok(allowedTypes("master").has("connection.ack")); // producer acks, notes §16.3
  assert.ok(allowedTypes("client").has("agent.interaction.cancel")); // notes §16.4
});

const envelope = { message_id: "m-1", session_id: "s", timestamp: "2026-11-29T09:00:00Z" };

test("decode never throws and names what is wrong", () => {
  const bad: unknown[] = [
    "", "not json", "[1,2]", "null", "42", '"text"', "{}", '{"type": 5}',
    JSON.stringify({ type: "agent.text.delta", ...envelope }),
    JSON.stringify({ type: "agent.text.delta", ...envelope, payload: { block_id: 3, delta: "x" } }),
    JSON.stringify({ type: "session.turn.start", ...envelope, payload: { turn_id: "not-a-uuid", turn_index: 0 } }),
    JSON.stringify({ type: "tool.invoke.request", ...envelope, payload: { call_id: "c", tool_name: "t", input: "str" } }),
    JSON.stringify({ type: "agent.text.delta", ...envelope, timestamp: "yesterday", payload: { block_id: "b", delta: "x" } }),
    JSON.stringify({ type: "agent.text.delta", ...envelope, seq: "7", payload: { block_id: "b", delta: "x" } }),
    "[".repeat(10000) + "]".repeat(10000),
    JSON.stringify({ type: "session.history", ...envelope, payload: { frames: "x" } }),
  ];
  for (const text of bad) {
    const d = decode(text);
    assert.equal(d.ok, false, String(text).slice(0, 80));
  }
});

test("an unknown type is refused unless metadata.ignorable, then kept untouched", () => {
  const unknown = { type: "vendor.thing", ...envelope, payload: { x: 1 } };
  const refused = decode(JSON.stringify(unknown));
  assert.ok(!refused.ok && refused.error.code === "unknown_type");
  const kept = decode(JSON.stringify({ ...unknown, metadata: { ignorable: true }, extra: "kept" }));
  assert.ok(kept.ok);
  assert.equal((kept.frame as Record<string, unknown>).extra, "kept");
});

test("RING keeps the newest frames that fit and counts the evicted exactly", () => {
  const b = new BoundedBuffer<number>("RING", 10);
  for (let i = 0; i < 5; i++) b.push(`f${i}`, 4, i);
  assert.deepEqual(b.items.map((i) => i.value), [3, 4]);
  assert.deepEqual(b.status(), { policy_applied: "RING", truncated: true, lost_frame_count: 3, buffer_high_watermark: 8 });
  b.push("big", 11, 9); // larger than the capacity: evicts everything, is lost itself
  assert.equal(b.length, 0);
  assert.equal(b.lostFrameCount, 6);
});

test("DROP keeps the oldest run that fits: once one frame does not fit, every later one is lost", () => {
  const b = new BoundedBuffer<number>("DROP", 10);
  for (const [i, size] of [[0, 4], [1, 4], [2, 4], [3, 1]] as const) b.push(`f${i}`, size, i);
  assert.deepEqual(b.items.map((i) => i.value), [0, 1]);
  assert.deepEqual(b.status(), { policy_applied: "DROP", truncated: true, lost_frame_count: 2, buffer_high_watermark: 8 });
});

test("NONE keeps nothing; an empty buffer is not truncated", () => {
  assert.deepEqual(selectBacklog([], "NONE", 0).status, { policy_applied: "NONE", truncated: false, lost_frame_count: 0, buffer_high_watermark: 0 });
  const none = selectBacklog([{ data: "x", size: 1, value: 1 }], "NONE", 100);
  assert.deepEqual(none.status, { policy_applied: "NONE", truncated: true, lost_frame_count: 1, buffer_high_watermark: 0 });
});

test("discardThrough drops what the other side has and RING's evictions stop counting as lost", () => {
  const b = new BoundedBuffer<string>("RING", 8);
  for (const id of ["a", "b", "c", "d"]) b.push(id, 4, id);
  assert.equal(b.lostFrameCount, 2);
  assert.equal(b.discardThrough((v) => v === "c"), 1);
  assert.deepEqual(b.items.map((i) => i.value), ["d"]);
  assert.equal(b.lostFrameCount, 0);
});

test("full-jitter backoff stays within its bounded ceiling", () => {
  const backoff = new Backoff({ initialMs: 100, maxMs: 1000, multiplier: 2 });
  assert.deepEqual([0, 1, 2, 3, 4, 50].map((n) => backoff.ceiling(n)), [100, 200, 400, 800, 1000, 1000]);
  assert.equal(backoff.delay(3, () => 0), 0);
  assert.equal(backoff.delay(3, () => 0.5), 400);
  for (let i = 0; i < 100; i++) assert.ok(backoff.delay(i % 10) <= backoff.ceiling(i % 10));
  assert.throws(() => new Backoff({ multiplier: 0.5 }));
});

test("web storage persistence reads back what it wrote and survives a full storage", () => {
  const data = new Map<string, string>();
  let full = false;
  const storage = {
    getItem: (k: string) => data.get(k) ?? null,
    setItem: (k: string, v: string) => {
      if (full) throw new Error("QuotaExceededError");
      data.set(k, v);
    },
    removeItem: (k: string) => void data.delete(k),
  };
  const store = webStore(storage);
  store.set("k", "v");
  assert.equal(store.get("k"), "v");
  full = true;
  assert.doesNotThrow(() => store.set("k", "w"));
  store.remove("k");
  assert.equal(store.get("k"), null);
  const mem = memoryStore();
  mem.set("a", "1");
  assert.equal(mem.get("a"), "1");
});

test("a restored view is finalized (§7.8.2) and a complete backlog unfinalizes it", () => {
  const turn = "00000001-0000-4000-8000-000000000001";
  const frame = (seq: number, type: string, payload: unknown) => ({
    type, message_id: `m-${seq}`, session_id: "s", timestamp: "2026-11-29T09:00:00Z", seq,
    sender: { role: "client", participant_id: "p" }, payload,
  });
  const view = new SessionView("s");
  for (const f of [frame(1, "session.turn.start", { turn_id: turn, turn_index: 0 }), frame(2, "agent.text.delta", { block_id: "b", delta: "hi" })]) {
    const d = decode(JSON.stringify(f));
    assert.ok(d.ok);
    view.receive(d.frame);
  }
  const restored = SessionView.restore(JSON.parse(JSON.stringify(view.snapshot())));
  assert.equal(restored.finalizedLocally, true);
  assert.equal(restored.status, "idle");
  const backlog = decode(JSON.stringify({
    type: "session.history", message_id: "h", session_id: "s", timestamp: "2026-11-29T09:00:00Z",
    sender: { role: "master", participant_id: "n" },
    payload: {
      frames: [frame(3, "agent.text.delta", { block_id: "b", delta: "!" })],
      buffer_status: { policy_applied: "RING", truncated: false, lost_frame_count: 0 },
      last_sync_timestamp: "2026-11-29T09:00:00Z", last_message_id: "m-2",
    },
  }));
  assert.ok(backlog.ok);
  restored.receive(backlog.frame);
  assert.equal(restored.status, "running");
  const text = restored.blocks.find((b) => b.kind === "text");
  assert.ok(text && text.kind === "text" && text.text === "hi!" && !text.done);
});

test("notice texts quote names the way the Python view does", () => {
  assert.equal(pyRepr("name-1"), "'name-1'");
  assert.equal(pyRepr("it's"), '"it\'s"');
  assert.equal(pyRepr("a\nb"), "'a\\nb'");
});

test("the library imports nothing from Node, so it runs unchanged in a browser", async () => {
  const { readdirSync, readFileSync } = await import("node:fs");
  const dir = join(packageDir, "dist", "src");
  const files: string[] = [];
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      if (e.isDirectory()) walk(join(d, e.name));
      else if (e.name.endsWith(".js")) files.push(join(d, e.name));
    }
  };
  walk(dir);
  assert.ok(files.length > 5);
  for (const f of files) {
    const text = readFileSync(f, "utf8");
    assert.doesNotMatch(text, /from "node:|require\(|\bprocess\.|\bBuffer\b/, f);
  }
});

const failedTurn = "00000001-0000-4000-8000-000000000001";
const stamped = (seq: number, type: string, payload: unknown) => ({
  type, message_id: `m-${seq}`, session_id: "s", timestamp: "2026-11-29T09:00:00Z", seq,
  sender: { role: "client", participant_id: "p" }, payload,
});

test("a failed run is the view's lastError and its turn block's error (notes §17.4)", () => {
  const view = new SessionView("s");
  const failure = { code: "model_overloaded", message: "the model is overloaded" };
  for (const f of [
    stamped(1, "session.turn.start", { turn_id: failedTurn, turn_index: 0 }),
    stamped(2, "session.turn.end", { turn_id: failedTurn, stop_reason: "error", error: failure }),
  ]) {
    const d = decode(JSON.stringify(f));
    assert.ok(d.ok);
    view.receive(d.frame);
  }
  assert.equal(view.stopReason, "error");
  assert.deepEqual(view.lastError, failure);
  const turn = view.blocks.find((b) => b.kind === "turn");
  assert.ok(turn && turn.kind === "turn");
  assert.deepEqual(turn.error, failure);
});

test("a turn end with error but another stop_reason is refused for that before any turn rule", () => {
  const f = decode(JSON.stringify(stamped(1, "session.turn.end", {
    turn_id: failedTurn, stop_reason: "end_turn", error: { code: "x", message: "y" },
  })));
  assert.ok(f.ok);
  // No turn is open: the frame's own contradiction is still what is named.
  assert.throws(() => check(new SessionState(), f.frame, "client"), (e: Error & { code?: string }) =>
    e.code === "invalid_frame" && e.message.includes("error is only for stop_reason 'error'"));
});

test("continueSession sends the session id as one encoded path segment", async () => {
  const urls: string[] = [];
  const fake = async (url: string | URL | Request) => {
    urls.push(String(url));
    return new Response(JSON.stringify({ session: { session_id: "s-new", parent_session_id: "a:b/c", seed_length: 1 }, created: true, token: null }), { status: 201 });
  };
  await continueSession("http://127.0.0.1:1/", "a:b/c?d#e", { apiKey: "k", fetch: fake as typeof fetch });
  assert.deepEqual(urls, ["http://127.0.0.1:1/v1/sessions/a%3Ab%2Fc%3Fd%23e/continue"]);
});

test("a frame after an expiry is refused as after an end, never a deletion (notes §17.1)", () => {
  const view = new SessionView("s");
  const expiry = decode(JSON.stringify({
    type: "session.deleted", message_id: "m-end", session_id: "s", timestamp: "2026-11-29T09:00:00Z", seq: 1,
    sender: { role: "master", participant_id: "n" },
    payload: { session_id: "s", reason: "timeout", deleted_by: "system", reattach_window_ms: 1000 },
  }));
  assert.ok(expiry.ok);
  view.receive(expiry.frame);
  const late = decode(JSON.stringify(stamped(2, "agent.text.delta", { block_id: "b", delta: "late" })));
  assert.ok(late.ok);
  assert.throws(() => check(view.state, late.frame, "client"), (e: Error) =>
    e.message.includes("has ended") && !e.message.includes("deleted"));
});

test("the view names an expiry 'ended: the agent did not come back within …', never deleted (notes §17.1)", () => {
  const view = new SessionView("s");
  const expiry = decode(JSON.stringify({
    type: "session.deleted", message_id: "m-end", session_id: "s", timestamp: "2026-11-29T09:00:00Z", seq: 1,
    sender: { role: "master", participant_id: "n" },
    payload: { session_id: "s", reason: "timeout", deleted_by: "system", reattach_window_ms: 7 * 86_400_000 },
  }));
  assert.ok(expiry.ok);
  view.receive(expiry.frame);
  const notice = view.blocks.find((b) => b.kind === "notice");
  assert.ok(notice && notice.kind === "notice");
  assert.equal(notice.notice, "ended");
  assert.equal(notice.text, "the agent did not come back within 7 days");
  assert.ok(!notice.text.includes("delete"));
});

test("continueSession refuses an id of dots only before any request (a WHATWG URL resolves it away)", async () => {
  const urls: string[] = [];
  const fake = async (url: string | URL | Request) => {
    urls.push(String(url));
    return new Response("{}", { status: 404 });
  };
  for (const id of [".", ".."]) {
    await assert.rejects(continueSession("http://127.0.0.1:1", id, { apiKey: "k", fetch: fake as typeof fetch }), /dots only/);
  }
  assert.deepEqual(urls, []);
});
