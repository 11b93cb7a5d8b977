// The session as a timeline: the SessionView's blocks (turns with start time, duration and
// stop reason; Markdown text; folded thinking; tool calls with labelled input and output;
// interactions; usage; compactions; notices) and the view's own notices (refused frames,
// connection lost) where they happened. Nodes are cached per block and re-rendered only when
// the block changed, so a streamed delta touches one node.
import type { Block, Frame, Notice, SessionView, UsageBlock } from "@rawp/client";
import { button, display, duration, el, formatNumber, timeEl } from "./dom.js";
import { jsonView } from "./json.js";
import { renderMarkdown } from "./markdown.js";

export interface FrameIndex {
  readonly id: string;
  readonly view: SessionView;
  readonly readOnly: boolean;
  readonly turnEnds: Map<string, Frame>;
  readonly toolResults: Map<string, Frame>;
  readonly closers: Map<string, Frame>;
  frame(seq: number | null): Frame | undefined;
}

type Answer = (interactionId: string, value: unknown) => void;

const WINDOW = 300; // blocks rendered at first (the latest); more on request

export class Timeline {
  private cache = new WeakMap<object, { sig: string; node: HTMLElement | null }>();
  private open = new Set<string>();
  private limit = WINDOW;
  /** The agent's usage report of each turn (shown in the turn's header). */
  private usage = new Map<string, UsageBlock>();

  constructor(
    private readonly box: HTMLElement,
    private readonly c: FrameIndex,
    /** null: the credential may not answer (no write scope); questions are shown, not offered. */
    private readonly answer: Answer | null,
    private readonly more: HTMLElement,
  ) {
    more.replaceChildren();
    more.hidden = true;
  }

  render(): void {
    const blocks = this.c.view.blocks;
    const notices = this.c.view.notices;
    const start = Math.max(0, blocks.length - this.limit);
    this.renderMore(start);
    this.usage.clear();
    for (const b of blocks) if (b.kind === "usage" && !b.from_master && b.turn_id !== null) this.usage.set(b.turn_id, b);
    const nodes: HTMLElement[] = [];
    let ni = 0;
    while (ni < notices.length && notices[ni]!.position < start) ni += 1;
    for (let i = start; i < blocks.length; i += 1) {
      while (ni < notices.length && notices[ni]!.position <= i) nodes.push(this.noticeNode(notices[ni++]!));
      const node = this.blockNode(blocks[i]!);
      if (node !== null) nodes.push(node);
    }
    while (ni < notices.length) nodes.push(this.noticeNode(notices[ni++]!));
    const box = this.box;
    const nearBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
    nodes.forEach((node, i) => {
      if (box.children[i] !== node) box.insertBefore(node, box.children[i] ?? null);
    });
    while (box.children.length > nodes.length) box.lastChild!.remove();
    if (nearBottom) box.scrollTop = box.scrollHeight;
  }

  private renderMore(start: number): void {
    this.more.hidden = start === 0;
    if (start === 0) return;
    this.more.replaceChildren(
      button(`Show earlier blocks (${start} not shown)`, () => {
        this.limit += WINDOW;
        this.render();
      }, "ghost"),
    );
  }

  private noticeNode(n: Notice): HTMLElement {
    const hit = this.cache.get(n);
    if (hit?.node) return hit.node;
    let node: HTMLElement;
    if (n.kind === "error") {
      node = el(
        "div",
        { class: "block refused", role: "alert" },
        el("span", { class: "label" }, "Refused"),
        n.error_code ? el("code", { class: "error-code" }, n.error_code) : null,
        el("span", { class: "notice-text" }, n.text),
        el("span", { class: "muted" }, " (a frame of this page, refused by the master)"),
      );
    } else {
      node = el(
        "div",
        { class: `block local-notice notice-${n.kind}` },
        el("span", { class: "label" }, n.kind === "connection_lost" ? "Connection lost" : n.kind === "backlog_truncated" ? "Incomplete" : "Note"),
        el("span", { class: "notice-text" }, n.text),
      );
    }
    this.cache.set(n, { sig: "", node });
    return node;
  }

