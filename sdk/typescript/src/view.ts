// A session as a UI shows it: transcript blocks folded from frames (RAWP §7, §7.8; notes §6, §8).
// Mirrors protocol/view.py: the same state machine (./state.ts) and finalization
// (./finalize.ts), the same blocks (snake_case fields, `kind` tag, as the Python view's JSON),
// checked against the Python view by the shared corpus (test/corpus/).
//
// Frame content is data: nothing here builds HTML. A UI renders block.text as text
// (textContent, not innerHTML).
import { ProtocolError, decodeObject, isKnown, isSynthetic } from "./codec.js";
import type { Frame, KnownFrame, SenderRole } from "./frames.js";
import { finalize, planHistory, unfinalizes } from "./finalize.js";
import type { BufferStatus, History, PreservedElements, Sender, SessionInfo } from "./generated/frames.js";
import { type PendingRevisit, SessionState, type Status, fold as foldState, snapshot, status as statusOf } from "./state.js";
import { endingNotice } from "./endings.js";

/** The sender stamped on frames this view synthesizes itself (§7.8.1, never sent). */
export const LOCAL_SENDER: Sender = { role: "master", participant_id: "local" };
const COMPLETE: BufferStatus = { policy_applied: "RING", truncated: false, lost_frame_count: 0 };
const MAX_REASONS = 100;

interface BlockBase {
  message_id: string;
  seq: number | null;
  turn_id: string | null;
}
export interface TurnBlock extends BlockBase {
  kind: "turn";
  turn_index: number;
  mode: string | null;
  ended: boolean;
  stop_reason: string | null;
  tool_invocation_count: number | null;
  synthetic: boolean;
}
export interface TextBlock extends BlockBase {
  kind: "text";
  block_id: string;
  text: string;
  done: boolean;
  synthetic: boolean;
}
export interface ThinkingBlock extends BlockBase {
  kind: "thinking";
  block_id: string;
  text: string;
  done: boolean;
  synthetic: boolean;
}
export interface ToolCallBlock extends BlockBase {
  kind: "tool_call";
  call_id: string;
  tool_name: string;
  input: Record<string, unknown>;
  status: "pending" | "ok" | "error" | "cancelled";
  output: unknown;
  synthetic: boolean;
}
export interface InteractionBlock extends BlockBase {
  kind: "interaction";
  interaction_id: string;
  interaction_kind: string;
  prompt: string;
  options: unknown[] | null;
  /** "withdrawn": the agent cancelled the question (notes §16.4). */
  status: "pending" | "answered" | "discarded" | "withdrawn";
  response: unknown;
  synthetic: boolean;
  /** The agent's reason when it withdrew the question (notes §16.4). */
  withdraw_reason: string | null;
}
export interface UserMessageBlock extends BlockBase {
  kind: "user_message";
  text: string;
  participant_id: string | null;
}
export interface UsageBlock extends BlockBase {
  kind: "usage";
  input_tokens: number;
  output_tokens: number;
  cache_read_tokens: number | null;
  cache_write_tokens: number | null;
  thinking_tokens: number | null;
  cost_used: number;
  cost_limit: number;
  cost_unit: string;
  messages_used: number;
  messages_limit: number;
  context_utilization: number | null;
  time_to_reset: string;
  from_master: boolean;
}
export interface CompactionBlock extends BlockBase {
  kind: "compaction";
  summary: string;
  previous_token_count: number;
  current_token_count: number;
  trigger: string;
  preserved_elements: PreservedElements | null;
}
export interface NoticeBlock extends BlockBase {
  kind: "notice";
  notice: "renamed" | "deleted" | "ended" | "error" | "history" | "cancel" | "revisit" | "revisit_cancelled" | "wake";
  text: string;
  error_code: string | null;
  truncated: boolean;
  lost_frame_count: number | null;
  /** Who sent the frame: only the master's notices are the session's own facts (notes §16.8). */
  reported_by: SenderRole;
}

