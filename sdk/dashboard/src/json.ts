// A collapsible JSON viewer: objects and arrays as <details> (children built on first open),
// primitives coloured by type. Text only.
import { el } from "./dom.js";

const MAX_INLINE = 80;

export function jsonView(value: unknown, open = 1): HTMLElement {
  return el("div", { class: "json" }, node(value, open, null));
}

function node(value: unknown, open: number, key: string | null): HTMLElement {
  const label = key === null ? null : el("span", { class: "json-key" }, `${key}: `);
  if (value === null || typeof value !== "object") {
    const type = value === null ? "null" : typeof value;
    const text = typeof value === "string" ? JSON.stringify(value) : String(value);
    return el("div", { class: "json-row" }, label, el("span", { class: `json-${type}` }, text));
  }
  const entries: Array<[string, unknown]> = Array.isArray(value)
    ? value.map((v, i) => [String(i), v])
    : Object.entries(value as Record<string, unknown>);
  const brackets = Array.isArray(value) ? ["[", "]"] : ["{", "}"];
  const preview = JSON.stringify(value);
  const short = preview.length <= MAX_INLINE ? preview : `${brackets[0]} ${entries.length} ${Array.isArray(value) ? "items" : "keys"} ${brackets[1]}`;
  const details = el("details", { class: "json-node" }, el("summary", {}, label, el("span", { class: "json-preview" }, short)));
  let built = false;
  const build = () => {
    if (built) return;
    built = true;
    const body = el("div", { class: "json-children" });
    for (const [k, v] of entries) body.append(node(v, open - 1, k));
    details.append(body);
  };
  details.addEventListener("toggle", () => { if (details.open) build(); });
  if (open > 0 && entries.length > 0) {
    details.open = true;
    build();
  }
  return el("div", { class: "json-row" }, details);
}
