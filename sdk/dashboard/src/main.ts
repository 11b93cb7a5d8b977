// The dashboard: sign-in, the session list (HTTP, polled; search, filters, sort, counts), one
// session as a timeline (a @rawp/client edge: its SessionView holds every protocol rule) and
// the raw events behind it. Archived sessions open read-only from their HTTP log.
import {
  FrameRefused,
  HandshakeRefused,
  RawpClient,
  SessionView,
  dataIncomplete,
  revisitText,
  type Block,
  type ConnectionStatus,
  type Frame,
  type Notice,
  type SendReceipt,
  type UsageBlock,
} from "@rawp/client";
import { Api, ApiError, type SessionInfo, type WhoAmI } from "./api.js";
import { UsageChart } from "./chart.js";
import { $, el } from "./dom.js";
import { Inspector } from "./inspector.js";
import { Timeline, type FrameIndex } from "./timeline.js";

const TOKEN_KEY = "rawp.token";
const THEME_KEY = "rawp.theme";
const LIST_POLL_MS = 2000;

interface Config {
  ws_url: string | null;
}

/** One open session. */
class Current implements FrameIndex {
  readonly id: string;
  header: SessionInfo | null = null;
  client: RawpClient | null = null;
  view: SessionView;
  readOnly = false;
  ended: string | null = null;
  attaches = 0;
  /** Every frame received, in order: the HTTP log, then the WebSocket (logged and not). */
  readonly frames: Frame[] = [];
  readonly bySeq = new Map<number, Frame>();
  readonly turnEnds = new Map<string, Frame>();
  readonly toolResults = new Map<string, Frame>();
  readonly closers = new Map<string, Frame>();
  /** participant_id -> role, from the presence frames. */
  readonly roles = new Map<string, string>();
  lastSeq = 0;
  clientErrors: string[] = [];
  closed = false;
  /** Why the last run failed (its session.turn.end error, notes §17.4); null once one ends well. */
  lastError: { code: string; message: string } | null = null;
  /** Frames this page sent (shown in the inspector, marked). */
  readonly sent = new WeakSet<Frame>();

  constructor(id: string) {
    this.id = id;
    this.view = new SessionView(id);
  }

  record(frame: Frame): void {
    const seq = frame.seq;
    if (seq !== undefined && seq !== null) {
      if (seq <= this.lastSeq) return;
      this.lastSeq = seq;
      this.bySeq.set(seq, frame);
    }
    this.frames.push(frame);
    const p = frame.payload as Record<string, unknown> | undefined;
    if (!p) return;
    if (frame.type === "session.presence" && typeof p.participant_id === "string") {
      this.roles.set(p.participant_id, String(p.role));
    } else if (frame.type === "session.turn.end" && typeof p.turn_id === "string") {
      this.turnEnds.set(p.turn_id, frame);
      this.closers.set(`turn:${p.turn_id}`, frame);
      const error = p.error as { code?: unknown; message?: unknown } | undefined;
      this.lastError =
        p.stop_reason === "error"
          ? { code: String(error?.code ?? "error"), message: String(error?.message ?? "the run failed") }
          : null;
    } else if (frame.type === "tool.invoke.result" && typeof p.call_id === "string") {
      this.toolResults.set(p.call_id, frame);
      this.closers.set(`call:${p.call_id}`, frame);
    } else if ((frame.type === "agent.text.done" || frame.type === "agent.thinking.done") && typeof p.block_id === "string") {
      this.closers.set(`block:${p.block_id}`, frame);
    }
  }
  frame(seq: number | null): Frame | undefined {
    return seq === null ? undefined : this.bySeq.get(seq);
  }
}

