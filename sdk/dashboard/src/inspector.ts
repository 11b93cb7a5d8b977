// The raw events behind the timeline: seq, type, sender, time and the frame's JSON, with a
// filter by type and a link per seq (#/s/<id>/events/<seq>). A window of rows is rendered
// (following the tail unless a seq was asked for); the JSON is built when a row is opened.
import type { Frame } from "@rawp/client";
import { button, el, timeEl } from "./dom.js";
import { jsonView } from "./json.js";

const PAGE = 300;

interface Source {
  readonly id: string;
  readonly frames: Frame[];
  readonly sent: WeakSet<Frame>;
}

export class Inspector {
  private visible = false;
  private target: number | null = null;
  private highlight: number | null = null; // the seq the address names, kept highlighted
  private start: number | null = null; // null: follow the tail
  private shownLength = -1;
  private shownFilter = "";
  private types = new Map<string, number>();
  private counted = 0;
  private optionsFor = -1;

  constructor(
    private readonly box: HTMLElement,
    private readonly select: HTMLSelectElement,
    private readonly count: HTMLElement,
    private readonly c: Source,
    private readonly nav: HTMLElement,
  ) {
    select.replaceChildren(el("option", { value: "" }, "all types"));
    select.value = "";
    select.onchange = () => {
      this.start = null;
      this.target = null;
      this.refresh(true);
    };
  }

  show(seq: number | null): void {
    this.visible = true;
    this.target = seq;
    this.highlight = seq;
    this.start = null;
    if (seq !== null && this.select.value !== "") {
      const f = this.c.frames.find((x) => x.seq === seq);
      if (f && f.type !== this.select.value) this.select.value = "";
    }
    this.refresh(true);
  }

  refresh(force = false): void {
    const frames = this.c.frames;
    for (; this.counted < frames.length; this.counted += 1) {
      const t = frames[this.counted]!.type;
      this.types.set(t, (this.types.get(t) ?? 0) + 1);
    }
    if (this.types.size !== this.optionsFor) this.renderOptions();
    const panelHidden = this.box.closest("[hidden]") !== null;
    if (panelHidden) return;
    const filter = this.select.value;
    if (!force && frames.length === this.shownLength && filter === this.shownFilter) return;
    this.shownLength = frames.length;
    this.shownFilter = filter;
    const list = filter ? frames.filter((f) => f.type === filter) : frames;
    let from: number;
    let targetIndex = -1;
    if (this.target !== null) {
      targetIndex = list.findIndex((f) => f.seq === this.target);
      from = Math.max(0, targetIndex - Math.floor(PAGE / 3));
      if (targetIndex < 0) from = Math.max(0, list.length - PAGE);
      this.start = from;
    } else if (this.start !== null) from = Math.min(this.start, Math.max(0, list.length - 1));
    else from = Math.max(0, list.length - PAGE);
    const to = Math.min(list.length, from + PAGE);
    this.count.textContent = `${list.length} event${list.length === 1 ? "" : "s"}${filter ? ` of type ${filter}` : ""}` + (list.length > PAGE ? ` · showing ${from + 1}–${to}` : "");
    const rows: HTMLElement[] = [];
    for (let i = from; i < to; i += 1) rows.push(this.row(list[i]!, list[i]!.seq === this.highlight && this.highlight !== null));
    this.box.replaceChildren(...rows);
    this.renderNav(from, to, list.length);
    if (targetIndex >= 0 && this.visible) {
      const row = this.box.querySelector(".targeted");
      row?.scrollIntoView({ block: "center" });
      this.target = null; // scrolled once; later frames do not pull the view back
      this.visible = true;
    }
  }

  private renderOptions(): void {
    this.optionsFor = this.types.size;
    const value = this.select.value;
    const names = [...this.types.keys()].sort();
    this.select.replaceChildren(el("option", { value: "" }, "all types"), ...names.map((t) => el("option", { value: t }, t)));
    this.select.value = names.includes(value) ? value : "";
  }

  private renderNav(from: number, to: number, total: number): void {
    const parts: Node[] = [];
    if (from > 0) parts.push(button("Earlier events", () => { this.start = Math.max(0, from - PAGE); this.target = null; this.refresh(true); }, "ghost"));
    if (to < total) parts.push(button("Later events", () => { this.start = to >= total - PAGE ? null : to; this.target = null; this.refresh(true); }, "ghost"));
    this.nav.replaceChildren(...parts);
    this.nav.hidden = parts.length === 0;
  }

  private row(frame: Frame, targeted: boolean): HTMLElement {
    const seq = frame.seq ?? null;
    const refused = frame.type === "session.error" && seq === null;
    const mine = this.c.sent.has(frame);
    const sender = mine
      ? "this page (sent)"
      : frame.sender ? `${frame.sender.role} · ${frame.sender.participant_id}` : seq === null ? "master → this page" : "—";
    const details = el("details", { class: "ev-json" }, el("summary", {}, "JSON"));
    let built = false;
    details.addEventListener("toggle", () => {
      if (!details.open || built) return;
      built = true;
      details.append(jsonView(frame, 2), el("pre", { class: "ev-raw" }, JSON.stringify(frame, null, 2)));
    });
    const row = el(
      "div",
      { class: `event-row${refused ? " refused" : ""}${mine ? " sent" : ""}${targeted ? " targeted" : ""}`, "data-seq": seq ?? "", "data-type": frame.type, id: seq !== null ? `event-${seq}` : null },
      seq !== null
        ? el("a", { class: "seq-link", href: `#/s/${encodeURIComponent(this.c.id)}/events/${seq}`, title: "link to this event" }, `#${seq}`)
        : el("span", { class: "seq-link muted", title: mine ? "sent by this page; the master logs it under its own seq" : "not logged" }, mine ? "↑" : "—"),
      el("code", { class: "ev-type" }, frame.type),
      el("span", { class: "ev-sender" }, sender),
      timeEl(frame.timestamp, "ev-time") ?? el("span", { class: "ev-time" }, ""),
      details,
    );
    if (targeted) details.open = true;
    return row;
  }
}
