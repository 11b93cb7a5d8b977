"""The self-contained HTML report of a conformance run (``rawp conformance --html FILE``).

One file, no scripts, no external resources: the verdict, the features found missing (with the
probe's transcript and the cases that relied on them), a table per spec section (RAWP 1.0.2 §7,
rawp-notes), and one section per case that did not pass with its details, the spec text it
checks (:mod:`.spec_text`) and its wire transcript. Passing cases are listed in their section's
table. Every text that came from a master or a case is escaped: transcripts hold whatever a
master sent, hostile strings included.
"""

from __future__ import annotations

import datetime as dt
import html
import re
from collections.abc import Iterable
from typing import Final, Protocol

from .runner import STATUSES, Prerequisite, Result, Target, verdict
from .spec_text import section_text
from .transcript import Transcript

__all__ = ["RenderedReport", "anchor", "render"]


class RenderedReport(Protocol):
    """What the HTML needs of a run (a :class:`conformance.report.Report` is one), so this
    module does not import the report module that imports it."""

    @property
    def target(self) -> Target:
        """The master that was checked."""
        ...

    @property
    def results(self) -> list[Result]:
        """Every case's result."""
        ...

    @property
    def started_at(self) -> dt.datetime:
        """When the run started."""
        ...

    @property
    def duration_s(self) -> float:
        """How long it took."""
        ...

    @property
    def prerequisites(self) -> dict[str, Prerequisite]:
        """What the probes found, by feature."""
        ...

    @property
    def missing_prerequisites(self) -> list[Prerequisite]:
        """The features found missing."""
        ...

    def relying_on(self, feature: str) -> list[Result]:
        """The cases that relied on ``feature``."""
        ...

    def counts(self, results: Iterable[Result] | None = None) -> dict[str, int]:
        """How many results have each status."""
        ...


