// Finalization and unfinalization (RAWP §7.8, notes §8, §15.1, §15.10), mirrored from
// protocol/finalize.py: the same pure functions over a SessionState.
import { ProtocolError, decodeObject, isKnown, newMessageId, now } from "./codec.js";
import type { Frame, KnownFrame, SenderRole } from "./frames.js";
import type { BufferStatus, History, Sender } from "./generated/frames.js";
import { SessionState, allowedTypes, fold, snapshot } from "./state.js";

export const CONNECTION_LOST = "Connection lost";

export function needsFinalization(state: SessionState): boolean {
  return (
    state.openText.size > 0 ||
    state.openThinking.size > 0 ||
    state.openCalls.size > 0 ||
    state.turnId !== null ||
    state.pendingInteractions.size > 0 ||
    state.agentState !== "idle"
  );
}

/** The synthetic frames that finalize `state` (§7.8.1), in the table's order. */
export function finalize(state: SessionState, sessionId: string, sender: Sender): KnownFrame[] {
  const frames: KnownFrame[] = [];
  const envelope = () => ({
    message_id: newMessageId(),
    session_id: sessionId,
    timestamp: now(),
    sender,
    metadata: { synthetic: true },
  });
  for (const block of [...state.openText].sort()) {
    frames.push({ type: "agent.text.done", payload: { block_id: block }, ...envelope() });
  }
  for (const block of [...state.openThinking].sort()) {
    frames.push({ type: "agent.thinking.done", payload: { block_id: block }, ...envelope() });
  }
  for (const call of state.openCalls.keys()) {
    frames.push({
      type: "tool.invoke.result",
      payload: { call_id: call, status: "cancelled", output: CONNECTION_LOST },
      ...envelope(),
    });
  }
  if (state.turnId !== null) {
    frames.push({
      type: "session.turn.end",
      payload: { turn_id: state.turnId, stop_reason: "disconnected" },
      ...envelope(),
    });
  }
  if (state.agentState !== "idle" || state.pendingInteractions.size > 0) {
    frames.push({ type: "agent.state", payload: { state: "idle" }, ...envelope() });
  }
  return frames;
}

/** §7.8.3: a history undoes finalization unless truncated or it holds a session.deleted. */
export function unfinalizes(status: BufferStatus, frames: Iterable<Frame>): boolean {
  if (status.truncated) return false;
  for (const f of frames) if (f.type === "session.deleted") return false;
  return true;
}

export interface HistoryPlan {
  state: SessionState;
  accepted: Frame[];
  refused: Array<[Frame, ProtocolError]>;
  unfinalized: boolean;
}

/** Fold a history's frames (sent by `role`) into a copy of `state`; `state` never changes. */
export function planHistory(
  state: SessionState,
  frames: readonly Frame[],
  status: BufferStatus,
  role: SenderRole,
): HistoryPlan {
  if (!allowedTypes(role).has("session.history")) {
    throw new ProtocolError("direction", `a ${role} may not send session.history (notes §4)`);
  }
  if (state.phase === "terminated") {
    throw new ProtocolError("not_allowed", "the session has ended; no further frames are accepted");
  }
  const ours = state.finalized && (role !== "master" || state.finalizedLocally);
  if (!unfinalizes(status, frames)) {
    const kept = ours ? snapshot(state) : state.clone();
    return { state: kept, accepted: [...frames], refused: [], unfinalized: false };
  }
  const work = ours ? unfinalizedCopy(state, role) : state.clone();
  const plan: HistoryPlan = { state: work, accepted: [], refused: [], unfinalized: ours };
  for (const frame of frames) {
    const frameRole = roleOf(frame, role);
    try {
      foldEntry(work, frame, frameRole);
    } catch (e) {
      if (!(e instanceof ProtocolError)) throw e;
      plan.refused.push([frame, e]);
      continue;
    }
    plan.accepted.push(frame);
  }
  return plan;
}

/** Decode a history's elements, skipping the undecodable ones. */
export function historyFrames(history: History): Frame[] {
  const out: Frame[] = [];
  for (const raw of history.payload.frames) {
    const d = decodeObject(raw);
    if (d.ok) out.push(d.frame);
  }
  return out;
}

export function foldHistory(state: SessionState, history: History, role: SenderRole): SessionState {
  return planHistory(state, historyFrames(history), history.payload.buffer_status, role).state;
}

/** Fold any frame, histories included; returns the state to use from now on (`state` itself). */
export function foldEntry(state: SessionState, frame: Frame, role: SenderRole): SessionState {
  if (isKnown(frame) && frame.type === "session.history") {
    state.assign(foldHistory(state, frame, role));
    return state;
  }
  fold(state, frame, role);
  return state;
}

function unfinalizedCopy(state: SessionState, role: SenderRole): SessionState {
  const before = state.beforeFinalization!;
  let restored: SessionState;
  if (!before.finalized) restored = snapshot(before);
  else if (role === "master") restored = before.clone();
  else restored = unfinalizedCopy(before, role);
  for (const [frame, frameRole] of state.sinceFinalization) {
    try {
      foldEntry(restored, frame, frameRole);
    } catch (e) {
      if (!(e instanceof ProtocolError)) throw e;
    }
  }
  return restored;
}

function roleOf(frame: Frame, fallback: SenderRole): SenderRole {
  if (fallback === "master" && frame.sender !== undefined && frame.sender !== null) return frame.sender.role;
  return fallback;
}
