// The session state machine (notes §6), mirrored from protocol/state.py: phase × frame type →
// rule. fold() checks (throwing a ProtocolError and changing nothing) and then applies. The
// same reducer folds on the master, in the Python library and here, so every view agrees with a
// replay of the log (notes §8 invariant 3). Keep it in step with protocol/state.py: the shared
// corpus (test/corpus/) fails when the two disagree.
import { ProtocolError, isKnown, isSynthetic } from "./codec.js";
import type { Frame, KnownFrame, SenderRole } from "./frames.js";
import { SENDER_FRAME_TYPES } from "./generated/directions.js";

export type Phase = "idle" | "turn_open" | "usage_due" | "terminated";
export type Status = "idle" | "running" | "requires_action" | "rescheduling" | "terminated";

/** The most revisits one session may have pending (notes §17.5): the next is refused. */
export const MAX_PENDING_REVISITS = 100;

/** A revisit the client asked for that is neither woken nor withdrawn (notes §17.5). */
export interface PendingRevisit {
  /** The time asked for, as the request stated it (RFC 3339). */
  at: string;
  reason: string | null;
  /** The message_id of the request that set it (a later one with the same id replaces it). */
  requestId: string;
}

export class SessionState {
  phase: Phase = "idle";
  turnId: string | null = null;
  lastTurnIndex = -1;
  turnIds = new Set<string>();
  openText = new Set<string>();
  openThinking = new Set<string>();
  closedBlocks = new Set<string>();
  openCalls = new Map<string, string>(); // call_id -> tool_name
  callIds = new Set<string>();
  pendingInteractions = new Map<string, string>(); // id -> kind
  interactionIds = new Set<string>();
  agentState = "idle";
  name = "";
  turnsCompleted = 0;
  inputTokens = 0;
  outputTokens = 0;
  costUsed = 0;
  costUnit = "";
  compactions = 0;
  /** How the last run ended and, when it failed, why (notes §17.4). */
  stopReason: string | null = null;
  lastError: { code: string; message: string } | null = null;
  /** The status the log last stated in a session.status (null: none yet). */
  loggedStatus: string | null = null;
  /** A user.message reached the session with no turn open, and no turn started since. */
  runRequested = false;
  /** Revisits pending, by revisit_id, in the order asked (notes §17.5). */
  pendingRevisits = new Map<string, PendingRevisit>();
  /** §7.8.3: the state just before the first synthetic frame, and the real frames since. */
  beforeFinalization: SessionState | null = null;
  sinceFinalization: Array<[Frame, SenderRole]> = [];
  /** True when this view made the synthetic frames itself (no seq: never logged). */
  finalizedLocally = false;

  get finalized(): boolean {
    return this.beforeFinalization !== null;
  }

  /** A deep copy, the unfinalization record included. */
  clone(): SessionState {
    const c = new SessionState();
    c.phase = this.phase;
    c.turnId = this.turnId;
    c.lastTurnIndex = this.lastTurnIndex;
    c.turnIds = new Set(this.turnIds);
    c.openText = new Set(this.openText);
    c.openThinking = new Set(this.openThinking);
    c.closedBlocks = new Set(this.closedBlocks);
    c.openCalls = new Map(this.openCalls);
    c.callIds = new Set(this.callIds);
    c.pendingInteractions = new Map(this.pendingInteractions);
    c.interactionIds = new Set(this.interactionIds);
    c.agentState = this.agentState;
    c.name = this.name;
    c.turnsCompleted = this.turnsCompleted;
    c.inputTokens = this.inputTokens;
    c.outputTokens = this.outputTokens;
    c.costUsed = this.costUsed;
    c.costUnit = this.costUnit;
    c.compactions = this.compactions;
    c.stopReason = this.stopReason;
    c.lastError = this.lastError === null ? null : { ...this.lastError };
    c.loggedStatus = this.loggedStatus;
    c.runRequested = this.runRequested;
    c.pendingRevisits = new Map(this.pendingRevisits);
    c.beforeFinalization = this.beforeFinalization === null ? null : this.beforeFinalization.clone();
    c.sinceFinalization = [...this.sinceFinalization];
    c.finalizedLocally = this.finalizedLocally;
    return c;
  }

  /** Replace every field by `other`'s (Python's `state.__dict__.update`). */
  assign(other: SessionState): void {
    Object.assign(this, other);
  }
}