const app = {
  api: null as Api | null,
  config: null as Config | null,
  me: null as WhoAmI | null,
  sessions: [] as SessionInfo[],
  activity: new Map<string, { head: number; at: number }>(),
  listOk: true,
  current: null as Current | null,
  timeline: null as Timeline | null,
  inspector: null as Inspector | null,
  chart: null as UsageChart | null,
  listTimer: 0 as number,
  renderQueued: false,
  /** Re-render soon (after poking at the view from the console or a test). */
  refresh(): void {
    scheduleRender();
  },
  get view(): SessionView | null {
    return this.current ? this.current.view : null;
  },
  get client(): RawpClient | null {
    return this.current ? this.current.client : null;
  },
};
(window as unknown as { rawp: typeof app }).rawp = app; // for people (and tests) poking at the page

// --- theme --------------------------------------------------------------------------------

function applyTheme(): void {
  const theme = localStorage.getItem(THEME_KEY);
  if (theme === "dark" || theme === "light") document.documentElement.dataset.theme = theme;
  else delete document.documentElement.dataset.theme;
  const label = theme === "dark" ? "Dark" : theme === "light" ? "Light" : "System";
  const toggle = $("theme-toggle");
  toggle.textContent = `Theme: ${label}`;
  toggle.setAttribute("aria-label", `Colour theme: ${label} (change)`);
}

$("theme-toggle").addEventListener("click", () => {
  const order = ["system", "dark", "light"];
  const now = localStorage.getItem(THEME_KEY) ?? "system";
  const next = order[(order.indexOf(now) + 1) % order.length]!;
  if (next === "system") localStorage.removeItem(THEME_KEY);
  else localStorage.setItem(THEME_KEY, next);
  applyTheme();
});

// --- credential ---------------------------------------------------------------------------

function takeTokenFromUrl(): void {
  const url = new URL(location.href);
  const token = url.searchParams.get("token");
  if (token) {
    sessionStorage.setItem(TOKEN_KEY, token);
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
}

function showSignIn(message = ""): void {
  $("app").hidden = true;
  $("signout-button").hidden = true;
  $("sidebar-toggle").hidden = true;
  $("identity").textContent = "";
  $("signin").hidden = false;
  $("signin-error").textContent = message;
  $<HTMLInputElement>("token-input").focus();
  setConn("none", "signed out");
}

$("signin-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $<HTMLInputElement>("token-input").value.trim());
  $<HTMLInputElement>("token-input").value = "";
  void start();
});

$("signout-button").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  closeSession();
  clearInterval(app.listTimer);
  showSignIn();
});

// --- start-up and routing -----------------------------------------------------------------

async function start(): Promise<void> {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) {
    showSignIn();
    return;
  }
  app.api = new Api(token);
  try {
    app.config = app.config ?? ((await (await fetch("/config.json")).json()) as Config);
    app.me = await app.api.whoami();
  } catch (error) {
    sessionStorage.removeItem(TOKEN_KEY);
    showSignIn(error instanceof ApiError ? `Sign-in refused: ${error.message}` : String(error));
    return;
  }
  $("signin").hidden = true;
  $("app").hidden = false;
  $("signout-button").hidden = false;
  const me = app.me;
  const readOnly = may("write") ? "" : " · read-only";
  $("identity").textContent = (me.kind === "key" ? `API key · workspace ${me.workspace}` : `session token · ${me.session_id}`) + readOnly;
  $("sidebar").hidden = me.kind !== "key";
  $("sidebar-toggle").hidden = me.kind !== "key"; // a session token lists nothing
  $("app").classList.toggle("no-sidebar", me.kind !== "key");
  if (me.kind === "key") {
    void refreshList();
    clearInterval(app.listTimer);
    app.listTimer = window.setInterval(() => void refreshList(), LIST_POLL_MS);
  } else if (!location.hash.startsWith("#/s/")) {
    location.hash = `#/s/${encodeURIComponent(me.session_id ?? "")}`;
    return; // hashchange routes
  }
  route();
}

interface Route {
  id: string | null;
  tab: "timeline" | "events";
  seq: number | null;
}

