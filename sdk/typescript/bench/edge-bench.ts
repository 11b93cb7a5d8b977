// `node dist/bench/edge-bench.js CONFIG_JSON`: the SDK as an edge in the `sdk_edge` benchmark
// (bench/sdk_edge.py). Speaks the benchmark's JSON lines (bench/_loadgen.py): prints
// {"event": "ready"} once attached, records receive time − send stamp ("bt", CLOCK_MONOTONIC
// ns, an extra envelope key the master relays untouched) for every frame delivered between
// {"cmd": "record"} and {"cmd": "stop"}, then prints {"event": "result", ...}. Each frame goes
// the whole SDK path: JSON parse, schema validation, the SessionView fold, the "frame" event.
import { createInterface } from "node:readline";
import WebSocket from "ws";
import { RawpClient, type WebSocketConstructor } from "../src/client.js";

interface Config {
  url: string;
  session_id: string;
  token: string;
  max_seconds?: number;
}

const cfg = JSON.parse(process.argv[2] ?? "{}") as Config;
const emit = (event: string, data: Record<string, unknown> = {}) => process.stdout.write(JSON.stringify({ event, ...data }) + "\n");
const stopTimer = setTimeout(() => process.exit(2), (cfg.max_seconds ?? 300) * 1000);

/** Nearest-rank percentile, as bench/_procs.py's percentiles(). */
function percentile(sorted: Float64Array, q: number): number {
  if (sorted.length === 0) return 0;
  const rank = Math.max(1, Math.ceil((q / 100) * sorted.length));
  return sorted[rank - 1]!;
}

async function main(): Promise<void> {
  const edge = new RawpClient({
    url: cfg.url, sessionId: cfg.session_id, role: "edge", token: cfg.token,
    WebSocket: WebSocket as unknown as WebSocketConstructor,
    buffer: { policy: "RING", capacity_bytes: 1 << 20 }, maxQueue: 1,
  });
  let recording = false;
  let samples = new Float64Array(1 << 16);
  let count = 0;
  let received = 0;
  edge.on("frame", (d) => {
    const now = process.hrtime.bigint();
    const bt = (d.frame as Record<string, unknown>).bt;
    if (typeof bt !== "number") return;
    received += 1;
    if (!recording) return;
    if (count === samples.length) {
      const grown = new Float64Array(samples.length * 2);
      grown.set(samples);
      samples = grown;
    }
    samples[count++] = Number(now - BigInt(bt)) / 1000; // µs
  });
  let errors = 0;
  edge.on("error", () => {
    errors += 1;
  });
  await edge.connect();
  emit("ready");
  const lines = createInterface({ input: process.stdin });
  for await (const line of lines) {
    const cmd = (JSON.parse(line) as { cmd: string }).cmd;
    if (cmd === "record") recording = true;
    else if (cmd === "stop") {
      recording = false;
      const sorted = samples.slice(0, count).sort();
      let sum = 0;
      for (const x of sorted) sum += x;
      emit("result", {
        received,
        errors,
        view_skipped: edge.view.skipped,
        latency_us: {
          count,
          p50: percentile(sorted, 50),
          p99: percentile(sorted, 99),
          p999: percentile(sorted, 99.9),
          max: count ? sorted[count - 1] : 0,
          mean: count ? sum / count : 0,
        },
      });
      break;
    }
  }
  await edge.close();
  clearTimeout(stopTimer);
}

main().catch((e: unknown) => {
  emit("error", { error: String(e) });
  process.exit(1);
});
