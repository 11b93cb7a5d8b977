// DOM helpers: every string from a frame goes in as text (textContent), never as markup.
export type Child = Node | string | null | undefined | false;

export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  attrs: Record<string, string | number | boolean | null | undefined> = {},
  ...children: Child[]
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    node.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children) if (child !== null && child !== undefined && child !== false) node.append(child);
  return node;
}

export function button(label: string, onClick: (e: MouseEvent) => void, cls = "", attrs: Record<string, string> = {}): HTMLButtonElement {
  const b = el("button", { type: "button", class: cls, ...attrs }, label);
  b.addEventListener("click", onClick);
  return b;
}

export const $ = <T extends HTMLElement = HTMLElement>(id: string): T => document.getElementById(id) as T;

export function formatNumber(n: unknown): string {
  if (typeof n !== "number" || !Number.isFinite(n)) return String(n ?? 0);
  return Number.isInteger(n) ? n.toLocaleString("en") : n.toFixed(4).replace(/0+$/, "").replace(/\.$/, "");
}

/** "09:41:07.120" in UTC, with the full timestamp as the element's title. */
export function timeEl(iso: string | undefined, cls: string): HTMLElement | null {
  if (!iso) return null;
  const ms = Date.parse(iso);
  if (Number.isNaN(ms)) return null;
  const d = new Date(ms);
  const text = d.toISOString().slice(11, 23);
  return el("time", { class: cls, datetime: d.toISOString(), title: iso }, text);
}

export function duration(fromIso: string | undefined, toIso: string | undefined): string | null {
  if (!fromIso || !toIso) return null;
  const ms = Date.parse(toIso) - Date.parse(fromIso);
  if (!Number.isFinite(ms) || ms < 0) return null;
  if (ms < 1000) return `${ms} ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(ms < 10_000 ? 2 : 1)} s`;
  const m = Math.floor(ms / 60_000);
  return `${m} min ${Math.round((ms % 60_000) / 1000)} s`;
}

export function display(value: unknown): string {
  return typeof value === "string" ? value : JSON.stringify(value) ?? String(value);
}