function parseRoute(): Route {
  const m = location.hash.match(/^#\/s\/([^/]+)(?:\/(events)(?:\/(\d+))?)?$/);
  if (!m) return { id: null, tab: "timeline", seq: null };
  return { id: decodeURIComponent(m[1]!), tab: m[2] ? "events" : "timeline", seq: m[3] ? Number(m[3]) : null };
}

function route(): void {
  const r = parseRoute();
  if (r.id !== (app.current?.id ?? null)) {
    closeSession();
    if (r.id) void openSession(r.id);
    else {
      $("session").hidden = true;
      $("placeholder").hidden = false;
      document.body.classList.remove("session-open");
      setConn("none", "no session open");
    }
  }
  showTab(r.tab, r.seq);
  renderList();
}

window.addEventListener("hashchange", () => {
  if (app.api) route();
});

function showTab(tab: "timeline" | "events", seq: number | null): void {
  $("tab-timeline").setAttribute("aria-selected", String(tab === "timeline"));
  $("tab-events").setAttribute("aria-selected", String(tab === "events"));
  $("timeline-panel").hidden = tab !== "timeline";
  $("events-panel").hidden = tab !== "events";
  if (tab === "events" && app.inspector) app.inspector.show(seq);
}

function sessionHref(id: string, tab = ""): string {
  return `#/s/${encodeURIComponent(id)}${tab}`;
}

$("tab-timeline").addEventListener("click", () => {
  if (app.current) location.hash = sessionHref(app.current.id);
});
$("tab-events").addEventListener("click", () => {
  if (app.current) location.hash = sessionHref(app.current.id, "/events");
});

// --- the session list ---------------------------------------------------------------------

async function refreshList(): Promise<void> {
  if (!app.api) return;
  let sessions: SessionInfo[];
  try {
    sessions = await app.api.sessions();
    app.listOk = true;
  } catch {
    app.listOk = false;
    renderConn();
    return;
  }
  const now = Date.now();
  for (const s of sessions) {
    const seen = app.activity.get(s.session_id);
    if (seen === undefined) {
      const t = Date.parse(s.ended_at ?? s.created_at);
      app.activity.set(s.session_id, { head: s.head_seq, at: Number.isNaN(t) ? 0 : t });
    } else if (s.head_seq !== seen.head) {
      app.activity.set(s.session_id, { head: s.head_seq, at: now });
    }
  }
  app.sessions = sessions;
  renderList();
  renderConn();
}

function filtered(): SessionInfo[] {
  const q = $<HTMLInputElement>("session-search").value.trim().toLowerCase();
  const status = $<HTMLSelectElement>("filter-status").value;
  const conn = $<HTMLSelectElement>("filter-conn").value;
  const archived = $<HTMLSelectElement>("filter-archived").value;
  const sort = $<HTMLSelectElement>("sort").value;
  const out = app.sessions.filter((s) => {
    const st = liveStatus(s);
    if (q && !s.session_id.toLowerCase().includes(q) && !s.name.toLowerCase().includes(q)) return false;
    if (status !== "all" && st !== status) return false;
    if (conn !== "all" && s.connection !== conn) return false;
    if (archived === "live" && st === "terminated") return false;
    if (archived === "archived" && st !== "terminated") return false;
    return true;
  });
  const at = (s: SessionInfo) => app.activity.get(s.session_id)?.at ?? 0;
  if (sort === "name") out.sort((a, b) => (a.name || a.session_id).localeCompare(b.name || b.session_id));
  else if (sort === "created") out.sort((a, b) => b.created_at.localeCompare(a.created_at));
  else out.sort((a, b) => at(b) - at(a) || b.created_at.localeCompare(a.created_at));
  return out;
}

/** The open session's status follows its live view; the others come from the poll. */
function liveStatus(s: SessionInfo): string {
  const c = app.current;
  if (c && c.id === s.session_id && (c.client !== null || c.readOnly)) return c.view.status;
  return s.status;
}

function renderList(): void {
  const shown = filtered();
  const all = app.sessions;
  const count = (st: string) => all.filter((s) => liveStatus(s) === st).length;
  const parts = [`${shown.length} of ${all.length} session${all.length === 1 ? "" : "s"}`];
  for (const [st, label] of [["running", "running"], ["requires_action", "need action"], ["rescheduling", "rescheduling"], ["idle", "idle"], ["terminated", "archived"]] as const) {
    const n = count(st);
    if (n > 0) parts.push(`${n} ${label}`);
  }
  $("session-counts").textContent = parts.join(" · ");
  const current = app.current?.id;
  $("sessions").replaceChildren(
    ...shown.map((s) => {
      const st = liveStatus(s);
      const name = current === s.session_id && app.current!.view.name ? app.current!.view.name : s.name || s.session_id;
      const li = el("li", { class: `session-item${current === s.session_id ? " current" : ""}`, "data-id": s.session_id, "data-status": st });
      const at = app.activity.get(s.session_id)?.at ?? 0;
      li.append(
        el(
          "a",
          { href: sessionHref(s.session_id), "aria-current": current === s.session_id ? "page" : null },
          el("span", { class: "name" }, name),
          el("span", { class: `badge status-${st}` }, st === "terminated" ? "archived" : st.replace("_", " ")),
          el("span", { class: "sid" }, s.session_id),
          el("span", { class: "presence-summary" }, `${presenceSummary(s)} · ${s.head_seq} events`),
          at > 0 ? el("span", { class: "activity", title: new Date(at).toISOString() }, ago(at)) : null,
        ),
      );
      return li;
    }),
  );
  $("sessions-empty").hidden = shown.length > 0;
  $("sessions-empty").textContent = all.length === 0 ? "No sessions yet." : "No session matches.";
}

function ago(at: number): string {
  const s = Math.max(0, Math.round((Date.now() - at) / 1000));
  if (s < 60) return `${s} s ago`;
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return `${Math.round(s / 86400)} d ago`;
}

function presenceSummary(s: SessionInfo): string {
  if (liveStatus(s) === "terminated") return "ended";
  const edges = s.participants.filter((p) => p.role === "edge" && p.state === "attached").length;
  const agent = { attached: "agent attached", detached: "agent detached", none: "no agent" }[s.connection];
  return `${agent} · ${edges} viewer${edges === 1 ? "" : "s"}`;
}

for (const id of ["session-search", "filter-status", "filter-conn", "filter-archived", "sort"]) {
  $(id).addEventListener("input", renderList);
}

// --- connection state (always visible) ---------------------------------------------------

type ConnState = "none" | "connecting" | "live" | "reconnecting" | "ended" | "read-only" | "offline";
let connState: ConnState = "none";
let connDetail = "";

function setConn(state: ConnState, detail = ""): void {
  connState = state;
  connDetail = detail;
  renderConn();
}

function renderConn(): void {
  const chip = $("conn-status");
  const state = connState === "none" && !app.listOk ? "offline" : connState;
  chip.dataset.state = state;
  chip.textContent = {
    none: "no session open",
    connecting: "connecting…",
    live: "live",
    reconnecting: "reconnecting…",
    ended: "ended",
    "read-only": "archived · read-only",
    offline: "master unreachable",
  }[state];
  chip.title = connDetail;
}

function fromClientStatus(c: Current, s: ConnectionStatus): void {
  if (s === "connected") {
    c.attaches += 1;
    setConn("live", c.client?.participantId ? `participant ${c.client.participantId}` : "");
  } else if (s === "reconnecting") setConn("reconnecting", "the connection dropped; reattaching");
  else if (s === "closed") setConn(c.readOnly ? "read-only" : "ended", c.ended ?? "closed");
  else setConn("connecting");
}

// --- one session --------------------------------------------------------------------------

function closeSession(): void {
  const c = app.current;
  if (c) {
    c.closed = true;
    void c.client?.close();
  }
  app.current = null;
  app.timeline = null;
  app.inspector = null;
  app.chart = null;
  $("transcript").replaceChildren();
  $("events").replaceChildren();
  $("usage-chart").replaceChildren();
}

async function openSession(id: string): Promise<void> {
  const api = app.api!;
  $("placeholder").hidden = true;
  $("session").hidden = false;
  document.body.classList.add("session-open");
  $("action-error").textContent = "";
  $("delete-confirm").hidden = true;
  $("rename-form").hidden = true;
  const c = new Current(id);
  app.current = c;
  app.timeline = new Timeline($("transcript"), c, may("write") ? answer : null, $("more-blocks"));
  app.inspector = new Inspector($("events"), $<HTMLSelectElement>("event-type"), $("events-count"), c, $("events-nav"));
  app.chart = new UsageChart($("usage-chart"));
  setConn("connecting", "reading the log");
  $("session-name").textContent = id;
  try {
    c.header = await api.session(id);
  } catch (error) {
    if (app.current !== c) return;
    c.ended = error instanceof ApiError && error.status === 404 ? "no such session" : String((error as Error).message);
    setConn("ended", c.ended);
    render();
    return;
  }
  c.readOnly = c.header.status === "terminated";
  c.lastError = c.header.last_error ?? null;
  // Live: the edge's own view is filled from the HTTP log, then the WebSocket resumes after it.
  if (!c.readOnly) {
    c.client = new RawpClient({
      url: app.config!.ws_url ?? `ws://${location.host}/v1/ws`,
      sessionId: id,
      role: "edge",
      token: api.token,
    });
    c.view = c.client.view;
  }
  try {
    for await (const page of api.events(id)) {
      if (app.current !== c) return;
      for (const frame of page) {
        c.view.receive(frame);
        c.record(frame);
      }
      // One render once the log is read (rendering each page would redo the visible window).
      setConn("connecting", `read ${c.frames.length} events of the log`);
    }
  } catch (error) {
    if (app.current !== c) return;
    c.ended = String((error as Error).message);
    setConn("ended", c.ended);
  }
  if (app.current !== c) return;
  if (c.readOnly || c.client === null) {
    setConn("read-only", "archived: its log is read-only; attaching is refused (4410)");
    render();
    return;
  }
  const client = c.client;
  client.on("frame", ({ frame }) => {
    if (app.current !== c) return;
    if (frame.type !== "connection.welcome") c.record(frame);
    scheduleRender();
  });
  client.on("status", (s) => {
    if (app.current !== c) return;
    fromClientStatus(c, s);
    scheduleRender();
  });
  client.on("error", (e) => {
    if (app.current !== c) return;
    c.clientErrors.push(e.message);
    if (c.clientErrors.length > 20) c.clientErrors.shift();
    scheduleRender();
  });
  const connecting = client.connect(); // the handshake runs while the log renders
  render();
  try {
    await connecting;
  } catch (error) {
    if (app.current !== c) return;
    if (error instanceof HandshakeRefused && error.code === 4410) {
      c.readOnly = true; // ended meanwhile: archived (notes §16.1)
      c.ended = "archived: attaching refused (4410)";
      setConn("read-only", c.ended);
    } else {
      c.ended = String((error as Error).message);
      setConn("ended", c.ended);
    }
    render();
  }
}

function scheduleRender(): void {
  if (app.renderQueued) return;
  app.renderQueued = true;
  requestAnimationFrame(() => {
    app.renderQueued = false;
    render();
  });
}

function render(): void {
  const c = app.current;
  if (!c) return;
  const view = c.view;
  const header = c.header;
  $("session-name").textContent = view.name || header?.name || c.id;
  $("session-id").textContent = c.id;
  $("lineage").textContent = header?.parent_session_id ? `forked from ${header.parent_session_id} at seq ${header.seed_length}` : "";
  const status = c.readOnly && header ? "terminated" : view.status;
  $("session-status").textContent = status === "terminated" && c.readOnly ? "archived" : status.replace("_", " ");
  $("session-status").className = `badge status-${status}`;
  // notes §17.5: what the agent waits for while rescheduling (received text: set as text only)
  const revisits = [...view.pendingRevisits.values()].map((r) => revisitText(r.at, r.reason));
  $("session-status").title = status === "rescheduling" ? revisits.join("\n") : "";
  $("agent-state").textContent = `agent ${view.agentState.replace("_", " ")}`;
  $("agent-state").hidden = view.agentState === "idle";
  renderPresence(c);
  renderTotals(c);
  const live = c.client !== null && c.client.connected && !c.readOnly && status !== "terminated";
  // Controls the credential may not use are not shown at all (its scopes, notes §17.6).
  const writes = may("write");
  $("cancel-button").hidden = !(writes && live && status === "running");
  $("composer").hidden = !writes || c.readOnly || status === "terminated";
  $<HTMLButtonElement>("send-button").disabled = !live;
  $("delete-button").hidden = !mayDelete();
  $<HTMLButtonElement>("delete-button").disabled = status === "terminated" && !c.readOnly;
  $("rename-button").hidden = !writes;
  $<HTMLButtonElement>("rename-button").disabled = c.readOnly || status === "terminated";
  $("actions").classList.toggle("read-only", c.readOnly);
  const incomplete = incompleteReasons(c);
  $("incomplete").hidden = incomplete.length === 0;
  $("incomplete").replaceChildren(el("strong", {}, "Data incomplete. "), el("span", {}, incomplete.join(" · ")));
  const ended = endedText(c);
  $("ended").hidden = ended === null;
  $("ended").textContent = ended ?? "";
  // An ended session (expiry or a fatal error, archived) can be carried on (notes §17.2).
  $("continue-button").hidden = !(c.readOnly || (status === "terminated" && c.header?.ended_at));
  const failed = c.lastError;
  $("run-failed").hidden = failed === null;
  $("run-failed").textContent = failed ? `The last run failed (${failed.code}): ${failed.message}` : "";
  $("client-errors").hidden = c.clientErrors.length === 0;
  $("client-errors").textContent = c.clientErrors.length ? `Frames the page could not read: ${c.clientErrors.slice(-3).join(" · ")}` : "";
  app.timeline?.render();
  app.chart?.update(usageBlocks(view.blocks));
  app.inspector?.refresh();
  // The open session's list entry follows its view; the list itself is redrawn by the poll.
  const listSig = `${view.status}|${view.name}|${c.readOnly}`;
  if (listSig !== lastListSig) {
    lastListSig = listSig;
    renderList();
  }
}
let lastListSig = "";

function usageBlocks(blocks: readonly Block[]): UsageBlock[] {
  return blocks.filter((b): b is UsageBlock => b.kind === "usage" && !b.from_master);
}

function endedText(c: Current): string | null {
  const last = [...c.view.blocks].reverse().find((b) => b.kind === "notice" && (b.notice === "deleted" || b.notice === "ended"));
  const notice = last && last.kind === "notice" ? last : null;
  // An expiry or a fatal error ended the session (kept, continuable); a deletion deleted it.
  const how = notice === null ? null : notice.notice === "ended" ? `ended: ${notice.text}` : notice.text.replace(/^session /, "");
  if (c.readOnly) {
    const h = c.header;
    const bits = ["Archived session: read-only."];
    if (h?.ended_at) bits.push(`Ended ${h.ended_at}`);
    if (how) bits.push(notice?.notice === "ended" ? `— ${how}.` : how.replace(/^deleted /, ""));
    else if (h?.reason) bits.push(`(${h.reason}${h.deleted_by ? `, by ${h.deleted_by}` : ""})`);
    bits.push("Continue carries the conversation on in a new session.");
    return bits.join(" ");
  }
  if (how) return notice?.notice === "ended" ? `This session ${how}.` : `This session was ${how}.`;
  if (c.ended && c.client === null) return c.ended;
  return null;
}

/** §7.1.1: why the data is incomplete. Only the master's notices count (notes §16.8). */
function incompleteReasons(c: Current): string[] {
  const reasons = c.view.notices.filter((n: Notice) => n.kind === "backlog_truncated").map((n) => n.text);
  for (const b of c.view.blocks) {
    if (b.kind === "notice" && b.notice === "error" && dataIncomplete(b)) reasons.push(b.text);
  }
  return reasons;
}

function renderPresence(c: Current): void {
  const chips: Node[] = [];
  if (c.readOnly) {
    $("presence").replaceChildren(); // ended: its log's last presence is nobody's now
    return;
  }
  const me = c.client?.participantId ?? null;
  if (me && c.client?.connected) chips.push(el("span", { class: "chip you", title: me }, "you"));
  for (const [id, state] of Object.entries(c.view.participants)) {
    if (id === me || state === "expired") continue;
    const known = c.roles.get(id) ?? c.header?.participants.find((x) => x.participant_id === id)?.role;
    const role = known === "client" ? "agent" : known === "edge" ? "viewer" : "participant";
    chips.push(el("span", { class: `chip ${state}`, title: id }, `${role} ${state}`));
  }
  $("presence").replaceChildren(...chips);
}

function renderTotals(c: Current): void {
  const t = c.view.totals;
  const fmt = (n: number) => (Number.isInteger(n) ? n.toLocaleString("en") : n.toFixed(4).replace(/0+$/, "").replace(/\.$/, ""));
  const cost = t.cost_unit ? `${fmt(t.cost_used)} ${t.cost_unit}${t.cost_limit >= 0 ? ` of ${fmt(t.cost_limit)}` : ""}` : "—";
  const parts = [
    `${t.turns} turn${t.turns === 1 ? "" : "s"}`,
    `${t.tool_calls} tool call${t.tool_calls === 1 ? "" : "s"}`,
    `${fmt(t.input_tokens)} in / ${fmt(t.output_tokens)} out tokens`,
    `cost ${cost}`,
  ];
  if (t.context_utilization !== null) parts.push(`context ${Math.round(t.context_utilization * 100)}%`);
  if (t.compactions) parts.push(`${t.compactions} compaction${t.compactions === 1 ? "" : "s"}`);
  $("usage").textContent = parts.join(" · ");
}

// --- actions ------------------------------------------------------------------------------

function fail(message: string): void {
  $("action-error").textContent = message;
}

/** A frame this page sends: errors shown, and once it left, listed in the inspector. */
function track(promise: Promise<SendReceipt>): void {
  const c = app.current;
  promise.then(
    (receipt) => {
      if (!c || app.current !== c) return;
      const frame = { ...receipt.frame, sender: { role: "edge", participant_id: c.client?.participantId ?? "" } } as Frame;
      c.sent.add(frame);
      c.record(frame);
      scheduleRender();
    },
    (e: Error) => fail(e.message),
  );
}

/** Does the signed-in credential carry ``scope``? (A master that names none: every scope.) */
function may(scope: string): boolean {
  const scopes = app.me?.scopes;
  return scopes === undefined || scopes.includes(scope);
}

/** May it delete: the delete scope, and for a session token the delete grant too. */
function mayDelete(): boolean {
  const me = app.me;
  return may("delete") && (me?.kind === "key" || (me?.grants ?? []).includes("delete"));
}

function answer(interactionId: string, value: unknown): void {
  const client = app.client;
  if (!client || !client.connected || app.current?.readOnly) {
    fail("not connected: the answer was not sent");
    return;
  }
  track(client.interactionResponse(interactionId, value));
  scheduleRender();
}

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const input = $<HTMLTextAreaElement>("message-input");
  const text = input.value.trim();
  const client = app.client;
  if (!text || !client) return;
  if (!client.connected) {
    fail("not connected: the message was not sent");
    return;
  }
  // The text stays in the box until the master took it: a message that finds the agent
  // running waits up to 3 s and may be refused busy (notes §17.3); nothing typed is lost.
  fail("");
  const sending = client.userMessage(text);
  track(sending);
  sending.then(
    () => {
      if (input.value.trim() === text) input.value = "";
    },
    (e: unknown) => {
      if (e instanceof FrameRefused && e.errorCode === "busy") {
        fail("The agent is busy: your message was not sent (it is still in the box). Send it again when the run ends.");
      }
    },
  );
  scheduleRender();
});

