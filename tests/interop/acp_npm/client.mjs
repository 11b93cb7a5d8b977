// An editor on the real @agentclientprotocol/sdk client side (`client()` over a child's stdio),
// driving `rawp acp attach SESSION`.
//
// Usage: node client.mjs SCENARIO.json   (prints one JSON report on stdout)
// SCENARIO: { command: [argv…], env: {…}, session, cwd, choose: optionId | null,
//             prompts: [text…] }
// It initializes, loads SESSION (the updates that arrive before the answer are the replay),
// sends each prompt in turn and records every update, the permission requests it is asked
// (answered `choose`, or left until the agent withdraws them) and each prompt's stop reason.
import { spawn } from "node:child_process";
import { readFileSync } from "node:fs";
import { Readable, Writable } from "node:stream";
import { client, methods, ndJsonStream, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";

const scenario = JSON.parse(readFileSync(process.argv[2], "utf8"));
const report = { updates: [], replayed: null, asked: [], withdrawn: 0, stops: [], errors: [] };

const child = spawn(scenario.command[0], scenario.command.slice(1), {
  env: { ...process.env, ...scenario.env },
  cwd: scenario.cwd,
  stdio: ["pipe", "pipe", "inherit"],
});
const stream = ndJsonStream(Writable.toWeb(child.stdin), Readable.toWeb(child.stdout));

const editor = client({ name: "rawp-interop-editor" })
  .onNotification(methods.client.session.update, ({ params }) => {
    report.updates.push(params.update);
  })
  .onRequest(methods.client.session.requestPermission, async ({ params, signal }) => {
    report.asked.push({ toolCall: params.toolCall, options: params.options });
    if (scenario.choose) return { outcome: { outcome: "selected", optionId: scenario.choose } };
    await new Promise((resolve) => signal.addEventListener("abort", resolve, { once: true }));
    report.withdrawn += 1;
    return { outcome: { outcome: "cancelled" } };
  });

try {
  await editor.connectWith(stream, async (agent) => {
    report.initialize = await agent.request(methods.agent.initialize, {
      protocolVersion: PROTOCOL_VERSION,
      clientCapabilities: {},
      clientInfo: { name: "rawp-interop-editor", version: "1" },
    });
    await agent.request(methods.agent.session.load, {
      sessionId: scenario.session,
      cwd: scenario.cwd,
      mcpServers: [],
    });
    report.replayed = report.updates.length;
    for (const text of scenario.prompts) {
      const answer = await agent.request(methods.agent.session.prompt, {
        sessionId: scenario.session,
        prompt: [{ type: "text", text }],
      });
      report.stops.push(answer.stopReason);
    }
  });
} catch (error) {
  report.errors.push(String(error?.message ?? error));
}
child.kill("SIGTERM");
process.stdout.write(JSON.stringify(report));