/** Does this notice say the session's data is incomplete (§7.1.1, notes §16.8)? */
export function dataIncomplete(block: NoticeBlock): boolean {
  if (block.notice === "history") return block.truncated;
  return block.error_code === "history_truncated" && block.reported_by === "master";
}
export type Block =
  | TurnBlock
  | TextBlock
  | ThinkingBlock
  | ToolCallBlock
  | InteractionBlock
  | UserMessageBlock
  | UsageBlock
  | CompactionBlock
  | NoticeBlock;

export interface Totals {
  turns: number;
  tool_calls: number;
  input_tokens: number;
  output_tokens: number;
  cache_read_tokens: number;
  cache_write_tokens: number;
  thinking_tokens: number;
  cost_used: number;
  cost_limit: number;
  cost_unit: string;
  context_utilization: number | null;
  compactions: number;
}

/** Something this participant alone was told or noticed (not in the session log). */
export interface Notice {
  kind: "error" | "connection_lost" | "backlog_truncated" | "local";
  text: string;
  /** blocks.length when it happened, so a UI can show it inline. */
  position: number;
  error_code: string | null;
}

function newTotals(): Totals {
  return {
    turns: 0, tool_calls: 0, input_tokens: 0, output_tokens: 0, cache_read_tokens: 0,
    cache_write_tokens: 0, thinking_tokens: 0, cost_used: 0, cost_limit: -1, cost_unit: "",
    context_utilization: null, compactions: 0,
  };
}

/**
 * A revisit's time as people read it, in UTC to the second: `2026-12-08 01:00:00 UTC` (the
 * Python view writes the same text); the text as given when it is not a time.
 */
export function wakeTime(at: string): string {
  const d = new Date(at);
  if (Number.isNaN(d.getTime())) return at;
  return `${d.toISOString().slice(0, 19).replace("T", " ")} UTC`;
}

/** The line of a session.revisit.request: `asked to be woken at … (reason)` (notes §17.5). */
export function revisitText(at: string, reason: string | null | undefined): string {
  return `asked to be woken at ${wakeTime(at)}${reason ? ` (${reason})` : ""}`;
}

/** The line of a session.wake: `woken: reason (asked for …)`. */
export function wakeText(at: string, reason: string | null | undefined): string {
  return reason ? `woken: ${reason} (asked for ${wakeTime(at)})` : `woken: the time asked for came (${wakeTime(at)})`;
}

/** Python's repr() of a str, for the notice texts the Python view writes. */
export function pyRepr(text: string): string {
  const quote = text.includes("'") && !text.includes('"') ? '"' : "'";
  let out = quote;
  for (const ch of text) {
    const c = ch.codePointAt(0)!;
    if (ch === "\\") out += "\\\\";
    else if (ch === quote) out += "\\" + quote;
    else if (ch === "\n") out += "\\n";
    else if (ch === "\r") out += "\\r";
    else if (ch === "\t") out += "\\t";
    else if (c < 0x20 || (c >= 0x7f && c < 0xa0)) out += "\\x" + c.toString(16).padStart(2, "0");
    else out += ch;
  }
  return out + quote;
}

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type P = any;
const nul = <T>(v: T | undefined): T | null => (v === undefined ? null : v);

function stripNulls(value: unknown): PreservedElements | null {
  if (value === null || value === undefined || typeof value !== "object") return null;
  const out: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(value)) if (v !== null && v !== undefined) out[k] = v;
  return out as PreservedElements;
}

/** Builds blocks from accepted frames, in order. Pure bookkeeping, no rules. */
class Renderer {
  blocks: Block[] = [];
  totals: Totals = newTotals();
  private turns = new Map<string, TurnBlock>();
  private text = new Map<string, TextBlock>();
  private thinking = new Map<string, ThinkingBlock>();
  private calls = new Map<string, ToolCallBlock>();
  private interactions = new Map<string, InteractionBlock>();
  private revisits = new Map<string, string>(); // pending revisit_id -> its time, as shown
  private turn: string | null = null;
  private lastTurn: string | null = null;