export function status(state: SessionState): Status {
  if (state.phase === "terminated") return "terminated";
  if (state.pendingInteractions.size > 0) return "requires_action";
  if (state.phase === "turn_open") return "running";
  if (state.pendingRevisits.size > 0) return "rescheduling";
  return "idle";
}

/** A deep copy without its own unfinalization record. */
export function snapshot(state: SessionState): SessionState {
  const before = state.beforeFinalization;
  state.beforeFinalization = null;
  try {
    const c = state.clone();
    c.sinceFinalization = [];
    c.finalizedLocally = false;
    return c;
  } finally {
    state.beforeFinalization = before;
  }
}

// --- direction -----------------------------------------------------------------------------

// Generated from schemas/{client,edge,master}-frame.json (npm run gen-types), so the table is the
// master's: test/unit.test.ts fails when it is stale.
const { client: CLIENT_TYPES, edge: EDGE_TYPES, master: MASTER_TYPES } = SENDER_FRAME_TYPES;
const MAY_SEND: Record<SenderRole, ReadonlySet<string>> = {
  client: new Set<string>(CLIENT_TYPES),
  edge: new Set<string>(EDGE_TYPES),
  master: new Set<string>(MASTER_TYPES),
};
const CONNECTION_TYPES = new Set(["connection.hello", "connection.welcome", "connection.ack"]);

/** The frame types `role` may send (notes §4), as schemas/<role>-frame.json lists them. */
export function allowedTypes(role: SenderRole): ReadonlySet<string> {
  return MAY_SEND[role];
}

// --- rules ---------------------------------------------------------------------------------

