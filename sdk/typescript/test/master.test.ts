// Against a real `rawp serve --store memory` started by the test: handshake, live frames,
// drop and reattach with exact buffer accounting, backlog replay, persistence, refusals,
// deletion, and a master restart mid-turn. (Producer acks: acks.test.ts.)
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { promisify } from "node:util";
import { ConnectRefused, HandshakeRefused, RawpClient, type ClientOptions, type Delivery } from "../src/client.js";
import { byteLength, encode, newMessageId, now } from "../src/codec.js";
import type { Frame } from "../src/frames.js";
import type { TextBlock, ToolCallBlock, TurnBlock } from "../src/view.js";
import { memoryStore } from "../src/persistence.js";
import { API_KEY, Master, NodeWebSocket, gatedWebSocket, packageDir, sessionId, until } from "./helpers.js";

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

function collect(c: RawpClient): Delivery[] {
  const seen: Delivery[] = [];
  c.on("frame", (d) => seen.push(d));
  return seen;
}

before(async () => {
  master = await new Master(["--reattach-window", "30"]).start();
});

after(async () => {
  for (const c of opened) await c.close().catch(() => {});
  await master.stop();
});

describe("against a real master", () => {
  test("an agent's turn reaches an edge's view as paired blocks with usage", async () => {
    const sid = sessionId();
    const agent = client({ sessionId: sid, role: "client", create: "demo" });
    const welcome = await agent.connect();
    assert.equal(welcome.payload.session.session_id, sid);
    assert.equal(agent.status, "connected");
    const edge = client({ sessionId: sid, role: "edge" });
    await edge.connect();
    const turn = agent.turnStart();
    await agent.textDelta("b1", "Hello, ");
    await agent.textDelta("b1", "<b>world</b>");
    await agent.textDone("b1");
    await agent.toolRequest("c1", "bash", { cmd: "ls" });
    await agent.toolResult("c1", "ok", "file.txt");
    await agent.turnEnd(turn.turnId);
    await agent.usage({ inputTokens: 10, outputTokens: 5, costUsed: 0.01 });
    await until(() => edge.view.totals.input_tokens === 10, "the edge folding the usage");
    const text = edge.view.blocks.find((b) => b.kind === "text") as TextBlock;
    assert.equal(text.text, "Hello, <b>world</b>"); // text stays text, never markup
    const call = edge.view.blocks.find((b) => b.kind === "tool_call") as ToolCallBlock;
    assert.equal(call.status, "ok");
    assert.equal(call.output, "file.txt");
    const turnBlock = edge.view.blocks.find((b) => b.kind === "turn") as TurnBlock;
    assert.equal(turnBlock.stop_reason, "end_turn");
    assert.equal(edge.view.status, "idle");
    assert.equal(agent.view.totals.input_tokens, 10); // the sender folds its own frames
  });

  test("the documented Node agent example runs one turn against the master", async () => {
    const sid = sessionId("example");
    const run = promisify(execFile)(process.execPath, [join(packageDir, "examples", "node-agent.mjs")], {
      env: { ...process.env, RAWP_WS_URL: master.wsUrl, RAWP_TOKEN: API_KEY, RAWP_SESSION: sid },
      timeout: 30_000,
    });
    const { stdout } = await run;
    assert.deepEqual(JSON.parse(stdout), { session: sid, turns: 1, status: "idle" });
    const log = await master.http("GET", `/v1/sessions/${encodeURIComponent(sid)}/events?order=asc&limit=50`);
    assert.equal(log.status, 200);
  });

  test("a bad credential is refused with 4401 and never retried", async () => {
    const c = client({ sessionId: sessionId(), role: "client", create: true, token: "wrong" });
    await assert.rejects(c.connect(), (e: unknown) => e instanceof HandshakeRefused && e.code === 4401);
    assert.equal(c.status, "closed");
  });

  test("a handshake refused over HTTP (wrong path) or a URL that cannot be opened is not retried", async () => {
    const wrongPath = client({ sessionId: sessionId(), role: "client", create: true, url: master.wsUrl.replace("/v1/ws", "/nope") });
    await assert.rejects(wrongPath.connect(), (e: unknown) => e instanceof ConnectRefused && e.status === 404);
    const badUrl = client({ sessionId: sessionId(), role: "client", create: true, url: "not a url" });
    await assert.rejects(badUrl.connect(), (e: unknown) => e instanceof ConnectRefused && e.status === null);
  });

  test("the status goes connecting → connected → reconnecting → connected across a drop", async () => {
    const sid = sessionId();
    const { WebSocket, gate } = gatedWebSocket();
    const agent = client({ sessionId: sid, role: "client", create: true, WebSocket });
    const statuses: string[] = [];
    agent.on("status", (s) => statuses.push(s));
    await agent.connect();
    gate.down = true;
    agent.abortConnection();
    await agent.waitStatus("reconnecting");
    gate.down = false;
    await agent.waitStatus("connected");
    assert.deepEqual(statuses.slice(0, 3), ["connecting", "connected", "reconnecting"]);
    assert.equal(statuses.at(-1), "connected");
  });

  test("close() during a long reconnect backoff ends the client at once and its stream normally", { timeout: 15_000 }, async () => {
    const { WebSocket, gate } = gatedWebSocket();
    const agent = client({ sessionId: sessionId(), role: "client", create: true, WebSocket, backoff: { initialMs: 60_000, maxMs: 60_000 }, random: () => 1 });
    const first = agent.connect();
    const again = agent.connect();
    assert.equal(await first, await again); // one handshake for concurrent connect() calls
    gate.down = true;
    agent.abortConnection();
    await agent.waitStatus("reconnecting");
    const pending = agent.textDelta("b1", "never sent");
    await agent.close();
    assert.equal(agent.status, "closed");
    let delivery = await agent.receive();
    while (delivery !== null) delivery = await agent.receive(); // ends normally (null), no error
    await assert.rejects(pending, /closed/);
  });

  test("frames made while disconnected reach the master in one history with the exact RING buffer_status", async () => {
    const sid = sessionId();
    const { WebSocket, gate } = gatedWebSocket();
    // Equal-sized frames: a fixed-length block id and delta, UUID message ids, ISO timestamps.
    const probe = encode({
      type: "agent.text.delta", message_id: newMessageId(), session_id: sid, timestamp: now(),
      payload: { block_id: "b1", delta: "0123456789" },
    });
    const size = byteLength(probe);
    const capacity = 3 * size + Math.floor(size / 2); // holds exactly 3
    const agent = client({ sessionId: sid, role: "client", create: true, WebSocket, buffer: { policy: "RING", capacity_bytes: capacity } });
    await agent.connect();
    const edge = client({ sessionId: sid, role: "edge" });
    const edgeFrames = collect(edge);
    await edge.connect();
    const turn = agent.turnStart();
    await turn;
    await until(() => edge.view.status === "running", "the edge seeing the turn");

    gate.down = true;
    agent.abortConnection();
    await agent.waitStatus("reconnecting");
    assert.equal(agent.view.finalizedLocally, true); // §7.8.1 on the agent's own view
    const sends = [];
    for (let i = 0; i < 5; i++) sends.push(agent.textDelta("b1", `012345678${i}`));
    const outcomes = await Promise.allSettled(sends.slice(0, 2));
    assert.ok(outcomes.every((o) => o.status === "rejected"), "RING evicted the two oldest: their send() rejects");
    assert.equal(agent.buffered, 3);
    assert.deepEqual(agent.bufferStatus(), {
      policy_applied: "RING", truncated: true, lost_frame_count: 2, buffer_high_watermark: 3 * size,
    });

    gate.down = false;
    await agent.waitStatus("connected");
    await Promise.all(sends.slice(2));
    await until(
      () => edgeFrames.some((d) => d.frame.type === "session.error" && (d.frame.payload as { error_code: string }).error_code === "history_truncated"),
      "the master telling the edge the history was truncated",
    );
    const history = edgeFrames.find((d) => d.frame.type === "session.history" && d.frame.seq != null)!.frame as {
      payload: { frames: Array<{ payload: { delta: string } }>; buffer_status: unknown };
    };
    assert.deepEqual(history.payload.buffer_status, {
      policy_applied: "RING", truncated: true, lost_frame_count: 2, buffer_high_watermark: 3 * size,
    });
    assert.deepEqual(history.payload.frames.map((f) => f.payload.delta), ["0123456782", "0123456783", "0123456784"]);
    const notice = edgeFrames.find((d) => d.frame.type === "session.error")!.frame as { payload: { lost_frame_count: number } };
    assert.equal(notice.payload.lost_frame_count, 2);
  });

  test("an edge's backlog after a drop is delivered frame by frame, marked replayed, and unfinalizes its view", async () => {
    const sid = sessionId();
    const agent = client({ sessionId: sid, role: "client", create: true });
    await agent.connect();
    const { WebSocket, gate } = gatedWebSocket();
    const edge = client({ sessionId: sid, role: "edge", WebSocket, buffer: { policy: "RING", capacity_bytes: 1 << 20 } });
    const frames = collect(edge);
    await edge.connect();
    const turn = agent.turnStart();
    await agent.textDelta("b1", "before ");
    await until(() => edge.view.blocks.some((b) => b.kind === "text"), "the edge seeing the text");

    gate.down = true;
    edge.abortConnection();
    await edge.waitStatus("reconnecting");
    const text = () => edge.view.blocks.find((b) => b.kind === "text") as TextBlock;
    assert.equal(text().done, true); // finalized locally
    assert.equal(text().synthetic, true);
    await agent.textDelta("b1", "after");
    await agent.textDone("b1");
    await agent.turnEnd(turn.turnId);
    await agent.usage({ inputTokens: 1, outputTokens: 1 });
    const seqBefore = edge.cursor;

    gate.down = false;
    await edge.waitStatus("connected");
    await until(() => edge.view.totals.turns === 1, "the edge folding the backlog");
    // the master's session.status (idle, after the usage; notes §17.4) comes along too
    const replayed = frames.filter((d) => d.replayed && d.frame.type !== "session.status").map((d) => d.frame.type);
    assert.deepEqual(replayed, ["agent.text.delta", "agent.text.done", "session.turn.end", "session.usage"]);
    assert.ok(frames.filter((d) => d.replayed).every((d) => (d.frame.seq ?? 0) > seqBefore));
    assert.equal(text().text, "before after");
    assert.equal(text().synthetic, false); // §7.8.3: the local finalization was taken back
    assert.equal((edge.view.blocks.find((b) => b.kind === "turn") as TurnBlock).stop_reason, "end_turn");
  });

  test("an edge with presence false gets no presence, live or in its backlog, while another edge does", async () => {
    const sid = sessionId();
    const agent = client({ sessionId: sid, role: "client", create: true });
    await agent.connect();
    const { WebSocket, gate } = gatedWebSocket();
    const viewer = client({ sessionId: sid, role: "edge", WebSocket, presence: false });
    const watcher = client({ sessionId: sid, role: "edge" });
    const seen = collect(viewer);
    const heard = collect(watcher);
    await viewer.connect();
    await watcher.connect();
    assert.equal(viewer.view.presence, false);
    assert.equal(watcher.view.presence, true);
    const passer = client({ sessionId: sid, role: "edge" });
    await passer.connect();
    await passer.close();
    await agent.agentState("thinking");
    await until(() => seen.some((d) => d.frame.type === "agent.state"), "the viewer seeing the agent");
    await until(() => heard.filter((d) => d.frame.type === "session.presence").length >= 2, "the watcher hearing the passer");

    gate.down = true;
    viewer.abortConnection();
    await viewer.waitStatus("reconnecting");
    const again = client({ sessionId: sid, role: "edge" });
    await again.connect();
    await again.close();
    await agent.agentState("idle");
    gate.down = false;
    await viewer.waitStatus("connected");
    await until(() => seen.filter((d) => d.frame.type === "agent.state").length === 2, "the viewer's backlog");
    assert.ok(seen.some((d) => d.replayed), "the second agent.state came in the backlog");
    assert.deepEqual(seen.filter((d) => d.frame.type === "session.presence"), []);
    assert.deepEqual(viewer.view.participants, {});
  });

  test("an edge's messages made while disconnected are resent one by one; DROP's lost ones reject and leave a notice", async () => {
    const sid = sessionId();
    const agent = client({ sessionId: sid, role: "client", create: true });
    const agentFrames = collect(agent);
    await agent.connect();
    const { WebSocket, gate } = gatedWebSocket();
    const probe = byteLength(encode({
      type: "user.message", message_id: newMessageId(), session_id: sid, timestamp: now(), payload: { text: "m0" },
    }));
    const edge = client({ sessionId: sid, role: "edge", WebSocket, buffer: { policy: "DROP", capacity_bytes: 2 * probe } });
    await edge.connect();
    gate.down = true;
    edge.abortConnection();
    await edge.waitStatus("reconnecting");
    const sends = ["m1", "m2", "m3", "m4"].map((t) => edge.userMessage(t));
    const lost = await Promise.allSettled(sends.slice(2));
    assert.ok(lost.every((o) => o.status === "rejected" && o.reason.name === "FrameLost"));
    assert.deepEqual(edge.bufferStatus(), {
      policy_applied: "DROP", truncated: true, lost_frame_count: 2, buffer_high_watermark: 2 * probe,
    });
    gate.down = false;
    await Promise.all(sends.slice(0, 2));
    await until(() => agentFrames.filter((d) => d.frame.type === "user.message").length === 2, "the agent getting both");
    const texts = agentFrames.filter((d) => d.frame.type === "user.message").map((d) => (d.frame.payload as { text: string }).text);
    assert.deepEqual(texts, ["m1", "m2"]);
    assert.ok(edge.view.notices.some((n) => n.kind === "local" && n.text.startsWith("2 frame(s) sent while disconnected were lost (DROP")));
    assert.equal(edge.view.blocks.filter((b) => b.kind === "user_message").length, 2);
  });

  test("with splitBacklog false the backlog is delivered as one session.history frame", async () => {
    const sid = sessionId();
    const agent = client({ sessionId: sid, role: "client", create: true });
    await agent.connect();
    const turn = agent.turnStart();
    await agent.textDelta("b1", "x");
    await agent.textDone("b1");
    await agent.turnEnd(turn.turnId);
    await agent.usage({ inputTokens: 1, outputTokens: 1 });
    const edge = client({ sessionId: sid, role: "edge", fromStart: true, splitBacklog: false });
    const frames = collect(edge);
    await edge.connect();
    await until(() => edge.view.totals.turns === 1, "the backlog folded");
    const histories = frames.filter((d) => d.frame.type === "session.history");
    assert.equal(histories.length, 1);
    assert.equal(histories[0]!.replayed, false);
    assert.equal(frames.some((d) => d.replayed), false);
  });

  test("an edge whose NONE buffer missed frames sees a truncated backlog with the exact lost count", async () => {
    const sid = sessionId();
    const agent = client({ sessionId: sid, role: "client", create: true });
    await agent.connect();
    const { WebSocket, gate } = gatedWebSocket();
    const edge = client({ sessionId: sid, role: "edge", WebSocket, buffer: { policy: "NONE", capacity_bytes: 0 } });
    const backlogs: unknown[] = [];
    edge.on("backlog", (h) => backlogs.push(h.payload.buffer_status));
    await edge.connect();
    const turn = agent.turnStart();
    await until(() => edge.view.status === "running", "the edge seeing the turn");
    gate.down = true;
    edge.abortConnection();
    await edge.waitStatus("reconnecting");
    await agent.textDelta("b1", "x");
    await agent.textDone("b1");
    await agent.turnEnd(turn.turnId);
    await agent.usage({ inputTokens: 1, outputTokens: 1 });
    gate.down = false;
    await edge.waitStatus("connected");
    await until(() => backlogs.length === 1, "the backlog");
    // the four frames, and the session.status (idle) logged after the usage (notes §17.4)
    assert.deepEqual(backlogs[0], { policy_applied: "NONE", truncated: true, lost_frame_count: 5, buffer_high_watermark: 0 });
    assert.ok(edge.view.notices.some((n) => n.kind === "backlog_truncated"));
    assert.equal(edge.view.status, "idle"); // the finalization stays (§7.8.3: truncated)
  });

  test("a new client instance resumes from persisted state: same participant, backlog from the saved cursor", async () => {
    const sid = sessionId();
    const agent = client({ sessionId: sid, role: "client", create: true });
    await agent.connect();
    const store = memoryStore();
    const first = client({ sessionId: sid, role: "edge", store });
    await first.connect();
    const turn = agent.turnStart();
    await until(() => first.view.status === "running", "the first edge seeing the turn");
    const pid = first.participantId;
    const cursor = first.cursor;
    first.abortConnection(); // the app dies without closing
    await first.waitStatus("reconnecting");
    await first.close();
    await agent.textDelta("b2", "later");
    await agent.turnEnd(turn.turnId);
    await agent.usage({ inputTokens: 2, outputTokens: 2 });

    const second = client({ sessionId: sid, role: "edge", store });
    const frames = collect(second);
    const welcome = await second.connect();
    assert.equal(second.participantId, pid);
    assert.equal(welcome.payload.resumed, true);
    await until(() => second.view.totals.turns === 1, "the backlog from the saved cursor");
    const replayed = frames.filter((d) => d.replayed);
    assert.ok(replayed.length > 0 && replayed.every((d) => (d.frame.seq ?? 0) > cursor));
  });

  test("an edge whose view was filled from the HTTP log before connect() resumes after it: nothing twice, nothing missing", async () => {
    const sid = sessionId();
    const agent = client({ sessionId: sid, role: "client", create: true });
    await agent.connect();
    const turn = agent.turnStart();
    await agent.textDelta("b1", "from the log");
    await agent.textDone("b1"); // committed (producer acks): the log holds it
    const response = await master.http("GET", `/v1/sessions/${encodeURIComponent(sid)}/events?order=asc&limit=1000`);
    assert.equal(response.status, 200);
    const { events } = (await response.json()) as { events: Frame[] };
    const edge = client({ sessionId: sid, role: "edge" });
    for (const frame of events) edge.view.receive(frame);
    const head = edge.view.lastSeq;
    assert.ok(head > 0);
    await agent.textDelta("b2", "between "); // logged after the read, before the attach
    const frames = collect(edge);
    const welcome = await edge.connect();
    assert.ok(welcome.payload.session.head_seq > head);
    await agent.textDelta("b2", "live");
    await agent.textDone("b2");
    await agent.turnEnd(turn.turnId);
    await until(() => edge.view.status === "idle", "the edge seeing the turn end");
    const seqs = frames.map((d) => d.frame.seq).filter((s): s is number => typeof s === "number");
    assert.ok(seqs.length > 0 && seqs.every((s) => s > head), "only frames after the folded log");
    assert.deepEqual(seqs, [...new Set(seqs)].sort((a, b) => a - b), "each once, in order");
    const texts = edge.view.blocks.filter((b) => b.kind === "text") as TextBlock[];
    assert.deepEqual(texts.map((t) => t.text), ["from the log", "between live"]);
    const sent = await edge.userMessage("seen");
    assert.equal(sent.via, "ack"); // resolved on the master's connection.ack (notes §16.3)
  });

  test("deleting the session over HTTP ends both participants' streams normally", async () => {
    const sid = sessionId();
    const agent = client({ sessionId: sid, role: "client", create: true });
    await agent.connect();
    const edge = client({ sessionId: sid, role: "edge" });
    await edge.connect();
    const turn = agent.turnStart();
    await agent.toolRequest("c1", "bash", { cmd: "sleep" });
    await until(() => edge.view.status === "running", "the edge seeing the turn");
    const types: string[] = [];
    const drained = (async () => {
      for await (const d of edge) types.push(d.frame.type);
    })();
    const response = await master.http("DELETE", `/v1/session/${encodeURIComponent(sid)}`);
    assert.equal(response.status, 200);
    await drained; // the iterator ends, no error
    assert.equal(edge.status, "closed");
    const ending = types.filter((t) => t !== "session.status"); // terminated, before the end (§17.4)
    assert.deepEqual(ending.slice(-3), ["tool.invoke.result", "session.turn.end", "session.deleted"]);
    assert.equal(edge.view.status, "terminated");
    await agent.waitStatus("closed");
    await assert.rejects(agent.textDelta("b1", "x"), /closed/);
    void turn;
  });

  test("a master restart mid-turn (durable store): the agent reattaches to the same log with its buffered frame, the watching edge's finalization is taken back, a new edge folds the whole turn", async () => {
    const dir = await mkdtemp(join(tmpdir(), "rawp-sdk-restart-"));
    const own = await new Master(["--reattach-window", "30", "--store", `sqlite:${join(dir, "rawp.db")}`]).start();
    try {
      const sid = sessionId();
      const agent = new RawpClient({
        url: own.wsUrl, token: API_KEY, WebSocket: NodeWebSocket,
        sessionId: sid, role: "client", create: "restart", backoff: { initialMs: 50, maxMs: 300 },
      });
      opened.push(agent);
      await agent.connect();
      const watcher = new RawpClient({
        url: own.wsUrl, token: API_KEY, WebSocket: NodeWebSocket,
        sessionId: sid, role: "edge", backoff: { initialMs: 20, maxMs: 100 },
      });
      opened.push(watcher);
      await watcher.connect();
      const turn = agent.turnStart();
      await agent.textDelta("b1", "half"); // resolves once committed: on disk
      await until(() => watcher.view.blocks.some((b) => b.kind === "text"), "the edge seeing the text");
      const epoch = agent.epoch;
      await own.kill();
      await agent.waitStatus("reconnecting");
      await watcher.waitStatus("reconnecting");
      assert.equal(watcher.view.finalizedLocally, true);
      assert.equal(agent.view.finalizedLocally, true);
      const buffered = agent.textDelta("b1", " done"); // buffered while the master is down
      assert.equal(agent.buffered, 1);
      const restarted = await own.again().start();
      try {
        await agent.waitStatus("connected");
        await buffered; // committed from inside the reattach history
        assert.equal(agent.epoch, epoch); // the same log: the store kept it (notes §16.2)
        await agent.textDone("b1");
        await agent.turnEnd(turn.turnId);
        await agent.usage({ inputTokens: 3, outputTokens: 3 });
        const edge = new RawpClient({
          url: restarted.wsUrl, token: API_KEY, WebSocket: NodeWebSocket,
          sessionId: sid, role: "edge", fromStart: true,
        });
        opened.push(edge);
        await edge.connect();
        await until(() => edge.view.totals.turns === 1 && edge.view.totals.input_tokens === 3, "a new edge folding the whole log");
        const text = edge.view.blocks.find((b) => b.kind === "text") as TextBlock;
        assert.equal(text.text, "half done");
        await edge.close();
        // The edge that watched through the crash resumes on the same log: the restart's
        // finalization and its own are taken back by the agent's history (§7.8.3).
        await watcher.waitStatus("connected");
        assert.equal(watcher.epoch, epoch);
        await until(() => watcher.view.totals.input_tokens === 3, "the watcher folding the rest of the turn");
        const watched = watcher.view.blocks.find((b) => b.kind === "turn") as TurnBlock;
        assert.equal(watched.stop_reason, "end_turn");
        assert.equal(watched.synthetic, false);
        assert.equal((watcher.view.blocks.find((b) => b.kind === "text") as TextBlock).text, "half done");
        await watcher.close();
      } finally {
        await agent.close();
        await restarted.stop();
      }
    } finally {
      await own.stop();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