  private blockNode(b: Block): HTMLElement | null {
    const sig = this.signature(b);
    const hit = this.cache.get(b);
    if (hit && hit.sig === sig) return hit.node;
    const node = this.build(b);
    if (hit?.node && node && hit.node.isConnected) hit.node.replaceWith(node);
    this.cache.set(b, { sig, node });
    return node;
  }

  private signature(b: Block): string {
    switch (b.kind) {
      case "turn":
        return `${b.ended}|${b.stop_reason}|${b.synthetic}|${this.c.turnEnds.get(b.turn_id ?? "")?.message_id}|${this.usage.get(b.turn_id ?? "")?.message_id}`;
      case "text":
      case "thinking":
        return `${b.text.length}|${b.done}|${b.synthetic}`;
      case "tool_call":
        return `${b.status}|${b.synthetic}|${this.c.toolResults.get(b.call_id)?.message_id}`;
      case "interaction":
        return `${b.status}|${this.c.readOnly}`;
      default:
        return "";
    }
  }

  private build(b: Block): HTMLElement | null {
    let node: HTMLElement | null;
    switch (b.kind) {
      case "turn":
        node = this.turn(b);
        break;
      case "text":
        node = el("div", {}, this.meta(b, "Assistant"), this.markdown(b.text));
        if (!b.done) node.classList.add("streaming");
        break;
      case "thinking":
        node = this.thinking(b);
        break;
      case "tool_call":
        node = this.tool(b);
        break;
      case "interaction":
        node = this.interaction(b);
        break;
      case "user_message":
        node = el("div", {}, this.meta(b, "User"), this.markdown(b.text));
        break;
      case "usage":
        node = el(
          "div",
          {},
          this.meta(b, "Usage"),
          el(
            "span",
            { class: "usage-line" },
            `${formatNumber(b.input_tokens)} in / ${formatNumber(b.output_tokens)} out tokens` +
              (b.cost_unit ? ` · ${formatNumber(b.cost_used)} ${b.cost_unit} used` : "") +
              (b.from_master ? " (master totals)" : ""),
          ),
        );
        break;
      case "compaction":
        node = this.compaction(b);
        break;
      case "notice":
        node = this.notice(b);
        break;
    }
    if (node === null) return null;
    node.classList.add("block", b.kind);
    node.dataset.key = b.message_id;
    if (b.seq !== null) node.dataset.seq = String(b.seq);
    this.markSynthetic(b, node);
    return node;
  }

  /** Synthetic blocks are marked when the frame that made them came from the master (or this page). */
  private markSynthetic(b: Block, node: HTMLElement): void {
    if (!("synthetic" in b) || !b.synthetic) return;
    const key = b.kind === "turn" ? `turn:${b.turn_id}` : b.kind === "tool_call" ? `call:${b.call_id}` : "block_id" in b ? `block:${b.block_id}` : "";
    const closer = this.c.closers.get(key);
    const role = closer?.sender?.role ?? "master";
    if (role !== "master") {
      node.append(el("span", { class: "badge claimed", title: `marked synthetic by a ${role}, not the master` }, `marked by ${role}`));
      return;
    }
    node.classList.add("synthetic");
    const local = closer === undefined || closer.metadata?.synthetic !== true;
    node.append(
      el(
        "span",
        { class: "badge synthetic-badge", title: local ? "finalized by this page when the connection was lost (§7.8.1)" : "made by the master's finalization (§7.8.1)" },
        "synthetic",
      ),
    );
  }

  private meta(b: Block, label: string, extra: Node | null = null): HTMLElement {
    const frame = this.c.frame(b.seq);
    return el(
      "div",
      { class: "meta" },
      el("span", { class: "label" }, label),
      extra,
      el("span", { class: "spacer" }),
      timeEl(frame?.timestamp, "block-time"),
      b.seq !== null ? el("a", { class: "seq-link", href: `#/s/${encodeURIComponent(this.c.id)}/events/${b.seq}`, title: "this frame in the event inspector" }, `#${b.seq}`) : null,
    );
  }

