// Agent text as Markdown: marked renders, DOMPurify sanitizes, the result is inserted. Nothing
// from a frame ever executes: no scripts, no event handlers, no javascript: links, no styles,
// no forms or frames (and the page's CSP forbids inline script besides).
import DOMPurify from "dompurify";
import { Marked } from "marked";

const marked = new Marked({ gfm: true, breaks: true, async: false });

DOMPurify.addHook("afterSanitizeAttributes", (node) => {
  if (node.tagName === "A") {
    node.setAttribute("rel", "noopener noreferrer nofollow");
    node.setAttribute("target", "_blank");
  }
});

const PURIFY = {
  USE_PROFILES: { html: true },
  FORBID_TAGS: ["style", "form", "input", "button", "textarea", "select", "iframe", "object", "embed", "svg", "math"],
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