  apply(frame: Frame, role: SenderRole): void {
    if (!isKnown(frame)) return;
    const base: BlockBase = { message_id: frame.message_id, seq: nul(frame.seq), turn_id: this.turn };
    const synthetic = isSynthetic(frame);
    const p = frame.payload as P;
    switch (frame.type) {
      case "session.turn.start": {
        this.turn = p.turn_id;
        const turn: TurnBlock = {
          kind: "turn", ...base, turn_id: p.turn_id, turn_index: p.turn_index, mode: nul(p.mode),
          ended: false, stop_reason: null, tool_invocation_count: null, synthetic: false,
        };
        this.turns.set(p.turn_id, turn);
        this.blocks.push(turn);
        break;
      }
      case "session.turn.end":
        this.endTurn(p, synthetic);
        break;
      case "agent.text.delta":
        this.streamed("text", p.block_id, base).text += p.delta;
        break;
      case "agent.text.done": {
        const b = this.streamed("text", p.block_id, base);
        if (p.text !== undefined && p.text !== null) b.text = p.text;
        b.done = true;
        b.synthetic = synthetic;
        break;
      }
      case "agent.thinking.delta":
        this.streamed("thinking", p.block_id, base).text += p.delta;
        break;
      case "agent.thinking.done": {
        const b = this.streamed("thinking", p.block_id, base);
        b.done = true;
        b.synthetic = synthetic;
        break;
      }
      case "tool.invoke.request": {
        const call: ToolCallBlock = {
          kind: "tool_call", ...base, call_id: p.call_id, tool_name: p.tool_name, input: p.input,
          status: "pending", output: null, synthetic: false,
        };
        this.calls.set(call.call_id, call);
        this.blocks.push(call);
        this.totals.tool_calls += 1;
        break;
      }
      case "tool.invoke.result": {
        const found = this.calls.get(p.call_id);
        if (found !== undefined) {
          found.status = p.status;
          found.output = p.output === undefined ? null : p.output;
          found.synthetic = synthetic;
        }
        break;
      }
      case "agent.interaction.request": {
        const ask: InteractionBlock = {
          kind: "interaction", ...base, interaction_id: p.interaction_id, interaction_kind: p.kind,
          prompt: p.prompt, options: nul(p.options), status: "pending", response: null, synthetic: false,
          withdraw_reason: null,
        };
        this.interactions.set(ask.interaction_id, ask);
        this.blocks.push(ask);
        break;
      }
      case "control.interaction.response": {
        const answered = this.interactions.get(p.interaction_id);
        if (answered !== undefined) {
          answered.status = "answered";
          answered.response = p.response === undefined ? null : p.response;
        }
        break;
      }
      case "agent.interaction.cancel": {
        const withdrawn = this.interactions.get(p.interaction_id);
        if (withdrawn !== undefined && withdrawn.status === "pending") {
          withdrawn.status = "withdrawn";
          withdrawn.withdraw_reason = nul(p.reason);
        }
        break;
      }
      case "agent.state":
        if (synthetic) {
          for (const ask of this.interactions.values()) {
            if (ask.status === "pending") {
              ask.status = "discarded";
              ask.synthetic = true;
            }
          }
        }
        break;
      case "user.message":
        this.blocks.push({
          kind: "user_message", ...base, text: p.text, participant_id: frame.sender?.participant_id ?? null,
        });
        break;
      case "session.usage":
        this.usage(p, role, base);
        break;
      case "session.compacted":
        this.blocks.push({
          kind: "compaction", ...base, summary: p.summary, previous_token_count: p.previous_token_count,
          current_token_count: p.current_token_count, trigger: p.trigger,
          preserved_elements: stripNulls(p.preserved_elements),
        });
        this.totals.compactions += 1;
        break;
      default:
        this.notice(frame, role, base);
    }
  }

