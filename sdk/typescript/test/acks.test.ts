// Producer acks (notes §16.3) and withdrawing a question (§16.4) against a real master.
// GATED: the master on this branch does not send connection.ack nor accept
// agent.interaction.cancel yet. Run with RAWP_MASTER_HAS_ACKS=1 once it does (the integrator
// flips the default in the Makefile's sdk-test step after merging).
import assert from "node:assert/strict";
import { after, before, describe, test } from "node:test";
import { FrameRefused, RawpClient, type ClientOptions } from "../src/client.js";
import type { InteractionBlock } from "../src/view.js";
import { API_KEY, MASTER_HAS_ACKS, Master, NodeWebSocket, gatedWebSocket, sessionId, until } from "./helpers.js";

const skip = MASTER_HAS_ACKS ? false : "set RAWP_MASTER_HAS_ACKS=1 once the master sends connection.ack (notes §16.3)";

describe("producer acks and interaction cancel", { skip, timeout: 60_000 }, () => {
  let master: Master;
  const opened: RawpClient[] = [];
  const client = (o: Partial<ClientOptions> & { sessionId: string; role: "client" | "edge" }) => {
    const c = new RawpClient({ url: master.wsUrl, token: API_KEY, WebSocket: NodeWebSocket, backoff: { initialMs: 20, maxMs: 200 }, ...o });
    opened.push(c);
    return c;
  };
  before(async () => {
    master = await new Master(["--reattach-window", "30"]).start();
  });
  after(async () => {
    for (const c of opened) await c.close().catch(() => {});
    await master.stop();
  });

  test("send() resolves when the master committed the frame, with its seq, in order", { timeout: 15_000 }, async () => {
    const agent = client({ sessionId: sessionId("ack"), role: "client", create: true });
    await agent.connect();
    const turn = agent.turnStart();
    const receipts = await Promise.all([turn, agent.textDelta("b1", "a"), agent.textDelta("b1", "b")]);
    assert.ok(receipts.every((r) => r.via === "ack" || r.via === "welcome"));
    const last = receipts.at(-1)!;
    assert.equal(typeof last.seq, "number");
    assert.equal(agent.inFlightCount, 0); // committed frames leave the in-flight window
  });

  test("a refused frame rejects with the master's refusal; later frames still commit", { timeout: 15_000 }, async () => {
    const agent = client({ sessionId: sessionId("ack"), role: "client", create: true });
    await agent.connect();
    const refused = agent.turnEnd("00000000-0000-4000-8000-000000000000"); // no turn is open
    await assert.rejects(refused, (e: unknown) => e instanceof FrameRefused && e.errorCode === "turn_state");
    const ok = await agent.turnStart();
    assert.equal(ok.frame.type, "session.turn.start");
  });

  test("frames buffered while disconnected resolve once the master committed the reattach history", { timeout: 15_000 }, async () => {
    const { WebSocket, gate } = gatedWebSocket();
    const agent = client({ sessionId: sessionId("ack"), role: "client", create: true, WebSocket });
    await agent.connect();
    await agent.turnStart();
    gate.down = true;
    agent.abortConnection();
    await agent.waitStatus("reconnecting");
    const buffered = [agent.textDelta("b1", "x"), agent.textDelta("b1", "y")];
    gate.down = false;
    const receipts = await Promise.all(buffered);
    assert.ok(receipts.every((r) => r.via === "ack" || r.via === "welcome"));
  });

  test("agent.interaction.cancel withdraws the question: edges drop it and a late answer is refused", { timeout: 15_000 }, async () => {
    const sid = sessionId("ack");
    const agent = client({ sessionId: sid, role: "client", create: true });
    await agent.connect();
    const edge = client({ sessionId: sid, role: "edge" });
    await edge.connect();
    await agent.turnStart();
    await agent.interactionRequest("i1", "confirmation", "Proceed?");
    await until(() => edge.view.status === "requires_action", "the edge seeing the question");
    await agent.interactionCancel("i1", "timed out");
    await until(() => edge.view.status === "running", "the edge dropping the question");
    const ask = edge.view.blocks.find((b) => b.kind === "interaction") as InteractionBlock;
    assert.equal(ask.status, "withdrawn");
    await assert.rejects(
      edge.interactionResponse("i1", true),
      (e: unknown) => e instanceof FrameRefused && e.errorCode === "interaction_state",
    );
  });
});
