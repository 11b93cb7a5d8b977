// Agent text as Markdown: marked renders, DOMPurify sanitizes, the result is inserted. Nothing
// from a frame ever executes: raw HTML in the text stays text; what Markdown makes has no scripts, no event handlers, no javascript: links, no styles,
// no forms, frames or media (nothing loads from elsewhere; the CSP forbids inline script besides).
import DOMPurify from "dompurify";
import { Marked } from "marked";

const ESCAPES: Record<string, string> = { "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" };
const escapeHtml = (text: string): string => text.replace(/[&<>"']/g, (c) => ESCAPES[c]!);

// Raw HTML inside the Markdown is shown as the text it is, never parsed as markup.
const marked = new Marked({
  gfm: true,
  breaks: true,
  async: false,
  renderer: {
    html(token) {
      return escapeHtml(token.text);
    },
  },
});

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("rel", "noopener noreferrer nofollow");
    node.setAttribute("target", "_blank");
  }
});

const PURIFY = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ["style", "img", "picture", "video", "audio", "source", "form", "input", "button", "textarea", "select", "iframe", "object", "embed", "svg", "math"],
  FORBID_ATTR: ["style", "srcset", "action", "formaction"],
  ALLOW_DATA_ATTR: false,
};

export function markdownHtml(text: string): string {
  const html = marked.parse(text) as string;
  return DOMPurify.sanitize(html, PURIFY) as unknown as string;
}

export function renderMarkdown(target: HTMLElement, text: string): void {
  target.innerHTML = markdownHtml(text);
}