  private streamed(kind: "text", id: string, base: BlockBase): TextBlock;
  private streamed(kind: "thinking", id: string, base: BlockBase): ThinkingBlock;
  private streamed(kind: "text" | "thinking", id: string, base: BlockBase): TextBlock | ThinkingBlock {
    const byId: Map<string, TextBlock | ThinkingBlock> = kind === "text" ? this.text : this.thinking;
    let block = byId.get(id);
    if (block === undefined) {
      block = { kind, ...base, block_id: id, text: "", done: false, synthetic: false } as TextBlock | ThinkingBlock;
      byId.set(id, block);
      this.blocks.push(block);
    }
    return block;
  }

  private endTurn(p: P, synthetic: boolean): void {
    const turn = this.turns.get(p.turn_id);
    if (turn !== undefined) {
      turn.ended = true;
      turn.stop_reason = p.stop_reason;
      turn.tool_invocation_count = nul(p.tool_invocation_count);
      turn.synthetic = synthetic;
    }
    for (const block of [...this.text.values(), ...this.thinking.values()]) {
      if (block.turn_id === p.turn_id && !block.done) {
        block.done = true;
        block.synthetic = synthetic;
      }
    }
    this.turn = null;
    this.lastTurn = p.turn_id;
    this.totals.turns += 1;
  }

  private usage(p: P, role: SenderRole, base: BlockBase): void {
    const tokens = p.token_usage;
    const window = p.context_window;
    const block: UsageBlock = {
      kind: "usage", ...base,
      turn_id: p.turn_id || base.turn_id || this.lastTurn,
      input_tokens: tokens.input_tokens,
      output_tokens: tokens.output_tokens,
      cache_read_tokens: nul(tokens.cache_read_tokens),
      cache_write_tokens: nul(tokens.cache_write_tokens),
      thinking_tokens: nul(tokens.thinking_tokens),
      cost_used: p.cost_usage.used,
      cost_limit: p.cost_usage.limit,
      cost_unit: p.cost_usage.unit,
      messages_used: p.message_usage.used,
      messages_limit: p.message_usage.limit,
      context_utilization: window === undefined || window === null ? null : nul(window.utilization),
      time_to_reset: p.time_to_reset,
      from_master: role === "master",
    };
    this.blocks.push(block);
    if (role !== "client") return;
    const t = this.totals;
    t.input_tokens += tokens.input_tokens;
    t.output_tokens += tokens.output_tokens;
    t.cache_read_tokens += tokens.cache_read_tokens || 0;
    t.cache_write_tokens += tokens.cache_write_tokens || 0;
    t.thinking_tokens += tokens.thinking_tokens || 0;
    t.cost_used = p.cost_usage.used;
    t.cost_limit = p.cost_usage.limit;
    t.cost_unit = p.cost_usage.unit;
    if (block.context_utilization !== null) t.context_utilization = block.context_utilization;
  }

