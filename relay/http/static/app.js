// The dashboard: sign-in, the sessions list (REST, polled), and one live session view (an edge
// over the WebSocket). No framework: blocks are rendered to DOM nodes cached by key and
// version, so a streamed delta re-renders one block and an answer box keeps its text.

import { Api, ApiError } from "./api.js";
import { EdgeConnection } from "./rawp.js";
import { SessionView } from "./view.js";

const $ = (id) => document.getElementById(id);
const TOKEN_KEY = "rawp.token";
const LIST_POLL_MS = 2000;

const app = {
  api: null, config: null, me: null,
  view: null, connection: null, header: null,
  listTimer: null, renderQueued: false,
  blockCache: new Map(), openThinking: new Set(),
};
window.rawp = app; // for people (and tests) poking at the page

// --- credential ---------------------------------------------------------------------------

function takeTokenFromUrl() {
  const url = new URL(location.href);
  const token = url.searchParams.get("token");
  if (token) {
    sessionStorage.setItem(TOKEN_KEY, token);
    url.searchParams.delete("token");
    history.replaceState(null, "", url.pathname + url.search + url.hash);
  }
}

function showSignIn(message = "") {
  $("app").hidden = true;
  $("signout-button").hidden = true;
  $("identity").textContent = "";
  $("signin").hidden = false;
  $("signin-error").textContent = message;
  $("token-input").focus();
}

$("signin-form").addEventListener("submit", (event) => {
  event.preventDefault();
  sessionStorage.setItem(TOKEN_KEY, $("token-input").value.trim());
  $("token-input").value = "";
  start();
});

$("signout-button").addEventListener("click", () => {
  sessionStorage.removeItem(TOKEN_KEY);
  closeSession();
  clearInterval(app.listTimer);
  showSignIn();
});

// --- start-up and routing -----------------------------------------------------------------

async function start() {
  const token = sessionStorage.getItem(TOKEN_KEY);
  if (!token) { showSignIn(); return; }
  app.api = new Api(token);
  try {
    app.config = app.config || await (await fetch("/config.json")).json();
    app.me = await app.api.whoami();
  } catch (error) {
    sessionStorage.removeItem(TOKEN_KEY);
    showSignIn(error instanceof ApiError ? `Sign-in refused: ${error.message}` : String(error));
    return;
  }
  $("signin").hidden = true;
  $("app").hidden = false;
  $("signout-button").hidden = false;
  const who = app.me.kind === "key" ? `API key · workspace ${app.me.workspace}`
                                    : `session token · ${app.me.session_id}`;
  $("identity").textContent = who;
  $("sidebar").hidden = app.me.kind !== "key";
  if (app.me.kind === "key") {
    refreshList();
    clearInterval(app.listTimer);
    app.listTimer = setInterval(refreshList, LIST_POLL_MS);
  } else if (!location.hash.startsWith("#/s/")) {
    location.hash = `#/s/${encodeURIComponent(app.me.session_id)}`;
    return; // hashchange routes
  }
  route();
}