$("continue-button").addEventListener("click", () => {
  const c = app.current;
  if (!c || !app.api) return;
  fail("");
  app.api.continueSession(c.id).then(
    (made) => {
      void refreshList();
      location.hash = `#/s/${encodeURIComponent(made.session.session_id)}`; // hashchange opens it
    },
    (e: Error) => fail(`continue failed: ${e.message}`),
  );
});

$("message-input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) {
    event.preventDefault();
    $<HTMLFormElement>("composer").requestSubmit();
  }
});

$("cancel-button").addEventListener("click", () => {
  const client = app.client;
  if (client) track(client.cancel());
});

$("rename-button").addEventListener("click", () => {
  $("rename-form").hidden = false;
  $<HTMLInputElement>("rename-input").value = app.view ? app.view.name : "";
  $("rename-input").focus();
});
$("rename-cancel").addEventListener("click", () => {
  $("rename-form").hidden = true;
});
$("rename-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const c = app.current;
  const name = $<HTMLInputElement>("rename-input").value.trim();
  $("rename-form").hidden = true;
  if (!c || !name || name === c.view.name) return;
  // As an edge when attached (§7.6, renamed_by edge; the master echoes it back), else HTTP.
  if (c.client && c.client.connected) track(c.client.rename(name));
  else await act(() => app.api!.rename(c.id, name));
  setTimeout(() => void refreshList(), 100);
});

