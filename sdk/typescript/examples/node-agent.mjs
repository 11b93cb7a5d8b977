// A Node agent (role "client") on @rawp/client: one turn with text, a tool call and usage.
// Run (after `npm ci && npm run build` in sdk/typescript, with a master from `make run`):
//   RAWP_WS_URL=ws://127.0.0.1:8765/v1/ws RAWP_TOKEN=<dev key> node examples/node-agent.mjs
import WebSocket from "ws";
import { RawpClient } from "../dist/src/index.js";

const agent = new RawpClient({
  url: process.env.RAWP_WS_URL ?? process.env.RAWP_URL ?? "ws://127.0.0.1:8765/v1/ws", // RAWP_URL: the old name
  token: process.env.RAWP_TOKEN ?? process.env.RAWP_API_KEY ?? "",
  sessionId: process.env.RAWP_SESSION ?? `example-${Date.now()}`,
  role: "client",
  create: "example agent",
  WebSocket, // Node 20 has no global WebSocket: inject `ws`
});
agent.on("status", (s) => console.error(`[connection] ${s}`));
agent.on("error", (e) => console.error(`[error] ${e.message}`));

await agent.connect();
const turn = agent.turnStart();
for (const word of ["Listing ", "the ", "files."]) await agent.textDelta("b1", word);
await agent.textDone("b1");
await agent.toolRequest("c1", "bash", { cmd: "ls" });
await agent.toolResult("c1", "ok", "README.md\nsdk");
await agent.turnEnd(turn.turnId);
await agent.usage({ inputTokens: 120, outputTokens: 42, costUsed: 0.0031 });
console.log(JSON.stringify({ session: agent.sessionId, turns: agent.view.totals.turns, status: agent.view.status }));
await agent.close();