  private markdown(text: string): HTMLElement {
    const body = el("div", { class: "md" });
    renderMarkdown(body, text);
    return body;
  }

  private turn(b: Extract<Block, { kind: "turn" }>): HTMLElement {
    const start = this.c.frame(b.seq)?.timestamp;
    const end = this.c.turnEnds.get(b.turn_id ?? "");
    const took = b.ended ? duration(start, end?.timestamp) : null;
    return el(
      "div",
      { class: b.ended ? "" : "running" },
      el(
        "div",
        { class: "turn-head" },
        el("span", { class: "turn-title" }, `Turn ${b.turn_index + 1}`),
        b.mode ? el("span", { class: "badge subtle" }, b.mode) : null,
        el("span", { class: "turn-label" }, "started"),
        timeEl(start, "turn-start"),
        took !== null ? el("span", { class: "turn-duration", title: "from turn start to turn end" }, took) : null,
        el("span", { class: `turn-state stop-${b.stop_reason ?? "open"}` }, b.ended ? (b.stop_reason ?? "ended").replace(/_/g, " ") : "in progress…"),
        b.tool_invocation_count !== null ? el("span", { class: "muted" }, `${b.tool_invocation_count} tool call${b.tool_invocation_count === 1 ? "" : "s"}`) : null,
        this.turnUsage(b.turn_id),
        el("span", { class: "spacer" }),
        b.seq !== null ? el("a", { class: "seq-link", href: `#/s/${encodeURIComponent(this.c.id)}/events/${b.seq}` }, `#${b.seq}`) : null,
      ),
    );
  }

  private turnUsage(turnId: string | null): HTMLElement | null {
    const u = turnId === null ? undefined : this.usage.get(turnId);
    if (u === undefined) return null;
    const cost = u.cost_unit ? ` · ${formatNumber(u.cost_used)} ${u.cost_unit}` : "";
    return el("span", { class: "turn-usage", title: "this turn's usage report" }, `${formatNumber(u.input_tokens)} in / ${formatNumber(u.output_tokens)} out${cost}`);
  }

  private thinking(b: Extract<Block, { kind: "thinking" }>): HTMLElement {
    const summary = el("summary", {}, b.done ? "Thinking" : "Thinking…", el("span", { class: "muted" }, ` · ${b.text.length} chars`));
    const body = el("div", { class: "thinking-body" }, b.text);
    const node = el("details", {}, summary, body);
    node.open = this.open.has(b.message_id);
    node.addEventListener("toggle", () => {
      if (node.open) this.open.add(b.message_id);
      else this.open.delete(b.message_id);
    });
    return node;
  }

  private tool(b: Extract<Block, { kind: "tool_call" }>): HTMLElement {
    const start = this.c.frame(b.seq)?.timestamp;
    const result = this.c.toolResults.get(b.call_id);
    const took = b.status !== "pending" ? duration(start, result?.timestamp) : null;
    const head = el(
      "div",
      { class: "tool-head" },
      el("span", { class: "label" }, "Tool"),
      el("code", { class: "tool-name" }, b.tool_name),
      el("span", { class: `tool-status status-${b.status}` }, b.status),
      took !== null ? el("span", { class: "tool-duration", title: "from request to result" }, took) : null,
      el("span", { class: "spacer" }),
      timeEl(start, "block-time"),
      b.seq !== null ? el("a", { class: "seq-link", href: `#/s/${encodeURIComponent(this.c.id)}/events/${b.seq}` }, `#${b.seq}`) : null,
    );
    const input = el("section", { class: "tool-io tool-input" }, el("h4", {}, "Input"), jsonView(b.input, 2));
    const node = el("div", {}, head, input);
    if (b.status !== "pending") {
      const out = b.output;
      const shown = typeof out === "string" ? el("pre", { class: "tool-text" }, out) : jsonView(out, 2);
      node.append(el("section", { class: "tool-io tool-output" }, el("h4", {}, "Output"), shown));
    }
    return node;
  }