$("delete-button").addEventListener("click", () => {
  $("delete-confirm").hidden = false;
  $("delete-no").focus();
});
$("delete-no").addEventListener("click", () => {
  $("delete-confirm").hidden = true;
});
$("delete-yes").addEventListener("click", async () => {
  $("delete-confirm").hidden = true;
  const c = app.current;
  if (!c) return;
  await act(() => app.api!.remove(c.id));
  if (c.readOnly) location.hash = "#/";
  setTimeout(() => void refreshList(), 100);
});

async function act(call: () => Promise<unknown>): Promise<void> {
  $("action-error").textContent = "";
  try {
    await call();
  } catch (error) {
    fail((error as Error).message);
  }
}

$("sidebar-toggle").addEventListener("click", () => {
  const open = document.body.classList.toggle("sidebar-open");
  $("sidebar-toggle").setAttribute("aria-expanded", String(open));
});

// Keyboard: "/" finds a session, "t" the timeline, "e" the events, Escape leaves a field.
document.addEventListener("keydown", (event) => {
  const target = event.target as HTMLElement;
  const typing = target.closest("input, textarea, select") !== null;
  if (event.key === "Escape" && typing) {
    target.blur();
    return;
  }
  if (typing || event.ctrlKey || event.metaKey || event.altKey) return;
  if (event.key === "/") {
    event.preventDefault();
    document.body.classList.add("sidebar-open");
    $("session-search").focus();
  } else if (event.key === "t" && app.current) $("tab-timeline").click();
  else if (event.key === "e" && app.current) $("tab-events").click();
});

window.addEventListener("resize", () => scheduleRender());

applyTheme();
takeTokenFromUrl();
renderConn();
void start();
