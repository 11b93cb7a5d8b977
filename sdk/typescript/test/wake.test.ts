// revisit(), cancelRevisit() and the "wake" event against a real `rawp serve` (notes §17.5), and
// the view's lines for them.
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { FrameRefused, RawpClient, type ClientOptions, type WakeEvent } from "../src/client.js";
import { SessionView, revisitText, wakeText, wakeTime } from "../src/view.js";
import { API_KEY, Master, NodeWebSocket, gatedWebSocket, sessionId, until } from "./helpers.js";

let master: Master;
const opened: RawpClient[] = [];

function client(options: Partial<ClientOptions> & { sessionId: string; role: "client" | "edge" }): RawpClient {
  const c = new RawpClient({
    url: master.wsUrl,
    token: API_KEY,
    WebSocket: NodeWebSocket,
    backoff: { initialMs: 20, maxMs: 200 },
    ...options,
  });
  opened.push(c);
  return c;
}

before(async () => {
  master = await new Master(["--reattach-window", "30"]).start();
});

after(async () => {
  for (const c of opened) await c.close().catch(() => {});
  await master.stop();
});

describe("wake and revisit", () => {
  test("a revisit due while detached fires the wake event once, after the reattach", async () => {
    const sid = sessionId("wake");
    const { WebSocket, gate } = gatedWebSocket();
    const agent = client({ sessionId: sid, role: "client", create: true, WebSocket });
    const wakes: WakeEvent[] = [];
    agent.on("wake", (w) => wakes.push(w));
    const edge = client({ sessionId: sid, role: "edge" });
    await agent.connect();
    await edge.connect();
    const id = await agent.revisit(new Date(Date.now() + 1000), "check <b>the</b> build");
    assert.equal(agent.view.status, "rescheduling");
    assert.deepEqual([...agent.view.pendingRevisits.keys()], [id]);
    gate.down = true;
    agent.abortConnection();
    await new Promise((r) => setTimeout(r, 1800)); // due while detached
    assert.equal(wakes.length, 0);
    gate.down = false;
    await until(() => wakes.length > 0, "the wake after the reattach", 15_000);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(wakes.length, 1);
    assert.equal(wakes[0]!.revisitId, id);
    assert.equal(wakes[0]!.reason, "check <b>the</b> build");
    assert.equal(agent.view.status, "idle");
    // the edge's view shows both lines, the reason as text
    await until(() => edge.view.blocks.some((b) => b.kind === "notice" && b.notice === "wake"), "the edge's wake line");
    const lines = edge.view.blocks.filter((b) => b.kind === "notice").map((b) => (b as { text: string }).text);
    assert.ok(lines.some((t) => t.startsWith("asked to be woken at ") && t.endsWith("(check <b>the</b> build)")), lines.join("\n"));
    assert.ok(lines.some((t) => t.startsWith("woken: check <b>the</b> build (asked for ")), lines.join("\n"));
  });

  test("a new client of the session is told of the wake it missed, once", async () => {
    const sid = sessionId("wake");
    const first = client({ sessionId: sid, role: "client", create: true });
    await first.connect();
    const id = await first.revisit(new Date(Date.now() + 500), "resume the job");
    await first.close();
    await new Promise((r) => setTimeout(r, 1500)); // due while nobody is attached
    const second = client({ sessionId: sid, role: "client" });
    const wakes: WakeEvent[] = [];
    second.on("wake", (w) => wakes.push(w));
    await second.connect();
    await until(() => wakes.length > 0, "the missed wake", 15_000);
    await new Promise((r) => setTimeout(r, 300));
    assert.deepEqual(wakes.map((w) => w.revisitId), [id]);
    assert.equal(second.view.status, "idle");
  });

  test("cancelRevisit withdraws; bad times and edges are refused", async () => {
    const sid = sessionId("wake");
    const agent = client({ sessionId: sid, role: "client", create: true });
    await agent.connect();
    const in30Days = new Date(Date.now() + 30 * 86_400_000).toISOString().replace(/\.\d+Z$/, "Z");
    const id = await agent.revisit(in30Days, undefined, { revisitId: "far" });
    assert.equal(id, "far");
    assert.equal(agent.view.status, "rescheduling");
    await agent.cancelRevisit("far");
    assert.equal(agent.view.status, "idle");
    await assert.rejects(agent.revisit("tomorrow"), RangeError);
    await assert.rejects(agent.revisit(in30Days.slice(0, -1)), RangeError); // no zone
    await assert.rejects(agent.revisit(new Date(Date.now() + 400 * 86_400_000)), (e: unknown) => {
      assert.ok(e instanceof FrameRefused);
      assert.equal(e.errorCode, "invalid_revisit");
      return true;
    });
    const edge = client({ sessionId: sid, role: "edge" });
    await edge.connect();
    await assert.rejects(edge.revisit(new Date(Date.now() + 5000)), /may not send/);
  });
});

describe("wake lines", () => {
  test("times are shown in UTC to the second, as the Python view shows them", () => {
    assert.equal(wakeTime("2026-12-08T09:30:15.250+01:00"), "2026-12-08 08:30:15 UTC");
    assert.equal(wakeTime("not a time"), "not a time");
    assert.equal(revisitText("2026-12-08T09:30:15Z", null), "asked to be woken at 2026-12-08 09:30:15 UTC");
    assert.equal(wakeText("2026-12-08T09:30:15Z", "x"), "woken: x (asked for 2026-12-08 09:30:15 UTC)");
  });

  test("the view folds requests, cancels and wakes into status and pending revisits", () => {
    const view = new SessionView("s");
    const frame = (seq: number, type: string, payload: object, role: "client" | "master") => ({
      type, message_id: `m${seq}`, session_id: "s", timestamp: "2026-12-08T00:00:00Z", seq,
      sender: { role, participant_id: `p-${role}` }, payload,
    });
    view.receive(frame(1, "session.revisit.request", { revisit_id: "a", at: "2026-12-08T09:00:00Z" }, "client") as never);
    view.receive(frame(2, "session.revisit.request", { revisit_id: "b", at: "2026-12-08T10:00:00Z" }, "client") as never);
    assert.equal(view.status, "rescheduling");
    view.receive(frame(3, "session.revisit.cancel", { revisit_id: "b" }, "client") as never);
    view.receive(frame(4, "session.revisit.cancel", { revisit_id: "nope" }, "client") as never);
    assert.deepEqual([...view.pendingRevisits.keys()], ["a"]);
    view.receive(frame(5, "session.wake", { revisit_id: "a", at: "2026-12-08T09:00:00Z" }, "master") as never);
    assert.equal(view.status, "idle");
    assert.deepEqual(
      view.blocks.map((b) => (b.kind === "notice" ? `${b.notice}: ${b.text}` : b.kind)),
      [
        "revisit: asked to be woken at 2026-12-08 09:00:00 UTC",
        "revisit: asked to be woken at 2026-12-08 10:00:00 UTC",
        "revisit_cancelled: no longer asks to be woken at 2026-12-08 10:00:00 UTC",
        "wake: woken: the time asked for came (2026-12-08 09:00:00 UTC)",
      ],
    );
  });
});