  private notice(frame: KnownFrame, role: SenderRole, base: BlockBase): void {
    const p = frame.payload as P;
    const make = (notice: NoticeBlock["notice"], text: string, extra: Partial<NoticeBlock> = {}): NoticeBlock => ({
      kind: "notice", ...base, notice, text, error_code: null, truncated: false, lost_frame_count: null,
      reported_by: "master", ...extra,
    });
    let block: NoticeBlock | null = null;
    if (frame.type === "session.renamed") {
      block = make("renamed", `renamed to ${pyRepr(p.name)} by ${p.renamed_by}`);
    } else if (frame.type === "session.deleted") {
      const [kind, text] = endingNotice(p.reason, p.deleted_by, nul(p.reattach_window_ms));
      block = make(kind, text);
    } else if (frame.type === "session.error") {
      block = make("error", p.message, {
        error_code: p.error_code, lost_frame_count: nul(p.lost_frame_count), reported_by: role,
      });
    } else if (frame.type === "session.history") {
      const s = p.buffer_status as BufferStatus;
      let text = `the agent reconnected with ${p.frames.length} buffered frame(s)`;
      const lostCount = nul(s.lost_frame_count);
      if (s.truncated) {
        const lost = lostCount === null ? "an unknown number of" : String(lostCount);
        text += `; ${lost} frame(s) were lost (${s.policy_applied} buffer)`;
      }
      block = make("history", text, { truncated: s.truncated, lost_frame_count: lostCount });
    } else if (frame.type === "control.cancel") {
      block = make("cancel", "cancel requested");
    } else if (frame.type === "session.revisit.request") {
      this.revisits.set(p.revisit_id, wakeTime(p.at));
      block = make("revisit", revisitText(p.at, p.reason));
    } else if (frame.type === "session.revisit.cancel") {
      // a cancel of an unknown or already woken revisit changes nothing: no line
      const when = this.revisits.get(p.revisit_id);
      if (when !== undefined) {
        this.revisits.delete(p.revisit_id);
        block = make("revisit_cancelled", `no longer asks to be woken at ${when}`);
      }
    } else if (frame.type === "session.wake") {
      this.revisits.delete(p.revisit_id);
      block = make("wake", wakeText(p.at, p.reason));
    }
    if (block !== null) this.blocks.push(block);
  }
}

/** What SessionView.snapshot() saves: enough to rebuild the view exactly. */
export interface ViewSnapshot {
  session_id: string;
  last_seq: number;
  last_message_id: string | null;
  entries: Array<[SenderRole, Frame]>;
  info: SessionInfo | null;
  skipped: number;
  participants: Record<string, string>;
}

/** The folded session plus its transcript, for a UI. */
export class SessionView {
  readonly sessionId: string;
  state = new SessionState();
  info: SessionInfo | null = null;
  lastSeq = 0;
  lastMessageId: string | null = null;
  skipped = 0;
  skippedReasons: string[] = [];
  notices: Notice[] = [];
  /** participant_id -> attached / detached / expired */
  participants: Record<string, string> = {};
  /** False when this connection declined presence: `participants` then says nothing. */
  presence = true;
  private entriesList: Array<[Frame, SenderRole]> = [];
  private renderer = new Renderer();
  private mark: number | null = null;
  private seen = new Set<string>();

  constructor(sessionId: string) {
    this.sessionId = sessionId;
  }

  get blocks(): readonly Block[] {
    return this.renderer.blocks;
  }
  get totals(): Totals {
    return this.renderer.totals;
  }
  get status(): Status {
    return statusOf(this.state);
  }
  /** Revisits the agent asked for that are neither woken nor withdrawn, by id (notes §17.5). */
  get pendingRevisits(): ReadonlyMap<string, PendingRevisit> {
    return new Map(this.state.pendingRevisits);
  }
  get agentState(): string {
    return this.state.agentState;
  }
  get name(): string {
    if (this.state.name) return this.state.name;
    return this.info !== null ? this.info.name : "";
  }
  get finalizedLocally(): boolean {
    return this.state.finalizedLocally && this.state.finalized;
  }
  get entries(): Array<[Frame, SenderRole]> {
    return [...this.entriesList];
  }
  hasSeen(messageId: string): boolean {
    return this.seen.has(messageId);
  }

  /** Fold a frame the master delivered. Returns true when it changed the view. Never throws on content. */
  receive(frame: Frame): boolean {
    if (isKnown(frame) && frame.type === "connection.welcome") {
      this.info = frame.payload.session;
      this.presence = frame.payload.presence ?? true;
      return false;
    }
    if (frame.seq === undefined || frame.seq === null) {
      if (isKnown(frame) && frame.type === "session.history") {
        this.receiveBacklog(frame);
        return true;
      }
      if (isKnown(frame) && frame.type === "session.error") {
        this.note("error", frame.payload.message, frame.payload.error_code);
      }
      return false;
    }
    const role: SenderRole = frame.sender?.role ?? "master";
    return this.receiveLogged(frame, role);
  }

