// The shared corpus: frame streams with the Python SessionView's results (tests/sdk_corpus.py
// writes them); the TypeScript view must reach the same result at every check point.
import assert from "node:assert/strict";
import { readFileSync, readdirSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { decodeObject } from "../src/codec.js";
import type { SenderRole } from "../src/frames.js";
import { SessionView } from "../src/view.js";
import { corpusDir } from "./helpers.js";

interface Step {
  op: "receive" | "fold" | "connection_lost" | "restore" | "expect";
  frame?: unknown;
  role?: SenderRole;
  view?: unknown;
}
interface Case {
  name: string;
  steps: Step[];
}

export function viewResult(view: SessionView): unknown {
  const s = view.state;
  const result = {
    blocks: view.blocks,
    totals: view.totals,
    notices: view.notices,
    status: view.status,
    agent_state: view.agentState,
    name: view.name,
    last_seq: view.lastSeq,
    last_message_id: view.lastMessageId,
    skipped: view.skipped,
    finalized_locally: view.finalizedLocally,
    participants: view.participants,
    state: {
      phase: s.phase,
      turn_id: s.turnId,
      last_turn_index: s.lastTurnIndex,
      open_text: [...s.openText].sort(),
      open_thinking: [...s.openThinking].sort(),
      closed_blocks: [...s.closedBlocks].sort(),
      open_calls: [...s.openCalls.keys()],
      pending_interactions: [...s.pendingInteractions.keys()].sort(),
      pending_revisits: [...s.pendingRevisits.keys()],
      turns_completed: s.turnsCompleted,
      input_tokens: s.inputTokens,
      output_tokens: s.outputTokens,
      compactions: s.compactions,
      finalized: s.finalized,
    },
  };
  return JSON.parse(JSON.stringify(result));
}

const files = readdirSync(corpusDir).filter((f) => f.startsWith("view-") && f.endsWith(".json")).sort();

test("the corpus is present", () => {
  assert.ok(files.length > 0, "no corpus files: run python -m tests.sdk_corpus");
});

for (const file of files) {
  const body = JSON.parse(readFileSync(join(corpusDir, file), "utf8")) as { format: number; cases: Case[] };
  test(`the TypeScript view reaches the Python view's result on every case of ${file}`, () => {
    assert.equal(body.format, 1);
    for (const c of body.cases) {
      let view = new SessionView("s-test");
      let checkpoint = 0;
      for (const step of c.steps) {
        if (step.op === "receive" || step.op === "fold") {
          const d = decodeObject(structuredClone(step.frame));
          assert.ok(d.ok, `${c.name}: a frame the Python decoder accepted was refused: ${d.ok ? "" : d.error.message}`);
          if (step.op === "receive") view.receive(d.frame);
          else view.fold(d.frame, step.role!);
        } else if (step.op === "connection_lost") {
          view.connectionLost();
        } else if (step.op === "restore") {
          view = SessionView.restore(JSON.parse(JSON.stringify(view.snapshot())), true);
        } else {
          checkpoint += 1;
          assert.deepEqual(
            viewResult(view),
            JSON.parse(JSON.stringify(step.view)),
            `${c.name}, check point ${checkpoint}`,
          );
        }
      }
    }
  });
}
