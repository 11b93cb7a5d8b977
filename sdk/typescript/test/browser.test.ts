// The SDK in a real browser (headless Chromium driven by playwright-core; no browser download:
// the system's chromium): the documented browser example renders a live session as text and,
// after a reload, resumes from sessionStorage with the same participant id.
import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { extname, join, normalize, sep } from "node:path";
import { test } from "node:test";
import { RawpClient } from "../src/client.js";
import { API_KEY, Master, NodeWebSocket, packageDir, sessionId } from "./helpers.js";

function chromiumPath(): string | null {
  for (const p of [process.env.CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser"]) {
    if (p && existsSync(p)) return p;
  }
  return null;
}

const TYPES: Record<string, string> = { ".html": "text/html", ".js": "text/javascript", ".map": "application/json" };

/** Serves sdk/typescript read-only on 127.0.0.1 (the example and dist/). */
function staticServer(): Promise<Server> {
  const server = createServer((req, res) => {
    const path = normalize(join(packageDir, decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname)));
    if (!path.startsWith(packageDir + sep) || !existsSync(path) || path.includes(`${sep}node_modules${sep}`)) {
      res.writeHead(404).end();
      return;
    }
    res.writeHead(200, { "content-type": TYPES[extname(path)] ?? "application/octet-stream" });
    res.end(readFileSync(path));
  });
  return new Promise((resolve) => server.listen(0, "127.0.0.1", () => resolve(server)));
}

const chromium = chromiumPath();

test("in Chromium the browser example renders the session as text and resumes from sessionStorage after a reload", {
  skip: chromium === null ? "NO CHROMIUM: the SDK's browser test is SKIPPED (apt-get install chromium)" : false,
  timeout: 60_000,
}, async () => {
  const { chromium: launcher } = await import("playwright-core");
  const files = await staticServer();
  const origin = `http://127.0.0.1:${(files.address() as AddressInfo).port}`;
  const master = await new Master(["--allowed-origins", origin]).start();
  const browser = await launcher.launch({ executablePath: chromium!, headless: true, args: ["--no-sandbox", "--disable-gpu"] });
  const sid = sessionId("browser");
  const agent = new RawpClient({ url: master.wsUrl, token: API_KEY, sessionId: sid, role: "client", create: true, WebSocket: NodeWebSocket });
  try {
    await agent.connect();
    const turn = agent.turnStart();
    await agent.textDelta("b1", '<b id="injected">bold?</b>');
    const page = await browser.newPage();
    const query = new URLSearchParams({ url: master.wsUrl, session: sid, token: API_KEY });
    await page.goto(`${origin}/examples/browser.html?${query}`);
    // (page code as strings: this file is compiled for Node, without the DOM's types)
    const connected = 'document.getElementById("status")?.textContent === "connected"';
    await page.waitForFunction(connected);
    await page.waitForFunction('document.getElementById("transcript")?.textContent?.includes("bold?")');
    assert.equal(await page.evaluate('document.getElementById("injected") === null'), true); // text, not markup
    const text = (await page.evaluate('document.getElementById("transcript").textContent')) as string;
    assert.ok(text.includes('<b id="injected">bold?</b>'));
    assert.ok(text.includes("turn 1 …"), text); // numbered from 1, as the dashboard and rawp tail
    assert.ok(!text.includes("turn 0"), text);
    const pid = await page.evaluate("globalThis.rawpEdge.participantId");
    await page.reload();
    await page.waitForFunction(connected);
    const after = (await page.evaluate(
      "({ pid: rawpEdge.participantId, resumed: rawpEdge.welcome.payload.resumed, saved: sessionStorage.length })",
    )) as { pid: string; resumed: boolean; saved: number };
    assert.equal(after.pid, pid);
    assert.equal(after.resumed, true);
    assert.ok(after.saved >= 1);
    await agent.textDone("b1");
    await agent.turnEnd(turn.turnId);
    await agent.usage({ inputTokens: 1, outputTokens: 1 });
    await page.waitForFunction('document.getElementById("session")?.textContent === "idle"');
  } finally {
    await agent.close();
    await browser.close();
    await master.stop();
    await new Promise<void>((r) => files.close(() => r()));
  }
});