function route() {
  const match = location.hash.match(/^#\/s\/(.+)$/);
  const id = match ? decodeURIComponent(match[1]) : null;
  if (id === (app.view && app.view.sessionId)) return;
  closeSession();
  if (id) openSession(id); else { $("session").hidden = true; $("placeholder").hidden = false; }
}

window.addEventListener("hashchange", () => { if (app.api) route(); });

// --- the sessions list --------------------------------------------------------------------

async function refreshList() {
  let page;
  try { page = await app.api.sessions(); } catch { return; }
  // Archived sessions (ended by expiry or a fatal error, notes §16.1) are listed apart.
  const live = page.sessions.filter((s) => !s.ended_at);
  const ended = page.sessions.filter((s) => s.ended_at);
  $("sessions").replaceChildren(...live.map(listItem));
  $("archived-sessions").replaceChildren(...ended.map(listItem));
  $("archived-title").hidden = ended.length === 0;
  $("sessions-empty").hidden = live.length > 0;
  if (app.view) renderListEntry(app.view);
}

function listItem(s) {
  const li = el("li", { class: "session-item", "data-id": s.session_id });
  if (app.view && app.view.sessionId === s.session_id) li.classList.add("current");
  const a = el("a", { href: `#/s/${encodeURIComponent(s.session_id)}` });
  a.append(
    el("span", { class: "name" }, s.name || s.session_id),
    el("span", { class: `badge status-${s.status}` }, s.status.replace("_", " ")),
    el("span", { class: "presence-summary" },
      s.ended_at ? `ended ${s.ended_at.slice(0, 16).replace("T", " ")} · ${s.reason}`
                 : presenceSummary(s)),
  );
  li.append(a);
  return li;
}

function presenceSummary(s) {
  const edges = s.participants.filter((p) => p.role === "edge" && p.state === "attached").length;
  const agent = { attached: "agent online", detached: "agent away", none: "no agent" }[s.connection];
  return `${agent} · ${edges} viewer${edges === 1 ? "" : "s"}`;
}

// --- one session --------------------------------------------------------------------------

function closeSession() {
  if (app.connection) app.connection.stop("closed");
  app.connection = null;
  app.view = null;
  app.header = null;
  app.blockCache.clear();
  $("transcript").replaceChildren();
}

async function openSession(id) {
  $("placeholder").hidden = true;
  $("session").hidden = false;
  $("action-error").textContent = "";
  $("delete-confirm").hidden = true;
  $("rename-form").hidden = true;
  const view = new SessionView(id);
  app.view = view;
  try {
    app.header = await app.api.session(id);
    // The log so far over REST, then live over the WebSocket from its last seq.
    for await (const event of app.api.events(id)) {
      if (app.view !== view) return;
      view.receive(event);
    }
  } catch (error) {
    if (app.view !== view) return;
    setConn("ended", error.status === 404 ? "no such session" : error.message);
    $("session-name").textContent = id;
    render();
    return;
  }
  if (app.view !== view) return;
  if (app.header.ended_at) {
    // Archived: read-only, the log above is all there is (attaching would close 4410).
    setConn("ended", `ended ${app.header.ended_at} (${app.header.reason})`);
    render();
    return;
  }
  app.connection = new EdgeConnection({
    wsUrl: app.config.ws_url, token: app.api.token, view,
    onChange: scheduleRender,
    onStatus: (state, detail) => { setConn(state, detail); scheduleRender(); },
  });
  app.connection.attach();
  render();
}

function setConn(state, detail = "") {
  const conn = $("conn-status");
  conn.dataset.state = state;
  conn.textContent = { connecting: "connecting…", live: "live", reconnecting: "reconnecting…",
                       ended: "ended" }[state] || state;
  conn.title = detail || "";
}

function scheduleRender() {
  if (app.renderQueued) return;
  app.renderQueued = true;
  requestAnimationFrame(() => { app.renderQueued = false; render(); });
}

function render() {
  const view = app.view;
  if (!view) return;
  const header = app.header || {};
  $("session-name").textContent = view.name || header.name || view.sessionId;
  $("session-id").textContent = view.sessionId;
  $("lineage").textContent = header.parent_session_id
    ? `forked from ${header.parent_session_id} at seq ${header.seed_length}` : "";
  const status = view.status;
  $("session-status").textContent = status.replace("_", " ");
  $("session-status").className = `badge status-${status}`;
  $("agent-state").textContent = `agent ${view.agentState.replace("_", " ")}`;
  $("agent-state").hidden = view.agentState === "idle";
  renderPresence(view);
  renderUsage(view.totals);
  const live = app.connection && !app.connection.stopped && !view.terminated;
  $("cancel-button").hidden = !(live && status === "running");
  $("composer").hidden = view.terminated;
  $("send-button").disabled = !live;
  $("delete-button").disabled = view.terminated;
  $("rename-button").disabled = view.terminated;
  const incomplete = view.incomplete;
  $("incomplete").hidden = incomplete.length === 0;
  $("incomplete").replaceChildren(
    el("strong", {}, "Data incomplete. "), el("span", {}, incomplete.join(" · ")));
  $("ended").hidden = !view.terminated;
  if (view.deleted) {
    $("ended").textContent = `This session was deleted (${view.deleted.reason}, by ${view.deleted.by}).`;
  }
  renderTranscript(view);
  renderListEntry(view);
}

// The open session's entry in the list follows the live view (the list itself is polled).
function renderListEntry(view) {
  const li = document.querySelector(`.session-item[data-id="${CSS.escape(view.sessionId)}"]`);
  if (!li) return;
  li.classList.add("current");
  const badge = li.querySelector(".badge");
  badge.textContent = view.status.replace("_", " ");
  badge.className = `badge status-${view.status}`;
  li.querySelector(".name").textContent = view.name || view.sessionId;
  if (li.closest("#archived-sessions")) return;  // an archive's summary says how it ended
  const agent = [...view.participants.values()].find((p) => p.role === "client");
  const viewers = [...view.participants.entries()].filter(
    ([id, p]) => p.role === "edge" && p.state === "attached" && id !== app.connection?.participantId,
  ).length + (app.connection && app.connection.ws ? 1 : 0);
  const state = agent ? (agent.state === "attached" ? "agent online" : "agent away") : "no agent";
  li.querySelector(".presence-summary").textContent = `${state} · ${viewers} viewer${viewers === 1 ? "" : "s"}`;
}

function renderPresence(view) {
  const chips = [];
  const me = app.connection && app.connection.participantId;
  if (me && app.connection.ws) chips.push(el("span", { class: "chip you" }, "you"));
  for (const [id, p] of view.participants) {
    if (id === me || p.state === "expired") continue;
    chips.push(el("span", { class: `chip ${p.role} ${p.state}`, title: id },
      `${p.role === "client" ? "agent" : "viewer"} ${p.state}`));
  }
  $("presence").replaceChildren(...chips);
}

function renderUsage(t) {
  const cost = t.unit ? `${formatNumber(t.cost)} ${t.unit}${t.limit >= 0 ? ` of ${t.limit}` : ""}` : "—";
  const parts = [
    `${t.turns} turn${t.turns === 1 ? "" : "s"}`,
    `${formatNumber(t.input)} in / ${formatNumber(t.output)} out tokens`,
    `cost ${cost}`,
  ];
  if (t.utilization != null) parts.push(`context ${Math.round(t.utilization * 100)}%`);
  if (t.compactions) parts.push(`${t.compactions} compaction${t.compactions === 1 ? "" : "s"}`);
  $("usage").textContent = parts.join(" · ");
}

function renderTranscript(view) {
  const box = $("transcript");
  const nearBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 80;
  const nodes = view.blocks.map((block) => {
    let cached = app.blockCache.get(block.key);
    if (!cached || cached.v !== block.v) {
      const node = renderBlock(block);
      if (cached && cached.node.isConnected) cached.node.replaceWith(node);
      cached = { v: block.v, node };
      app.blockCache.set(block.key, cached);
    }
    return cached.node;
  });
  nodes.forEach((node, i) => {
    if (box.children[i] !== node) box.insertBefore(node, box.children[i] || null);
  });
  while (box.children.length > nodes.length) box.lastChild.remove();
  if (nearBottom) box.scrollTop = box.scrollHeight;
}

// --- blocks -------------------------------------------------------------------------------

function renderBlock(b) {
  const node = BLOCKS[b.kind](b);
  node.classList.add("block", b.kind);
  node.dataset.key = b.key;
  if (b.synthetic) {
    node.classList.add("synthetic");
    node.append(el("span", { class: "badge synthetic-badge", title: "made by finalization (§7.8.1)" }, "synthetic"));
  }
  return node;
}

const BLOCKS = {
  turn: (b) => el("div", {},
    el("span", { class: "turn-title" }, `Turn ${b.index + 1}`),
    el("span", { class: "turn-state" }, b.ended ? b.stopReason.replace("_", " ") : "in progress…")),
  text: (b) => {
    const node = el("div", {}, el("div", { class: "text-body" }, b.text));
    if (!b.done) node.classList.add("streaming");
    return node;
  },
  thinking: (b) => {
    const node = el("details", {},
      el("summary", {}, b.done ? "Thinking" : "Thinking…"), el("div", { class: "thinking-body" }, b.text));
    node.open = app.openThinking.has(b.key);
    node.addEventListener("toggle", () => {
      if (node.open) app.openThinking.add(b.key); else app.openThinking.delete(b.key);
    });
    return node;
  },
  tool: (b) => {
    const node = el("div", {},
      el("div", { class: "tool-head" },
        el("span", { class: "tool-name" }, b.name),
        el("span", { class: `tool-status status-${b.status}` }, b.status)),
      el("pre", { class: "tool-input" }, pretty(b.input)));
    if (b.status !== "pending") node.append(el("pre", { class: "tool-output" }, pretty(b.output)));
    return node;
  },
  ask: renderAsk,
  user: (b) => el("div", {}, el("span", { class: "who" }, "user"), el("div", { class: "text-body" }, b.text)),
  usage: (b) => el("div", {}, `usage: ${formatNumber(b.input)} in / ${formatNumber(b.output)} out` +
    (b.unit ? ` · ${formatNumber(b.cost)} ${b.unit} used` : "") + (b.fromMaster ? " (master totals)" : "")),
  compaction: (b) => {
    const node = el("div", {},
      el("div", { class: "compaction-head" },
        `Context compacted (${b.trigger}): ${formatNumber(b.previous)} → ${formatNumber(b.current)} tokens`),
      el("div", { class: "compaction-summary" }, b.summary));
    const kept = b.preserved || {};
    for (const [label, items] of Object.entries(kept)) {
      if (Array.isArray(items) && items.length) {
        node.append(el("div", { class: "preserved" }, `${label.replaceAll("_", " ")}: ` +
          items.map((x) => (typeof x === "string" ? x : JSON.stringify(x))).join(", ")));
      }
    }
    return node;
  },
  notice: (b) => {
    // A participant's session.error is shown as its report, not as the session's (§16.8).
    const who = b.reportedBy && b.reportedBy !== "master" ? ` (reported by the ${b.reportedBy})` : "";
    const node = el("div", {}, b.code ? el("code", {}, b.code) : "", el("span", {}, `${who} ${b.text}`));
    node.classList.add(`notice-${b.notice}`);
    return node;
  },
};

function renderAsk(b) {
  const node = el("div", {}, el("div", { class: "ask-prompt" }, b.prompt));
  node.dataset.interaction = b.id;
  if (b.status === "answered") {
    const shown = b.askKind === "confirmation" && typeof b.response === "boolean"
      ? (b.response ? "yes" : "no") : display(b.response);
    node.append(el("div", { class: "ask-answer" }, `answered: ${shown}`));
    return node;
  }
  if (b.status === "withdrawn") { // notes §16.4: no answer is possible any more
    node.classList.add("ask-withdrawn");
    node.append(el("div", { class: "ask-answer" },
      `withdrawn by the agent${b.reason ? `: ${b.reason}` : ""}`));
    return node;
  }
  if (b.status === "discarded") {
    node.append(el("div", { class: "ask-answer" }, "discarded: the connection was lost"));
    return node;
  }
  const answer = (value) => {
    if (!app.connection || !app.connection.send("control.interaction.response",
      { interaction_id: b.id, response: value })) {
      $("action-error").textContent = "not connected: the answer was not sent";
    }
  };
  const row = el("div", { class: "ask-actions" });
  if (b.askKind === "confirmation") {
    row.append(button("Yes", () => answer(true), "answer"), button("No", () => answer(false), "answer ghost"));
  } else if (b.askKind === "choice") {
    for (const option of b.options || []) {
      const value = option && typeof option === "object" && "value" in option ? option.value : option;
      const label = option && typeof option === "object" && "label" in option ? option.label : display(option);
      row.append(button(label, () => answer(value), "answer"));
    }
  } else {
    const input = el("input", { class: "ask-input", placeholder: "Your answer" });
    row.append(input, button("Send", () => answer(input.value), "answer"));
  }
  node.append(row);
  return node;
}

// --- actions ------------------------------------------------------------------------------

$("composer").addEventListener("submit", (event) => {
  event.preventDefault();
  const text = $("message-input").value.trim();
  if (!text || !app.connection) return;
  if (app.connection.send("user.message", { text })) $("message-input").value = "";
});

$("message-input").addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.shiftKey) { event.preventDefault(); $("composer").requestSubmit(); }
});

