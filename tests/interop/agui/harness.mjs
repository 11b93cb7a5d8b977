// Drives the real @ag-ui/client HttpAgent against the relay's AG-UI endpoint.
//
// Usage: node harness.mjs SCENARIO.json   (prints one JSON report on stdout)
// SCENARIO: { url, token, steps: [ {kind: "run", text, id, dropAfter?}
//                                  | {kind: "resume", interruptId, payload}
//                                  | {kind: "connect", follow?}
//                                  | {kind: "history", count, size} ] }
// Every event the client receives goes through its own pipeline (enforceEvents, verifyEvents,
// defaultApplyEvents); a rule broken rejects runAgent and is reported in `errors`.
// `dropAfter: N` cuts the POST's SSE connection after N events and resumes it with a GET
// carrying Last-Event-ID, spliced into the one body the client reads (resume is the
// server's job: a cut stream raises nothing in the client).
import { HttpAgent, runHttpRequest, transformHttpEventStream } from "@ag-ui/client";
import { readFileSync } from "node:fs";

const scenario = JSON.parse(readFileSync(process.argv[2], "utf8"));
const auth = { Authorization: `Bearer ${scenario.token}` };
const report = { runs: [], errors: [], messages: [], pendingInterrupts: [] };

function splitEvents(text) {
  const parts = text.split("\n\n");
  return { complete: parts.slice(0, -1), rest: parts[parts.length - 1] };
}

function idOf(block) {
  for (const line of block.split("\n")) if (line.startsWith("id:")) return line.slice(3).trim();
  return null;
}

function isData(block) {
  return block.split("\n").some((line) => line.startsWith("data:"));
}

// A fetch whose first response is cut after `dropAfter` events and resumed with a GET.
function droppingFetch(dropAfter, seen) {
  return async (url, init) => {
    const cut = new AbortController();
    init.signal?.addEventListener("abort", () => cut.abort());
    const first = await fetch(url, { ...init, signal: cut.signal });
    if (!first.ok) return first;
    const encoder = new TextEncoder();
    async function* chunks() {
      let lastId = null;
      let count = 0;
      const decoder = new TextDecoder();
      let buffer = "";
      const reader = first.body.getReader();
      let dropped = false;
      while (!dropped) {
        const { done, value } = await reader.read();
        if (done) return;
        buffer += decoder.decode(value, { stream: true });
        const { complete, rest } = splitEvents(buffer);
        buffer = rest;
        for (const block of complete) {
          if (!isData(block)) continue;
          const id = idOf(block);
          if (id !== null) lastId = id;
          seen.push(id);
          yield encoder.encode(block + "\n\n");
          count += 1;
          if (count >= dropAfter) {
            dropped = true;
            break;
          }
        }
      }
      cut.abort(); // the connection drops mid-run
      report.dropped = { after: count, lastEventId: lastId };
      const resumed = await fetch(`${url}?until=run_end`, {
        headers: { ...auth, Accept: "text/event-stream", "Last-Event-ID": lastId },
      });
      const resumedReader = resumed.body.getReader();
      buffer = "";
      for (;;) {
        const { done, value } = await resumedReader.read();
        if (done) break;
        buffer += decoder.decode(value, { stream: true });
        const { complete, rest } = splitEvents(buffer);
        buffer = rest;
        for (const block of complete) {
          if (!isData(block)) continue;
          seen.push(idOf(block));
          yield encoder.encode(block + "\n\n");
        }
      }
    }
    const iterator = chunks();
    const body = new ReadableStream({
      async pull(controller) {
        const { done, value } = await iterator.next();
        if (done) controller.close();
        else controller.enqueue(value);
      },
    });
    return new Response(body, { status: 200, headers: first.headers });
  };
}

// HttpAgent has no connect(); this one tails the session with GET, through the same client
// pipeline (connectAgent verifies and applies every event like runAgent). `follow: true`
// tails without `?until=run_end` (the stream ends only when the server ends it).
class TailingAgent extends HttpAgent {
  constructor(config, follow) {
    super(config);
    this.follow = follow;
  }

  connect() {
    const url = this.follow ? this.url : `${this.url}?until=run_end`;
    const request = () => fetch(url, { headers: { ...auth, Accept: "text/event-stream" } });
    return transformHttpEventStream(runHttpRequest(request));
  }
}

function recorder(run) {
  return {
    onEvent({ event }) {
      run.events.push(event);
    },
  };
}

const agent = new HttpAgent({ url: scenario.url, headers: auth, threadId: scenario.threadId });
for (const step of scenario.steps) {
  const run = { kind: step.kind, events: [], ids: [] };
  report.runs.push(run);
  try {
    if (step.kind === "connect") {
      const tail = new TailingAgent({ url: scenario.url, headers: auth }, Boolean(step.follow));
      await tail.connectAgent({}, recorder(run));
      run.messages = tail.messages;
      continue;
    }
    if (step.kind === "history") {
      // A long chat held by the frontend: `count` earlier assistant messages of `size`
      // characters, all sent again with the next run (as HttpAgent does).
      for (let i = 0; i < step.count; i++) {
        agent.addMessage({ id: `h-${i}`, role: "assistant", content: "x".repeat(step.size) });
      }
      continue;
    }
    if (step.kind === "run") {
      agent.addMessage({ id: step.id, role: "user", content: step.text });
      agent.fetch = step.dropAfter
        ? droppingFetch(step.dropAfter, run.ids)
        : (url, init) => fetch(url, init);
      await agent.runAgent({}, recorder(run));
    } else if (step.kind === "resume") {
      agent.fetch = (url, init) => fetch(url, init);
      await agent.runAgent(
        { resume: [{ interruptId: step.interruptId, status: "resolved", payload: step.payload }] },
        recorder(run),
      );
    }
  } catch (error) {
    report.errors.push(String(error && error.message ? error.message : error));
  }
}
report.messages = agent.messages;
report.pendingInterrupts = agent.pendingInterrupts;
process.stdout.write(JSON.stringify(report));
