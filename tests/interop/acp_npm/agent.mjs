// A scripted ACP agent on the real @agentclientprotocol/sdk agent side (`agent()` on stdio),
// run behind `rawp bridge acp`. What a prompt does is named by its first word: `ask` streams a
// message, starts a tool call, asks permission and finishes the call with the answer;
// anything else is echoed. Usage: node agent.mjs
import { Readable, Writable } from "node:stream";
import { agent, methods, ndJsonStream, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";

const stream = ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
let sessions = 0;

const text = (sessionId, value) => ({
  sessionId,
  update: { sessionUpdate: "agent_message_chunk", content: { type: "text", text: value } },
});

const app = agent({ name: "rawp-interop-agent" })
  .onRequest(methods.agent.initialize, () => ({
    protocolVersion: PROTOCOL_VERSION,
    agentCapabilities: { loadSession: false },
    agentInfo: { name: "npm-scripted-agent", version: "1.0.0" },
  }))
  .onRequest(methods.agent.session.new, () => ({ sessionId: `npm-session-${++sessions}` }))
  .onNotification(methods.agent.session.cancel, () => {})
  .onRequest(methods.agent.session.prompt, async ({ params, client }) => {
    const said = params.prompt.map((b) => (b.type === "text" ? b.text : "")).join(" ");
    const sid = params.sessionId;
    if (!said.startsWith("ask")) {
      await client.notify(methods.client.session.update, text(sid, `npm echo: ${said}`));
      return { stopReason: "end_turn" };
    }
    await client.notify(methods.client.session.update, text(sid, "Let me check."));
    const toolCall = { toolCallId: "npm-call", title: "Delete build/", kind: "delete" };
    await client.notify(methods.client.session.update, {
      sessionId: sid,
      update: { sessionUpdate: "tool_call", status: "pending", rawInput: { path: "build" }, ...toolCall },
    });
    const answer = await client.request(methods.client.session.requestPermission, {
      sessionId: sid,
      toolCall,
      options: [
        { optionId: "yes", name: "Allow", kind: "allow_once" },
        { optionId: "no", name: "Deny", kind: "reject_once" },
      ],
    });
    const chosen = answer.outcome.outcome === "selected" ? answer.outcome.optionId : "cancelled";
    await client.notify(methods.client.session.update, {
      sessionId: sid,
      update: {
        sessionUpdate: "tool_call_update",
        toolCallId: "npm-call",
        status: chosen === "yes" ? "completed" : "failed",
        rawOutput: { chosen },
      },
    });
    await client.notify(methods.client.session.update, text(sid, `chosen: ${chosen}`));
    return { stopReason: "end_turn" };
  });

const connection = app.connect(stream);
await connection.closed;