$("cancel-button").addEventListener("click", () => {
  const turn = app.view && app.view.m.turnId;
  if (turn && app.connection) app.connection.send("control.cancel", { turn_id: turn });
});

$("rename-button").addEventListener("click", () => {
  $("rename-form").hidden = false;
  $("rename-input").value = app.view ? app.view.name : "";
  $("rename-input").focus();
});
$("rename-cancel").addEventListener("click", () => { $("rename-form").hidden = true; });
$("rename-form").addEventListener("submit", async (event) => {
  event.preventDefault();
  const view = app.view;
  const name = $("rename-input").value.trim();
  $("rename-form").hidden = true;
  if (!view || !name || name === view.name) return;
  // As an edge when attached (§7.6, renamed_by edge; the master echoes it back), else REST.
  const sent = app.connection && app.connection.send("session.renamed",
    { session_id: view.sessionId, name, previous_name: view.name, renamed_by: "edge" }, { fold: false });
  if (!sent) await act(() => app.api.rename(view.sessionId, name));
  refreshListSoon();
});

$("delete-button").addEventListener("click", () => { $("delete-confirm").hidden = false; });
$("delete-no").addEventListener("click", () => { $("delete-confirm").hidden = true; });
$("delete-yes").addEventListener("click", async () => {
  $("delete-confirm").hidden = true;
  const view = app.view;
  if (view) await act(() => app.api.remove(view.sessionId));
  refreshListSoon();
});

async function act(call) {
  $("action-error").textContent = "";
  try { await call(); } catch (error) { $("action-error").textContent = error.message; }
}

function refreshListSoon() { if (app.me && app.me.kind === "key") setTimeout(refreshList, 100); }

// --- helpers ------------------------------------------------------------------------------

function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) node.setAttribute(name, value);
  for (const child of children) node.append(child);
  return node;
}

function button(label, onClick, cls = "") {
  const b = el("button", { type: "button", class: cls }, label);
  b.addEventListener("click", onClick);
  return b;
}

function pretty(value) {
  if (value === undefined || value === null) return "—";
  return typeof value === "string" ? value : JSON.stringify(value, null, 2);
}

function display(value) { return typeof value === "string" ? value : JSON.stringify(value); }

function formatNumber(n) {
  if (typeof n !== "number") return String(n ?? 0);
  return Number.isInteger(n) ? n.toLocaleString("en") : n.toFixed(4).replace(/0+$/, "").replace(/\.$/, "");
}

takeTokenFromUrl();
start();