  private interaction(b: Extract<Block, { kind: "interaction" }>): HTMLElement | null {
    if (b.status === "withdrawn") return null; // the agent withdrew the question (notes §16.4)
    const node = el("div", {}, this.meta(b, b.interaction_kind === "confirmation" ? "Question" : "Input needed"), el("div", { class: "ask-prompt" }, b.prompt));
    node.dataset.interaction = b.interaction_id;
    if (b.status === "answered") {
      const shown = b.interaction_kind === "confirmation" && typeof b.response === "boolean" ? (b.response ? "yes" : "no") : display(b.response);
      node.append(el("div", { class: "ask-answer" }, `answered: ${shown}`));
      return node;
    }
    if (b.status === "discarded") {
      node.append(el("div", { class: "ask-answer" }, "discarded: the connection was lost"));
      return node;
    }
    if (this.c.readOnly) {
      node.append(el("div", { class: "ask-answer" }, "never answered (archived)"));
      return node;
    }
    const answerWith = this.answer;
    if (answerWith === null) {
      node.append(el("div", { class: "ask-answer" }, "waiting for an answer (this credential may only read)"));
      return node;
    }
    const row = el("div", { class: "ask-actions" });
    const answer = (value: unknown) => answerWith(b.interaction_id, value);
    if (b.interaction_kind === "confirmation") {
      row.append(button("Yes", () => answer(true), "answer"), button("No", () => answer(false), "answer ghost"));
    } else if (b.interaction_kind === "choice") {
      for (const option of b.options ?? []) {
        const o = option as Record<string, unknown> | null;
        const value = o && typeof o === "object" && "value" in o ? o.value : option;
        const label = o && typeof o === "object" && "label" in o ? display(o.label) : display(option);
        row.append(button(label, () => answer(value), "answer"));
      }
    } else {
      const input = el("input", { class: "ask-input", placeholder: "Your answer", "aria-label": "Your answer" });
      const send = () => answer(input.value);
      input.addEventListener("keydown", (e) => {
        if (e.key === "Enter") send();
      });
      row.append(input, button("Send", send, "answer"));
    }
    node.append(row);
    return node;
  }

  private compaction(b: Extract<Block, { kind: "compaction" }>): HTMLElement {
    const node = el(
      "div",
      {},
      this.meta(b, "Context compacted"),
      el("div", { class: "compaction-head" }, `${b.trigger}: ${formatNumber(b.previous_token_count)} → ${formatNumber(b.current_token_count)} tokens`),
      el("div", { class: "compaction-summary" }, this.markdown(b.summary)),
    );
    for (const [label, items] of Object.entries(b.preserved_elements ?? {})) {
      if (Array.isArray(items) && items.length) {
        node.append(el("div", { class: "preserved" }, `${label.replaceAll("_", " ")}: ` + items.map((x) => display(x)).join(", ")));
      }
    }
    return node;
  }

  private notice(b: Extract<Block, { kind: "notice" }>): HTMLElement {
    // An error is whoever sent it (the view records it: notes §16.8); other notices by their frame.
    const role = b.notice === "error" ? b.reported_by : (this.c.frame(b.seq)?.sender?.role ?? "master");
    const fromMaster = role === "master";
    let label: string = {
      renamed: "Renamed", deleted: "Deleted", ended: "Ended", error: "Error", history: "Agent history", cancel: "Cancel",
      revisit: "Revisit", revisit_cancelled: "Revisit withdrawn", wake: "Woken",
    }[b.notice];
    if (b.notice === "error") label = fromMaster ? "Master notice" : `${role === "client" ? "Agent" : "Viewer"} reported`;
    const node = el(
      "div",
      {},
      this.meta(b, label, b.error_code ? el("code", { class: "error-code" }, b.error_code) : null),
      el("div", { class: "notice-text" }, b.text),
    );
    node.classList.add(`notice-${b.notice}`, fromMaster ? "from-master" : "from-participant");
    if (b.notice === "history" && b.truncated) node.classList.add("truncated");
    return node;
  }
}