  private receiveLogged(frame: Frame, role: SenderRole): boolean {
    const seq = frame.seq as number;
    if (seq <= this.lastSeq) return false;
    this.lastSeq = seq;
    this.lastMessageId = frame.message_id;
    if (this.state.finalizedLocally && this.state.finalized) this.makeFinal();
    if (isKnown(frame) && frame.type === "session.presence") {
      // Coalesced presence (docs/protocol.md "Presence"): `changes` lists them all, in order.
      const p = frame.payload;
      for (const c of p.changes ?? [p]) this.participants[c.participant_id] = c.state;
    }
    return this.fold(frame, role);
  }

  /** Fold one frame sent by `role` (own frames, or a log being replayed). */
  fold(frame: Frame, role: SenderRole): boolean {
    if (this.seen.has(frame.message_id)) return false;
    if (isKnown(frame) && frame.type === "session.history") return this.foldHistory(frame, role);
    const hadRecord = this.state.finalized;
    try {
      foldState(this.state, frame, role);
    } catch (e) {
      if (!(e instanceof ProtocolError)) throw e;
      this.skip(frame, e);
      return false;
    }
    this.seen.add(frame.message_id);
    this.append(frame, role, hadRecord);
    return true;
  }

  /** Move the cursor (the master said where this participant's view starts). */
  resetCursor(seq: number, messageId: string | null = null): void {
    this.lastSeq = seq;
    this.lastMessageId = messageId;
  }

  /** §7.8.1: finalize locally; returns the synthetic frames folded (maybe none). */
  connectionLost(): KnownFrame[] {
    if (this.finalizedLocally || this.status === "terminated") return [];
    const frames = finalize(this.state, this.sessionId, LOCAL_SENDER);
    for (const f of frames) this.fold(f, "master");
    if (frames.length > 0) this.note("connection_lost", "connection lost: unfinished items were finalized");
    return frames;
  }

  /** Record a local notice (e.g. this participant's own frames were lost). */
  noteLocal(text: string): void {
    this.note("local", text);
  }

  private receiveBacklog(history: History): void {
    const frames = this.decodeAll(history.payload.frames);
    const s = history.payload.buffer_status;
    if (this.state.finalizedLocally && this.state.finalized) {
      if (unfinalizes(s, frames)) {
        const plan = planHistory(this.state, [], COMPLETE, "master");
        this.state = plan.state;
        this.retract();
      } else {
        this.makeFinal();
      }
    }
    if (s.truncated) {
      const lost = s.lost_frame_count;
      const count = lost === undefined || lost === null ? "an unknown number of" : String(lost);
      this.note(
        "backlog_truncated",
        `${count} frame(s) missed while disconnected were lost (${s.policy_applied} buffer): this view is incomplete`,
      );
    }
    for (const f of frames) this.receive(f);
  }

  private makeFinal(): void {
    this.state = snapshot(this.state);
    this.mark = null;
  }

  private foldHistory(history: History, role: SenderRole): boolean {
    const decoded = this.decodeAll(history.payload.frames);
    const frames = decoded.filter((f) => !this.seen.has(f.message_id));
    let plan;
    try {
      plan = planHistory(this.state, frames, history.payload.buffer_status, role);
    } catch (e) {
      if (!(e instanceof ProtocolError)) throw e;
      this.skip(history, e);
      return false;
    }
    this.seen.add(history.message_id);
    this.state = plan.state;
    if (plan.unfinalized) this.retract();
    this.mark = null;
    this.entriesList.push([history, role]);
    this.renderer.apply(history, role);
    if (unfinalizes(history.payload.buffer_status, frames)) {
      for (const f of plan.accepted) {
        this.seen.add(f.message_id);
        this.entriesList.push([f, role]);
        this.renderer.apply(f, role);
      }
    }
    for (const [refused, e] of plan.refused) this.skip(refused, e);
    return true;
  }