_CSS: Final = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:80rem;padding:0 1rem;
color:#1b1b1b;background:#fff}
h1{font-size:1.5rem}h2{font-size:1.2rem;margin-top:2rem;border-bottom:1px solid #ddd}
h3{font-size:1rem;margin:0}
table{border-collapse:collapse;width:100%;margin:.5rem 0}
th,td{border:1px solid #ddd;padding:.25rem .5rem;text-align:left;vertical-align:top}
th{background:#f4f4f4}
td.n{text-align:right;font-variant-numeric:tabular-nums}
.PASS{color:#11672b}.FAIL{color:#b00020;font-weight:600}.WARN{color:#9a5b00;font-weight:600}
.SKIP{color:#555}
.badge{display:inline-block;padding:0 .4rem;border-radius:.25rem;border:1px solid currentColor}
.verdict{padding:.5rem 1rem;border-radius:.25rem;background:#f4f4f4}
.case{border:1px solid #ddd;border-radius:.25rem;padding:.75rem 1rem;margin:1rem 0}
pre{white-space:pre-wrap;word-break:break-word;margin:0;font:12px/1.35 ui-monospace,monospace}
blockquote{margin:.5rem 0;padding:.25rem .75rem;border-left:3px solid #bbb;background:#fafafa}
.t td{font:12px/1.35 ui-monospace,monospace}
.send td.k{color:#0b4f9c}.recv td.k{color:#11672b}.close td.k,.refused td.k{color:#b00020}
.http td.k{color:#6a3d9a}.note td.k{color:#555}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.15rem 1rem;margin:.5rem 0}
dt{font-weight:600}dd{margin:0}
"""

_ARROWS: Final = {"send": "→", "recv": "←", "open": "⇄", "close": "✕", "refused": "✕"}


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def anchor(case_id: str) -> str:
    """The HTML id of a case's section (letters, digits and dashes only)."""
    return "case-" + re.sub(r"[^a-z0-9]+", "-", case_id.lower()).strip("-")


def _status(status: str) -> str:
    return f'<span class="badge {_e(status)}">{_e(status)}</span>'


def _transcript(transcript: Transcript) -> str:
    if not transcript.events:
        return "<p>No wire traffic was recorded.</p>"
    rows = []
    for event in transcript.events:
        extra = []
        if event.close_code is not None:
            extra.append(f"close {event.close_code}")
        if event.http_status is not None:
            extra.append(f"HTTP {event.http_status}")
        arrow = _ARROWS.get(event.kind, "")
        rows.append(
            f'<tr class="{_e(event.kind)}"><td class="n">{event.t_ms:.1f}</td>'
            f"<td>{_e(event.at)}</td><td>{_e(event.who)}</td>"
            f'<td class="k">{_e(arrow)} {_e(event.kind)}</td>'
            f"<td>{_e(' · '.join(extra))}</td><td><pre>{_e(event.text)}</pre></td></tr>"
        )
    return (
        '<table class="t"><thead><tr><th>ms</th><th>time (UTC)</th><th>who</th><th>event</th>'
        "<th>code</th><th>message</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _case_section(result: Result) -> str:
    c = result.case
    spec = section_text(c.section)
    relies = []
    if c.checks:
        relies.append(f"checks feature {_e(c.checks)}")
    if c.needs:
        relies.append("needs " + _e(", ".join(c.needs)))
    if c.uses:
        relies.append("uses (with a fallback) " + _e(", ".join(c.uses)))
    missing = f"<dt>missing</dt><dd>{_e(', '.join(result.missing))}</dd>" if result.missing else ""
    expected = "<dt>listed</dt><dd>expected failure</dd>" if result.expected_failure else ""
    return (
        f'<section class="case" id="{anchor(c.id)}">'
        f"<h3>{_status(result.status)} <code>{_e(c.id)}</code></h3>"
        f"<dl><dt>rule</dt><dd>{_e(c.level)} — {_e(c.description)}</dd>"
        f"<dt>spec</dt><dd>{_e(c.spec)}</dd>"
        f"<dt>details</dt><dd><pre>{_e(result.details or '—')}</pre></dd>"
        f"<dt>kill</dt><dd>{_e(c.kill)}</dd>"
        f"<dt>relies on</dt><dd>{'; '.join(relies) or 'nothing beyond the rule'}</dd>"
        f"{missing}{expected}"
        f"<dt>duration</dt><dd>{result.duration_s:.3f} s</dd></dl>"
        f"<h4>Spec text ({_e(c.spec)})</h4>"
        f"<blockquote><pre>{_e(spec or 'not found in the bundled specs')}</pre></blockquote>"
        f"<h4>Wire transcript</h4>{_transcript(result.transcript)}"
        '<p><a href="#top">back to the summary</a></p></section>'
    )


def _sections_table(report: RenderedReport) -> str:
    sections: dict[str, list[Result]] = {}
    for result in report.results:
        sections.setdefault(result.case.spec, []).append(result)
    parts = []
    for spec, results in sections.items():
        counts = report.counts(results)
        tally = " · ".join(f'<span class="{s}">{counts[s]} {s}</span>' for s in STATUSES)
        noun = "case" if len(results) == 1 else "cases"
        rows = []
        for r in results:
            name = _e(r.case.id)
            link = f'<a href="#{anchor(r.case.id)}">{name}</a>' if r.status != "PASS" else name
            rows.append(
                f"<tr><td>{_status(r.status)}</td><td><code>{link}</code></td>"
                f"<td>{_e(r.case.level)}</td><td>{_e(r.case.description)}</td>"
                f"<td>{_e(r.details) if r.status != 'PASS' else ''}</td></tr>"
            )
        parts.append(
            f"<h3>{_e(spec)}: {len(results)} {noun} — {tally}</h3>"
            "<table><thead><tr><th>status</th><th>case</th><th>level</th><th>rule</th>"
            "<th>details</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        )
    return "".join(parts)


def _prerequisites(report: RenderedReport) -> str:
    missing = report.missing_prerequisites
    if not missing:
        probed = ", ".join(_e(name) for name in report.prerequisites) or "none"
        return f"<p>None: every feature the cases rely on is present (probed: {probed}).</p>"
    parts = []
    for item in missing:
        f = item.feature
        cases = "".join(
            f'<li><a href="#{anchor(r.case.id)}"><code>{_e(r.case.id)}</code></a> '
            f"{_status(r.status)}</li>"
            if r.status != "PASS"
            else f"<li><code>{_e(r.case.id)}</code> {_status(r.status)} (by fallback)</li>"
            for r in report.relying_on(f.name)
        )
        parts.append(
            f'<section class="case"><h3><code>{_e(f.name)}</code> — {_e(f.description)}</h3>'
            f"<dl><dt>spec</dt><dd>{_e(f.spec)}</dd><dt>probe found</dt>"
            f"<dd><pre>{_e(item.details)}</pre></dd></dl>"
            f"<p>Cases that relied on it:</p><ul>{cases or '<li>none</li>'}</ul>"
            f"<details><summary>Probe transcript</summary>{_transcript(item.transcript)}"
            "</details></section>"
        )
    return "".join(parts)


def render(report: RenderedReport) -> str:
    """The whole report as one HTML document."""
    counts = report.counts()
    said = verdict(report.results)
    tone = "FAIL" if said.startswith("FAILED") else "WARN" if "SKIPPED" in said else "PASS"
    totals = " · ".join(f'<span class="{s}">{counts[s]} {s}</span>' for s in STATUSES)
    started = report.started_at.isoformat().replace("+00:00", "Z")
    not_passing = [r for r in report.results if r.status != "PASS"]
    cases = "".join(_case_section(r) for r in not_passing) or "<p>Every case passed.</p>"
    return (
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        "<title>RAWP conformance report</title>"
        f"<style>{_CSS}</style></head><body>"
        '<h1 id="top">RAWP conformance report</h1>'
        f"<dl><dt>master</dt><dd><code>{_e(report.target.ws_url)}</code> · "
        f"<code>{_e(report.target.http_url)}</code></dd>"
        f"<dt>started</dt><dd>{_e(started)} ({report.duration_s:.1f} s)</dd>"
        f"<dt>cases</dt><dd>{len(report.results)}: {totals}</dd></dl>"
        f'<p class="verdict {tone}">{_e(said)}</p>'
        f"<h2>Missing prerequisites</h2>{_prerequisites(report)}"
        f"<h2>Results by section</h2>{_sections_table(report)}"
        f"<h2>Cases that did not pass</h2>{cases}"
        "</body></html>\n"
    )
