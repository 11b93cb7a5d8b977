// A session as the dashboard shows it: the JavaScript mirror of protocol/view.py (blocks) and
// protocol/finalize.py (§7.8 finalize / unfinalize). Frames are plain envelope objects.
//
// The view keeps the frames in effect ("entries") and folds them into a model: the bits of
// the state machine finalization needs (open turn, blocks, calls, pending interactions,
// agent state) plus the transcript blocks. Unfinalizing = dropping the synthetic entries
// after the first one still in effect ("mark") and folding the entries again — the same
// result as protocol/finalize.py's "restore the state from before the first synthetic frame
// and replay the real frames folded since".

export const SYNTHETIC = { synthetic: true };
let tick = 0; // global version counter: a block's `v` changes whenever it does (DOM reuse)

// A UUID v4 (crypto.randomUUID exists only in secure contexts: not on plain http://LAN-IP).
export function uuid4() {
  if (crypto.randomUUID) return crypto.randomUUID();
  const b = crypto.getRandomValues(new Uint8Array(16));
  b[6] = (b[6] & 0x0f) | 0x40;
  b[8] = (b[8] & 0x3f) | 0x80;
  const h = [...b].map((x) => x.toString(16).padStart(2, "0")).join("");
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20)}`;
}

const isSynthetic = (f) => Boolean(f.metadata && f.metadata.synthetic);
const touch = (block) => { block.v = ++tick; return block; };

function emptyModel() {
  return {
    turnId: null,
    openText: new Set(), openThinking: new Set(), closedBlocks: new Set(),
    openCalls: new Map(), callIds: new Set(),
    pending: new Map(), interactionIds: new Set(),
    agentState: "idle", name: null, terminated: false, deleted: null,
    blocks: [], byKey: new Map(),
    totals: { turns: 0, toolCalls: 0, input: 0, output: 0, cost: 0, limit: -1, unit: "",
              utilization: null, compactions: 0 },
  };
}

function add(m, key, block) {
  block.key = key;
  m.byKey.set(key, block);
  m.blocks.push(touch(block));
  return block;
}

function closeBlocks(m, synthetic) {
  for (const [kind, open] of [["text", m.openText], ["thinking", m.openThinking]]) {
    for (const id of open) {
      const b = m.byKey.get(`${kind}:${id}`);
      if (b) { b.done = true; b.synthetic = synthetic; touch(b); }
      m.closedBlocks.add(id);
    }
    open.clear();
  }
}

// Fold one frame into the model; false when the state machine would refuse it (skipped).
function apply(m, f, role) {
  const p = f.payload || {};
  const syn = isSynthetic(f);
  if (m.terminated && !(role === "master" && ["session.presence", "session.error"].includes(f.type))) {
    return false;
  }
  if (syn && role !== "master") return false; // synthetic frames are the master's only (§7.8.1)
  switch (f.type) {
    case "session.turn.start":
      if (m.turnId !== null) return false;
      m.turnId = p.turn_id;
      add(m, `turn:${p.turn_id}`, { kind: "turn", index: p.turn_index, mode: p.mode, ended: false });
      return true;
    case "session.turn.end": {
      if (p.turn_id !== m.turnId || m.openCalls.size > 0) return false;
      closeBlocks(m, syn); // open text and thinking end with the turn (notes §15.8)
      const turn = m.byKey.get(`turn:${p.turn_id}`);
      if (turn) Object.assign(touch(turn), { ended: true, stopReason: p.stop_reason, synthetic: syn });
      m.turnId = null;
      m.totals.turns += 1;
      return true;
    }
    case "agent.text.delta":
    case "agent.thinking.delta": {
      const kind = f.type === "agent.text.delta" ? "text" : "thinking";
      if (m.closedBlocks.has(p.block_id)) return false;
      const open = kind === "text" ? m.openText : m.openThinking;
      const other = kind === "text" ? m.openThinking : m.openText;
      if (other.has(p.block_id)) return false;
      let b = m.byKey.get(`${kind}:${p.block_id}`);
      if (!b) b = add(m, `${kind}:${p.block_id}`, { kind, text: "", done: false });
      open.add(p.block_id);
      b.text += p.delta;
      touch(b);
      return true;
    }
    case "agent.text.done":
    case "agent.thinking.done": {
      const kind = f.type === "agent.text.done" ? "text" : "thinking";
      if (m.closedBlocks.has(p.block_id)) return false;
      let b = m.byKey.get(`${kind}:${p.block_id}`);
      if (!b) b = add(m, `${kind}:${p.block_id}`, { kind, text: "", done: false });
      if (typeof p.text === "string") b.text = p.text;
      Object.assign(touch(b), { done: true, synthetic: syn });
      (kind === "text" ? m.openText : m.openThinking).delete(p.block_id);
      m.closedBlocks.add(p.block_id);
      return true;
    }
    case "tool.invoke.request":
      if (m.callIds.has(p.call_id)) return false;
      m.callIds.add(p.call_id);
      m.openCalls.set(p.call_id, p.tool_name);
      m.totals.toolCalls += 1;
      add(m, `tool:${p.call_id}`, { kind: "tool", name: p.tool_name, input: p.input, status: "pending" });
      return true;
    case "tool.invoke.result": {
      if (!m.openCalls.has(p.call_id)) return false;
      m.openCalls.delete(p.call_id);
      const b = m.byKey.get(`tool:${p.call_id}`);
      if (b) Object.assign(touch(b), { status: p.status, output: p.output, synthetic: syn });
      return true;
    }
    case "agent.interaction.request":
      if (m.interactionIds.has(p.interaction_id)) return false;
      m.interactionIds.add(p.interaction_id);
      m.pending.set(p.interaction_id, p.kind);
      add(m, `ask:${p.interaction_id}`, {
        kind: "ask", id: p.interaction_id, askKind: p.kind, prompt: p.prompt,
        options: p.options || null, status: "pending",
      });
      return true;
    case "control.interaction.response": {
      if (!m.pending.has(p.interaction_id)) return false;
      m.pending.delete(p.interaction_id);
      const b = m.byKey.get(`ask:${p.interaction_id}`);
      if (b) Object.assign(touch(b), { status: "answered", response: p.response });
      return true;
    }
    case "agent.interaction.cancel": { // notes §16.4: the agent withdrew its question
      if (!m.pending.has(p.interaction_id)) return false;
      m.pending.delete(p.interaction_id);
      const b = m.byKey.get(`ask:${p.interaction_id}`);
      if (b) Object.assign(touch(b), { status: "withdrawn", reason: p.reason || null });
      return true;
    }
    case "agent.state":
      m.agentState = p.state;
      if (syn) { // §7.8.1: finalization discards pending interactions to unblock the UI
        for (const id of m.pending.keys()) {
          const b = m.byKey.get(`ask:${id}`);
          if (b) Object.assign(touch(b), { status: "discarded", synthetic: true });
        }
        m.pending.clear();
      }
      return true;
    case "user.message":
      add(m, `m:${f.message_id}`, { kind: "user", text: p.text, from: f.sender && f.sender.participant_id });
      return true;
    case "session.usage": {
      const t = p.token_usage || {}, c = p.cost_usage || {};
      add(m, `m:${f.message_id}`, {
        kind: "usage", input: t.input_tokens, output: t.output_tokens, cost: c.used,
        unit: c.unit, fromMaster: role === "master",
      });
      if (role === "client") { // the master's totals restate the client's reports
        const tot = m.totals;
        tot.input += t.input_tokens || 0;
        tot.output += t.output_tokens || 0;
        tot.cost = c.used; tot.limit = c.limit; tot.unit = c.unit;
        if (p.context_window && p.context_window.utilization != null) {
          tot.utilization = p.context_window.utilization;
        }
      }
      return true;
    }
    case "session.compacted":
      m.totals.compactions += 1;
      add(m, `m:${f.message_id}`, {
        kind: "compaction", summary: p.summary, previous: p.previous_token_count,
        current: p.current_token_count, trigger: p.trigger, preserved: p.preserved_elements || null,
      });
      return true;
    case "session.renamed":
      m.name = p.name;
      add(m, `m:${f.message_id}`, { kind: "notice", notice: "renamed", text: `renamed to “${p.name}” by ${p.renamed_by}` });
      return true;
    case "session.error":
      // reportedBy: only the master's notices are the session's facts (notes §16.8).
      add(m, `m:${f.message_id}`, {
        kind: "notice", notice: "error", code: p.error_code, text: p.message,
        lost: p.lost_frame_count ?? null, reportedBy: role,
      });
      return true;
    case "control.cancel":
      add(m, `m:${f.message_id}`, { kind: "notice", notice: "cancel", text: "cancel requested" });
      return true;
    case "session.deleted":
      closeBlocks(m, false);
      m.turnId = null; m.openCalls.clear(); m.pending.clear(); m.agentState = "idle";
      m.terminated = true;
      m.deleted = { reason: p.reason, by: p.deleted_by };
      add(m, `m:${f.message_id}`, { kind: "notice", notice: "deleted", text: `session deleted (${p.reason}, by ${p.deleted_by})` });
      return true;
    default: // session.presence, unknown ignorable types: accepted, no block
      return true;
  }
}

function historyNotice(m, h) {
  const s = h.payload.buffer_status;
  let text = `the agent reconnected with ${h.payload.frames.length} buffered frame(s)`;
  if (s.truncated) {
    const lost = s.lost_frame_count == null ? "an unknown number of" : s.lost_frame_count;
    text += `; ${lost} frame(s) were lost (${s.policy_applied} buffer)`;
  }
  add(m, `m:${h.message_id}`, { kind: "notice", notice: "history", text, truncated: Boolean(s.truncated) });
}

// §7.8.3: a history undoes finalization unless truncated or it holds a session.deleted.
export function unfinalizes(bufferStatus, frames) {
  return !bufferStatus.truncated && !frames.some((f) => f.type === "session.deleted");
}

// §7.8.1 (protocol/finalize.py finalize): the synthetic frames that close unfinished state.
export function finalize(m, sessionId) {
  const frames = [];
  const envelope = (type, payload) => frames.push({
    type, payload, message_id: uuid4(), session_id: sessionId,
    timestamp: new Date().toISOString(), metadata: { ...SYNTHETIC },
    sender: { role: "master", participant_id: "local" },
  });
  for (const id of [...m.openText].sort()) envelope("agent.text.done", { block_id: id });
  for (const id of [...m.openThinking].sort()) envelope("agent.thinking.done", { block_id: id });
  for (const call of m.openCalls.keys()) {
    envelope("tool.invoke.result", { call_id: call, status: "cancelled", output: "Connection lost" });
  }
  if (m.turnId !== null) envelope("session.turn.end", { turn_id: m.turnId, stop_reason: "disconnected" });
  if (m.agentState !== "idle" || m.pending.size > 0) envelope("agent.state", { state: "idle" });
  return frames;
}

export class SessionView {
  constructor(sessionId) {
    this.sessionId = sessionId;
    this.info = null;           // the welcome's session object
    this.lastSeq = 0;           // cursor: every seq up to this one was received
    this.entries = [];          // [frame, role] in effect, in order
    this.mark = null;           // index of the first synthetic entry still retractable
    this.local = false;         // that finalization was this view's own (no seq)
    this.seen = new Set();      // message ids folded
    this.notices = [];          // things only this view was told or noticed
    this.participants = new Map();
    this.skipped = 0;
    this.m = emptyModel();
  }

  get blocks() { return this.m.blocks; }
  get totals() { return this.m.totals; }
  get agentState() { return this.m.agentState; }
  get name() { return this.m.name ?? (this.info ? this.info.name : ""); }
  get terminated() { return this.m.terminated; }
  get deleted() { return this.m.deleted; }
  get status() {
    if (this.m.terminated) return "terminated";
    if (this.m.pending.size > 0) return "requires_action";
    return this.m.turnId !== null ? "running" : "idle";
  }
  get finalizedLocally() { return this.mark !== null && this.local; }

  // Why the data is incomplete (§7.1.1 MUST): truncated histories, lost backlog frames.
  // The master follows every truncated client history with a history_truncated error (notes
  // §15.10); that error says it best, the history's own line is the fallback. A
  // history_truncated that a participant sent itself is its report, never a notice (§16.8).
  get incomplete() {
    const reasons = this.notices.filter((n) => n.kind === "backlog_truncated").map((n) => n.text);
    const errors = this.m.blocks.filter(
      (b) => b.kind === "notice" && b.code === "history_truncated" && b.reportedBy === "master");
    const histories = this.m.blocks.filter((b) => b.kind === "notice" && b.notice === "history" && b.truncated);
    reasons.push(...(errors.length ? errors : histories).map((b) => b.text));
    return reasons;
  }

  // A frame the master delivered (protocol/view.py SessionView.receive).
  receive(f) {
    if (f.type === "connection.welcome") { this.info = f.payload.session; return false; }
    if (f.seq == null) {
      if (f.type === "session.history") { this.receiveBacklog(f); return true; }
      if (f.type === "session.error") this.note("error", f.payload.message, f.payload.error_code);
      return false;
    }
    if (f.seq <= this.lastSeq) return false; // already folded: never twice
    this.lastSeq = f.seq;
    if (this.finalizedLocally) this.makeFinal(); // live frames without a backlog first
    if (f.type === "session.presence") {
      // coalesced presence: `changes` lists every change of the frame, in order
      for (const p of f.payload.changes || [f.payload]) {
        this.participants.set(p.participant_id, { role: p.role, state: p.state });
      }
    }
    return this.fold(f, f.sender ? f.sender.role : "master");
  }

  // Fold a frame sent by `role`: own frames, or a log being replayed.
  fold(f, role) {
    if (this.seen.has(f.message_id)) return false;
    if (f.type === "session.history") return this.foldHistory(f, role);
    if (!apply(this.m, f, role)) { this.skipped += 1; return false; }
    this.seen.add(f.message_id);
    // protocol/state.py _record_for_unfinalization
    if (isSynthetic(f)) {
      if (this.mark === null) { this.mark = this.entries.length; this.local = f.seq == null; }
    } else if (this.mark !== null && role === "client") {
      this.makeFinal(); // the client came back without a history: finalization stands
    }
    this.entries.push([f, role]);
    return true;
  }

  // §7.8.1: this view's socket dropped; finalize locally (frames without seq).
  connectionLost() {
    if (this.finalizedLocally || this.terminated) return [];
    const frames = finalize(this.m, this.sessionId);
    for (const f of frames) this.fold(f, "master");
    if (frames.length) this.note("connection_lost", "connection lost: unfinished items were finalized");
    return frames;
  }

  // The master's backlog after a (re)attach (§7.1.1 M→edge, §7.8.3).
  receiveBacklog(h) {
    const frames = h.payload.frames;
    const s = h.payload.buffer_status;
    if (this.finalizedLocally) {
      if (unfinalizes(s, frames)) this.retract(); else this.makeFinal();
    }
    if (s.truncated) {
      const lost = s.lost_frame_count == null ? "an unknown number of" : String(s.lost_frame_count);
      this.note("backlog_truncated",
        `${lost} frame(s) missed while disconnected were lost (${s.policy_applied} buffer): this view is incomplete`);
    }
    for (const f of frames) this.receive(f);
  }

  // A logged session.history (the client's, §7.1.1 C→M): protocol/finalize.py plan_history.
  foldHistory(h, role) {
    if (this.m.terminated) { this.skipped += 1; return false; }
    const frames = h.payload.frames.filter((f) => !this.seen.has(f.message_id));
    const undo = unfinalizes(h.payload.buffer_status, frames);
    const ours = this.mark !== null && (role !== "master" || this.local);
    if (ours) { if (undo) this.retract(); else this.makeFinal(); }
    this.mark = null;
    this.seen.add(h.message_id);
    this.entries.push([h, role]);
    historyNotice(this.m, h);
    if (undo) {
      for (const f of frames) {
        this.fold(f, role === "master" && f.sender ? f.sender.role : role);
      }
    }
    return true;
  }

  makeFinal() { this.mark = null; this.local = false; }

  // Take the synthetic entries in effect back out, then fold everything again.
  retract() {
    const mark = this.mark;
    if (mark !== null) this.entries = this.entries.filter(([f], i) => i < mark || !isSynthetic(f));
    this.makeFinal();
    const m = emptyModel();
    for (const [f, role] of this.entries) {
      if (f.type === "session.history") historyNotice(m, f); else apply(m, f, role);
    }
    this.m = m;
  }

  note(kind, text, code = null) {
    this.notices.push({ kind, text, code, position: this.m.blocks.length });
  }
}
