// Shared test helpers: paths, a real `rawp serve --store memory` child process on free
// 127.0.0.1 ports, a WebSocket constructor whose network can be cut, waiting with a bound.
import { spawn, type ChildProcess } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import WebSocket from "ws";
import type { WebSocketConstructor, WebSocketLike } from "../src/client.js";

const here = dirname(fileURLToPath(import.meta.url)); // dist/test
export const packageDir = resolve(here, "..", "..");
export const repoDir = resolve(packageDir, "..", "..");
export const corpusDir = join(packageDir, "test", "corpus");
export const API_KEY = "sdk-test-key";

function rawpBin(): string {
  const fromEnv = process.env.RAWP_BIN;
  if (fromEnv) return fromEnv;
  const venv = join(repoDir, ".venv", "bin", "rawp");
  if (existsSync(venv)) return venv;
  return "rawp";
}

/** The URLs a starting `rawp serve` announces on a stdout line: `RAWP master: ws URL  http URL`,
 * or the JSON `listening` event of `--log-format json`; null for any other line. */
export function announcedUrls(line: string): [string, string] | null {
  if (line.startsWith("RAWP master:")) {
    const words = line.split(/\s+/);
    return words.length >= 6 ? [words[3]!, words[5]!] : null;
  }
  if (!line.startsWith("{")) return null;
  try {
    const event = JSON.parse(line) as { event?: unknown; ws?: unknown; http?: unknown };
    if (event.event === "listening" && typeof event.ws === "string" && typeof event.http === "string") {
      return [event.ws, event.http];
    }
  } catch {
    // a partial line: the rest comes with the next chunk
  }
  return null;
}

/** One `rawp serve --store memory` started by a test (killed by its own pid). */
export class Master {
  wsUrl = "";
  httpUrl = "";
  private proc: ChildProcess | null = null;
  private log: string[] = [];
  constructor(
    private readonly extra: string[] = [],
    private wsPort = 0,
    private httpPort = 0,
  ) {}

  async start(timeoutMs = 60_000): Promise<this> {
    const args = [
      "serve", "--store", "memory", "--host", "127.0.0.1",
      "--ws-port", String(this.wsPort), "--http-port", String(this.httpPort),
      "--api-key", `default:${API_KEY}`, "--log-format", "json", "--log-level", "WARNING",
      ...this.extra,
    ];
    const proc = spawn(rawpBin(), args, { stdio: ["ignore", "pipe", "pipe"], env: { ...process.env, PYTHONUNBUFFERED: "1" } });
    this.proc = proc;
    proc.stderr?.on("data", (d: Buffer) => {
      this.log.push(d.toString());
      if (this.log.length > 200) this.log.shift();
    });
    await new Promise<void>((resolveStart, reject) => {
      // A master that did not announce itself in time is stopped: a child left running would
      // keep the test process alive after the failure.
      const timer = setTimeout(() => {
        proc.kill("SIGKILL");
        reject(new Error(`rawp serve did not start within ${timeoutMs} ms:\n${this.log.join("")}`));
      }, timeoutMs);
      let buffered = "";
      proc.stdout?.on("data", (d: Buffer) => {
        buffered += d.toString();
        // With --log-format json the announcement is one JSON "listening" event.
        for (const line of buffered.split("\n")) {
          const urls = announcedUrls(line);
          if (urls === null) continue;
          [this.wsUrl, this.httpUrl] = urls;
          clearTimeout(timer);
          resolveStart();
          break;
        }
      });
      proc.on("exit", (code) => {
        clearTimeout(timer);
        reject(new Error(`rawp serve exited (${code}):\n${this.log.join("")}`));
      });
    });
    const ws = new URL(this.wsUrl);
    const http = new URL(this.httpUrl);
    this.wsPort = Number(ws.port);
    this.httpPort = Number(http.port);
    return this;
  }

  /** SIGKILL: a crash, no shutdown. */
  async kill(): Promise<void> {
    await this.signal("SIGKILL");
  }

  async stop(): Promise<void> {
    await this.signal("SIGTERM");
  }

  private async signal(sig: NodeJS.Signals): Promise<void> {
    const proc = this.proc;
    if (proc === null || proc.exitCode !== null || proc.signalCode !== null) return;
    const exited = new Promise<void>((r) => proc.once("exit", () => r()));
    proc.kill(sig);
    const timer = setTimeout(() => proc.kill("SIGKILL"), 10_000);
    await exited;
    clearTimeout(timer);
  }

  /** A fresh master on the same ports (the memory store starts empty). */
  again(): Master {
    return new Master(this.extra, this.wsPort, this.httpPort);
  }

  async http(method: string, path: string, body?: unknown): Promise<Response> {
    return fetch(`${this.httpUrl}${path}`, {
      method,
      headers: { authorization: `Bearer ${API_KEY}`, "content-type": "application/json" },
      ...(body !== undefined ? { body: JSON.stringify(body) } : {}),
    });
  }
}

/**
 * A real `ws` WebSocket whose network can be cut: while `down`, connections go to a closed
 * local port (a real ECONNREFUSED), as when the network is gone.
 */
export function gatedWebSocket(): { WebSocket: WebSocketConstructor; gate: { down: boolean } } {
  const gate = { down: false };
  class Gated extends WebSocket {
    constructor(url: string, protocols?: string | string[]) {
      super(gate.down ? "ws://127.0.0.1:9/v1/ws" : url, protocols);
    }
  }
  return { WebSocket: Gated as unknown as WebSocketConstructor, gate };
}

export const NodeWebSocket = WebSocket as unknown as WebSocketConstructor;
export type { WebSocketLike };

/** Wait until `predicate` holds; fail after `timeoutMs` (a bound, not a timing assertion). */
export async function until(predicate: () => boolean, what: string, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!predicate()) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

let counter = 0;
export function sessionId(prefix = "sdk"): string {
  counter += 1;
  return `${prefix}-${process.pid}-${counter}-${Date.now().toString(36)}`;
}