  private append(frame: Frame, role: SenderRole, hadRecord: boolean): void {
    this.entriesList.push([frame, role]);
    const hasRecord = this.state.finalized;
    if (hasRecord && !hadRecord) this.mark = this.entriesList.length - 1;
    else if (hadRecord && !hasRecord) this.mark = null;
    this.renderer.apply(frame, role);
  }

  private retract(): void {
    const mark = this.mark;
    if (mark !== null) {
      this.entriesList = this.entriesList.filter(([f], i) => i < mark || !(isKnown(f) && isSynthetic(f)));
    }
    this.mark = null;
    const renderer = new Renderer();
    for (const [f, role] of this.entriesList) renderer.apply(f, role);
    this.renderer = renderer;
  }

  private decodeAll(raws: readonly unknown[]): Frame[] {
    const frames: Frame[] = [];
    for (const raw of raws) {
      const d = decodeObject(raw);
      if (d.ok) frames.push(d.frame);
      else {
        this.skipped += 1;
        this.reason(`undecodable frame in a history: ${d.error.message}`);
      }
    }
    return frames;
  }

  private skip(frame: Frame, e: ProtocolError): void {
    this.skipped += 1;
    this.reason(`${frame.type} ${frame.message_id}: ${e.code}: ${e.message}`);
  }

  private reason(text: string): void {
    this.skippedReasons.push(text);
    if (this.skippedReasons.length > MAX_REASONS) this.skippedReasons.shift();
  }

  private note(kind: Notice["kind"], text: string, errorCode: string | null = null): void {
    this.notices.push({ kind, text, position: this.blocks.length, error_code: errorCode });
  }

  // --- persistence and replay ------------------------------------------------------------

  /** What to persist; a local finalization is left out (restore redoes it). */
  snapshot(): ViewSnapshot {
    let entries = this.entriesList;
    if (this.finalizedLocally && this.mark !== null) entries = entries.slice(0, this.mark);
    return {
      session_id: this.sessionId,
      last_seq: this.lastSeq,
      last_message_id: this.lastMessageId,
      entries: entries.map(([f, role]) => [role, f]),
      info: this.info,
      skipped: this.skipped,
      participants: { ...this.participants },
    };
  }

  /** Rebuild a view from snapshot(); `finalizeNow` runs §7.8.2 (app restart). */
  static restore(saved: ViewSnapshot, finalizeNow = true): SessionView {
    const view = new SessionView(saved.session_id);
    view.info = saved.info;
    view.participants = { ...saved.participants };
    for (const [role, raw] of saved.entries) {
      const d = decodeObject(raw);
      if (!d.ok) continue;
      view.replayEntry(d.frame, role);
    }
    view.lastSeq = saved.last_seq;
    view.lastMessageId = saved.last_message_id;
    view.skipped = saved.skipped;
    if (finalizeNow) view.connectionLost();
    return view;
  }

  private replayEntry(frame: Frame, role: SenderRole): void {
    if (isKnown(frame) && frame.type === "session.history") {
      this.seen.add(frame.message_id);
      this.makeFinal();
      this.entriesList.push([frame, role]);
      this.renderer.apply(frame, role);
      return;
    }
    this.fold(frame, role);
  }

  /** A fresh view that folded `frames` (a session log) in order. */
  static replay(sessionId: string, frames: Iterable<[Frame, SenderRole]>): SessionView {
    const view = new SessionView(sessionId);
    for (const [frame, role] of frames) {
      if (frame.seq !== undefined && frame.seq !== null) view.receiveLogged(frame, role);
      else view.fold(frame, role);
    }
    return view;
  }
}