type Fn = (state: SessionState, frame: KnownFrame, role: SenderRole) => void;
interface Rule {
  check: Fn;
  apply: Fn;
  then: Phase | null;
  kind?: "turn_end";
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type P = any;
const payload = (frame: KnownFrame): P => frame.payload as P;
const nothing: Fn = () => {};
const UUID4 = /^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-4[0-9a-fA-F]{3}-[89abAB][0-9a-fA-F]{3}-[0-9a-fA-F]{12}$/;
const err = (code: string, message: string) => new ProtocolError(code, message);
const sorted = (values: Iterable<string>): string[] => [...values].sort();

const turnStartCheck: Fn = (state, frame) => {
  const p = payload(frame);
  if (!UUID4.test(p.turn_id)) throw err("turn_state", `turn_id must be a UUID v4, got ${p.turn_id}`);
  if (state.turnIds.has(p.turn_id)) throw err("turn_state", `turn_id ${p.turn_id} was already used in this session`);
  if (p.turn_index !== state.lastTurnIndex + 1) {
    throw err("turn_state", `turn_index must be ${state.lastTurnIndex + 1} (previous + 1), got ${p.turn_index}`);
  }
};
const turnStartApply: Fn = (state, frame) => {
  const p = payload(frame);
  state.turnId = p.turn_id;
  state.lastTurnIndex = p.turn_index;
  state.turnIds.add(p.turn_id);
  state.runRequested = false;
};
const refuseTurnStart: Fn = (state) => {
  throw err("turn_state", `turn ${state.turnId} is still open; end it with session.turn.end before starting another`);
};
const turnEndCheck: Fn = (state, frame) => {
  const p = payload(frame);
  if (p.error != null && p.stop_reason !== "error") {
    throw err("invalid_frame", `error is only for stop_reason 'error', not '${p.stop_reason}'`);
  }
  if (p.turn_id !== state.turnId) throw err("turn_state", `turn_id ${p.turn_id} is not the open turn (${state.turnId})`);
  if (p.stop_reason === "disconnected" && !isSynthetic(frame)) {
    throw err("turn_state", "stop_reason 'disconnected' is reserved for synthetic frames (§7.8.1)");
  }
  if (state.openCalls.size > 0) {
    throw err("tool_pairing", `turn cannot end while tool calls are unresolved: ${sorted(state.openCalls.keys()).join(", ")}`);
  }
};
const turnEndApply: Fn = (state, frame) => {
  for (const b of state.openText) state.closedBlocks.add(b);
  for (const b of state.openThinking) state.closedBlocks.add(b);
  state.openText.clear();
  state.openThinking.clear();
  state.turnId = null;
  state.turnsCompleted += 1;
  const p = payload(frame);
  state.stopReason = p.stop_reason;
  state.lastError = p.error == null ? null : { code: p.error.code, message: p.error.message };
};
const userMessageApply: Fn = (state) => {
  if (state.phase !== "turn_open") state.runRequested = true;
};
const statusApply: Fn = (state, frame) => {
  state.loggedStatus = payload(frame).status;
};
// How far `at` may lie from now is the master's check (it has the clock).
const revisitRequestCheck: Fn = (state, frame) => {
  const rid = payload(frame).revisit_id;
  if (!state.pendingRevisits.has(rid) && state.pendingRevisits.size >= MAX_PENDING_REVISITS) {
    throw err("too_many_revisits", `the session has ${MAX_PENDING_REVISITS} revisits pending; cancel one first`);
  }
};
const revisitRequestApply: Fn = (state, frame) => {
  const p = payload(frame);
  state.pendingRevisits.delete(p.revisit_id); // the same id again reschedules it (moved last)
  state.pendingRevisits.set(p.revisit_id, { at: p.at, reason: p.reason ?? null, requestId: frame.message_id });
};
// A cancel of an unknown or woken id changes nothing; a wake ends the revisit it names.
const revisitDoneApply: Fn = (state, frame) => {
  state.pendingRevisits.delete(payload(frame).revisit_id);
};
const refuseTurnEnd: Fn = () => {
  throw err("turn_state", "no turn is open; session.turn.end must close an open turn");
};
const usageCheck: Fn = (_state, frame) => {
  const u = payload(frame).context_window?.utilization;
  if (u !== undefined && u !== null && !(u >= 0 && u <= 1)) {
    throw err("invalid_frame", `context_window.utilization must be in [0, 1], got ${u}`);
  }
};
const usageApply: Fn = (state, frame, role) => {
  if (role !== "client") return; // the master's totals restate the client's reports
  const p = payload(frame);
  state.inputTokens += p.token_usage.input_tokens;
  state.outputTokens += p.token_usage.output_tokens;
  state.costUsed = p.cost_usage.used;
  state.costUnit = p.cost_usage.unit;
};
const compactedCheck: Fn = (_state, frame) => {
  const p = payload(frame);
  if (p.current_token_count > p.previous_token_count) {
    throw err("invalid_frame", `current_token_count (${p.current_token_count}) exceeds previous_token_count (${p.previous_token_count})`);
  }
};
const compactedApply: Fn = (state) => {
  state.compactions += 1;
};
const renamedCheck: Fn = (_state, frame, role) => {
  const p = payload(frame);
  if (p.renamed_by !== role) throw err("invalid_frame", `renamed_by must be the sender's role (${role}), got ${p.renamed_by}`);
  if (p.session_id !== frame.session_id) throw err("invalid_frame", "payload.session_id must be the envelope's session_id");
};
const renamedApply: Fn = (state, frame) => {
  state.name = payload(frame).name;
};
const deletedCheck: Fn = (_state, frame) => {
  if (payload(frame).session_id !== frame.session_id) {
    throw err("invalid_frame", "payload.session_id must be the envelope's session_id");
  }
};
const deletedApply: Fn = (state) => {
  state.openCalls.clear();
  state.pendingInteractions.clear();
  state.openText.clear();
  state.openThinking.clear();
  state.turnId = null;
  state.agentState = "idle";
  state.pendingRevisits.clear(); // an ended session is never woken (notes §17.5)
  dropRecord(state);
};
const agentStateApply: Fn = (state, frame) => {
  state.agentState = payload(frame).state;
  if (isSynthetic(frame)) state.pendingInteractions.clear();
};
const deltaCheck = (kind: "text" | "thinking"): Fn => (state, frame) => {
  const block = payload(frame).block_id;
  if (state.closedBlocks.has(block)) throw err("block_state", `${kind} block ${block} is already done; use a new block_id`);
  const other = kind === "text" ? state.openThinking : state.openText;
  if (other.has(block)) throw err("block_state", `block ${block} is open as a different kind of block`);
};
const deltaApply = (kind: "text" | "thinking"): Fn => (state, frame) => {
  (kind === "text" ? state.openText : state.openThinking).add(payload(frame).block_id);
};
const doneCheck = (kind: "text" | "thinking"): Fn => (state, frame) => {
  const block = payload(frame).block_id;
  if (state.closedBlocks.has(block)) throw err("block_state", `${kind} block ${block} is already done`);
  const other = kind === "text" ? state.openThinking : state.openText;
  if (other.has(block)) throw err("block_state", `block ${block} is open as a different kind of block`);
};
const doneApply = (kind: "text" | "thinking"): Fn => (state, frame) => {
  const block = payload(frame).block_id;
  (kind === "text" ? state.openText : state.openThinking).delete(block);
  state.closedBlocks.add(block);
};
const toolRequestCheck: Fn = (state, frame) => {
  const call = payload(frame).call_id;
  if (state.callIds.has(call)) throw err("tool_pairing", `call_id ${call} was already used in this session`);
};
const toolRequestApply: Fn = (state, frame) => {
  const p = payload(frame);
  state.callIds.add(p.call_id);
  state.openCalls.set(p.call_id, p.tool_name);
};
const toolResultCheck: Fn = (state, frame) => {
  const call = payload(frame).call_id;
  if (!state.openCalls.has(call)) {
    const why = state.callIds.has(call) ? "already has its result" : "has no tool.invoke.request";
    throw err("tool_pairing", `tool.invoke.result for call_id ${call}: the call ${why}`);
  }
};
const toolResultApply: Fn = (state, frame) => {
  state.openCalls.delete(payload(frame).call_id);
};
const askCheck: Fn = (state, frame) => {
  const iid = payload(frame).interaction_id;
  if (state.interactionIds.has(iid)) throw err("interaction_state", `interaction_id ${iid} was already used in this session`);
};
const askApply: Fn = (state, frame) => {
  const p = payload(frame);
  state.interactionIds.add(p.interaction_id);
  state.pendingInteractions.set(p.interaction_id, p.kind);
};
const answerCheck: Fn = (state, frame) => {
  const iid = payload(frame).interaction_id;
  if (!state.pendingInteractions.has(iid)) {
    throw err("interaction_state", `interaction ${iid} is not pending (unknown or answered)`);
  }
};
const answerApply: Fn = (state, frame) => {
  state.pendingInteractions.delete(payload(frame).interaction_id);
};
// notes §16.4: agent.interaction.cancel ends a pending interaction.
const withdrawApply: Fn = (state, frame) => {
  state.pendingInteractions.delete(payload(frame).interaction_id);
};
const refuseTerminated: Fn = () => {
  throw err("not_allowed", "the session was deleted; no further frames are accepted");
};
const masterNoticeOnly: Fn = (state, frame, role) => {
  if (role !== "master") refuseTerminated(state, frame, role);
};

const rule = (check: Fn, apply: Fn, then: Phase | null = null): Rule => ({ check, apply, then });
const ANYTIME: Record<string, Rule> = {
  "session.usage": rule(usageCheck, usageApply),
  "session.compacted": rule(compactedCheck, compactedApply),
  "session.renamed": rule(renamedCheck, renamedApply),
  "session.error": rule(nothing, nothing),
  "session.presence": rule(nothing, nothing),
  "session.deleted": rule(deletedCheck, deletedApply, "terminated"),
  "agent.state": rule(nothing, agentStateApply),
  "agent.text.delta": rule(deltaCheck("text"), deltaApply("text")),
  "agent.text.done": rule(doneCheck("text"), doneApply("text")),
  "agent.thinking.delta": rule(deltaCheck("thinking"), deltaApply("thinking")),
  "agent.thinking.done": rule(doneCheck("thinking"), doneApply("thinking")),
  "tool.invoke.request": rule(toolRequestCheck, toolRequestApply),
  "tool.invoke.result": rule(toolResultCheck, toolResultApply),
  "agent.interaction.request": rule(askCheck, askApply),
  "control.interaction.response": rule(answerCheck, answerApply),
  "agent.interaction.cancel": rule(answerCheck, withdrawApply),
  "user.message": rule(nothing, userMessageApply),
  "control.cancel": rule(nothing, nothing),
  "session.status": rule(nothing, statusApply),
  "session.revisit.request": rule(revisitRequestCheck, revisitRequestApply),
  "session.revisit.cancel": rule(nothing, revisitDoneApply),
  "session.wake": rule(nothing, revisitDoneApply),
};
const TURN_START = rule(turnStartCheck, turnStartApply, "turn_open");
const TURN_END: Rule = { ...rule(turnEndCheck, turnEndApply, "usage_due"), kind: "turn_end" };
const REFUSED = rule(refuseTerminated, nothing);

const SESSION_FRAME_TYPES = [...new Set([...CLIENT_TYPES, ...EDGE_TYPES, ...MASTER_TYPES])].filter(
  (t) => !CONNECTION_TYPES.has(t),
);

const TABLE = new Map<string, Rule>();
const key = (phase: Phase, tag: string) => `${phase} ${tag}`;
for (const phase of ["idle", "turn_open", "usage_due"] as const) {
  for (const [tag, r] of Object.entries(ANYTIME)) TABLE.set(key(phase, tag), r);
}
TABLE.set(key("idle", "session.turn.start"), TURN_START);
TABLE.set(key("usage_due", "session.turn.start"), TURN_START);
TABLE.set(key("turn_open", "session.turn.start"), rule(refuseTurnStart, nothing));
TABLE.set(key("turn_open", "session.turn.end"), TURN_END);
TABLE.set(key("idle", "session.turn.end"), rule(refuseTurnEnd, nothing));
TABLE.set(key("usage_due", "session.turn.end"), rule(refuseTurnEnd, nothing));
for (const tag of SESSION_FRAME_TYPES) if (tag !== "session.history") TABLE.set(key("terminated", tag), REFUSED);
TABLE.set(key("terminated", "session.presence"), rule(masterNoticeOnly, nothing));
TABLE.set(key("terminated", "session.error"), rule(masterNoticeOnly, nothing));
TABLE.set(key("terminated", "session.status"), rule(masterNoticeOnly, nothing));

/**
 * Check `frame` from `role` without changing `state`: throws the ProtocolError that refuses
 * it; returns warnings (usage_missing) that do not.
 */
export function check(state: SessionState, frame: Frame, role: SenderRole): ProtocolError[] {
  if (!isKnown(frame)) {
    if (state.phase === "terminated") refuseTerminated(state, frame as KnownFrame, role);
    return [];
  }
  const tag = frame.type;
  if (!MAY_SEND[role].has(tag)) throw err("direction", `a ${role} may not send ${tag} (notes §4)`);
  if (CONNECTION_TYPES.has(tag)) {
    if (tag === "connection.ack") return [];
    throw err("invalid_frame", `${tag} is only valid as the first frame of a connection`);
  }
  if (isSynthetic(frame) && role !== "master") {
    throw err("invalid_frame", "metadata.synthetic frames are made by the master only (§7.8.1)");
  }
  const r = TABLE.get(key(state.phase, tag));
  if (r === undefined) {
    if (state.phase === "terminated") refuseTerminated(state, frame, role);
    if (tag === "session.history") throw err("invalid_frame", "session.history is folded by finalize.foldHistory, not fold()");
    throw err("protocol_error", `${tag} is not valid in phase ${state.phase}`);
  }
  r.check(state, frame, role);
  if (state.phase === "usage_due" && role === "client" && tag !== "session.usage") {
    return [err("usage_missing", `session.usage must follow session.turn.end immediately (§7.5.2); got ${tag}`)];
  }
  return [];
}

/** Check, then apply `frame` to `state` in place. */
export function fold(state: SessionState, frame: Frame, role: SenderRole): ProtocolError[] {
  const warnings = check(state, frame, role);
  if (!isKnown(frame)) {
    if (role === "client" && state.beforeFinalization !== null) recordForUnfinalization(state, frame, role);
    return warnings;
  }
  if (CONNECTION_TYPES.has(frame.type)) return warnings;
  recordForUnfinalization(state, frame, role);
  const r = TABLE.get(key(state.phase, frame.type))!;
  r.apply(state, frame, role);
  state.phase = nextPhase(state, frame, role, r);
  return warnings;
}

function nextPhase(state: SessionState, frame: KnownFrame, role: SenderRole, r: Rule): Phase {
  if (r.kind === "turn_end" && (isSynthetic(frame) || role === "master")) return "idle";
  if (r.then !== null) return r.then;
  if (state.phase === "usage_due" && role === "client") return "idle";
  return state.phase;
}

function recordForUnfinalization(state: SessionState, frame: Frame, role: SenderRole): void {
  if (isKnown(frame) && isSynthetic(frame)) {
    const local = frame.seq === undefined || frame.seq === null;
    if (state.beforeFinalization === null) {
      state.beforeFinalization = snapshot(state);
      state.finalizedLocally = local;
    } else if (local && !state.finalizedLocally) {
      state.beforeFinalization = state.clone();
      state.sinceFinalization = [];
      state.finalizedLocally = true;
    }
    return;
  }
  if (state.beforeFinalization === null) return;
  if (role === "client") dropRecord(state);
  else state.sinceFinalization.push([frame, role]);
}

export function dropRecord(state: SessionState): void {
  state.beforeFinalization = null;
  state.sinceFinalization = [];
  state.finalizedLocally = false;
}
