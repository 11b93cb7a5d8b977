"""Reporting a conformance run: live progress, summary table, JSON, JUnit XML, HTML.

Every case result carries its id, level (MUST / SHOULD, RAWP 1.0.2 §7 and rawp-notes), status
(PASS / FAIL / WARN / SKIP), the spec reference its id cites, details and duration. The run
exits 1 when a MUST failed that is not listed in the expected-failures file; an expected
failure that now passes is *stale* and reported (it does not change the exit code). Every
case that did not pass carries its wire transcript; the features the run found missing are
listed with the probe that found them (and its transcript) and the cases that relied on them.
"""

from __future__ import annotations

import datetime as dt
import json
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, TextIO

from protocol.names import text_body

from .runner import STATUSES, Prerequisite, Result, Target, verdict

__all__ = [
    "FORMAT_VERSION",
    "Progress",
    "Report",
    "read_expected_failures",
]

FORMAT_VERSION: Final = 2
"""Version of the JSON report layout."""


def read_expected_failures(path: str | Path) -> frozenset[str]:
    """Case ids, one per line; ``#`` starts a comment; blank lines are ignored."""
    ids: set[str] = set()
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        text = line.split("#", 1)[0].strip()
        if text:
            ids.add(text)
    return frozenset(ids)


class Progress:
    """Prints one line per finished case (and its details when it did not pass)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def __call__(self, index: int, total: int, result: Result) -> None:
        width = len(str(total))
        status = result.status + ("*" if result.expected_failure else "")
        line = (
            f"[{index:>{width}}/{total}] {status:<5} {result.case.id}  "
            f"({result.case.level}, {result.duration_s:.2f}s)"
        )
        print(line, file=self.stream, flush=True)
        if result.status != "PASS" and result.details:
            print(f"{'':>{2 * width + 4}}{result.details}", file=self.stream, flush=True)


@dataclass
class Report:
    """One finished run."""

    target: Target
    results: list[Result]
    started_at: dt.datetime
    duration_s: float
    expected_failures: frozenset[str] = frozenset()
    registered: frozenset[str] = field(default_factory=frozenset)
    prerequisites: dict[str, Prerequisite] = field(default_factory=dict)

    @property
    def missing_prerequisites(self) -> list[Prerequisite]:
        """The features the run's probes found missing."""
        return [p for p in self.prerequisites.values() if not p.present]

    def relying_on(self, feature: str) -> list[Result]:
        """The cases that relied on ``feature`` (skipped for it or fell back)."""
        return [r for r in self.results if feature in r.missing]

    # --- verdict ---------------------------------------------------------------------------

    @property
    def exit_code(self) -> int:
        """1 when a MUST failed and is not an expected failure, else 0."""
        return 1 if any(r.blocking for r in self.results) else 0

    @property
    def stale(self) -> list[str]:
        """Expected failures that passed."""
        return [r.case.id for r in self.results if r.stale]

    @property
    def unknown_expected(self) -> list[str]:
        """Ids in the expected-failures file that name no registered case."""
        return sorted(self.expected_failures - self.registered)

    def counts(self, results: Iterable[Result] | None = None) -> dict[str, int]:
        """Results per status."""
        counts: dict[str, int] = dict.fromkeys(STATUSES, 0)
        for result in self.results if results is None else results:
            counts[result.status] += 1
        return counts

    # --- text ------------------------------------------------------------------------------

    def summary(self) -> str:
        """The summary table: per section, per status; then what did not pass."""
        lines: list[str] = []
        sections: dict[str, list[Result]] = {}
        for result in self.results:
            sections.setdefault(result.case.spec, []).append(result)
        width = max([len("section"), *(len(s) for s in sections)])
        header = f"{'section':<{width}}  cases  " + "  ".join(f"{s:>4}" for s in STATUSES)
        lines += [header, "-" * len(header)]
        for spec, results in sections.items():
            counts = self.counts(results)
            cells = "  ".join(f"{counts[s]:>4}" for s in STATUSES)
            lines.append(f"{spec:<{width}}  {len(results):>5}  {cells}")
        lines.append("-" * len(header))
        counts = self.counts()
        cells = "  ".join(f"{counts[s]:>4}" for s in STATUSES)
        lines.append(f"{'total':<{width}}  {len(self.results):>5}  {cells}")
        lines += ["", *self.by_level()]
        failing = [r for r in self.results if r.status in ("FAIL", "WARN")]
        if failing:
            lines += ["", "Not passing:"]
            for r in failing:
                mark = " (expected failure)" if r.expected_failure else ""
                lines.append(f"  {r.status} {r.case.level:<6} {r.case.id}{mark}: {r.details}")
        if self.missing_prerequisites:
            lines += ["", "Missing prerequisites (features this master lacks):"]
            for missing in self.missing_prerequisites:
                f = missing.feature
                lines.append(f"  {f.name} ({f.spec}: {f.description}): {missing.details}")
                for r in self.relying_on(f.name):
                    how = "skipped" if r.status == "SKIP" else f"fell back, {r.status}"
                    lines.append(f"    {r.case.id}: {how}")
        skipped = [r for r in self.results if r.status == "SKIP"]
        if skipped:
            lines += ["", "Skipped (not checked):"]
            lines += [f"  {r.case.level:<6} {r.case.id}: {r.details}" for r in skipped]
            lines += self.settings_for_skipped()
        if self.stale:
            lines += ["", "Stale expected failures (now passing; remove them from the file):"]
            lines += [f"  {case_id}" for case_id in self.stale]
        if self.unknown_expected:
            lines += ["", "Expected failures that name no case:"]
            lines += [f"  {case_id}" for case_id in self.unknown_expected]
        lines += ["", f"{verdict(self.results)} — {self.duration_s:.1f}s"]
        return "\n".join(lines)

    def by_level(self) -> list[str]:
        """PASS / FAIL / WARN / SKIP counted per level (MUST, SHOULD)."""
        lines = ["By level:"]
        for level in ("MUST", "SHOULD"):
            results = [r for r in self.results if r.case.level == level]
            if results:
                counts = self.counts(results)
                cells = ", ".join(f"{counts[s]} {s}" for s in STATUSES if counts[s] or s != "WARN")
                lines.append(f"  {level:<6} {len(results):>5} cases: {cells}")
        return lines

    def settings_for_skipped(self) -> list[str]:
        """The settings that would run the skipped cases, each with the cases it would run."""
        wanted: dict[str, list[str]] = {}
        for r in self.results:
            if r.status != "SKIP":
                continue
            if r.setting:
                wanted.setdefault(r.setting, []).append(r.case.id)
            for feature in r.missing:
                wanted.setdefault(f"a master that offers {feature}", []).append(r.case.id)
        if not wanted:
            return []
        lines = ["", "Settings that would run the skipped cases:"]
        for setting, ids in wanted.items():
            lines.append(f"  {setting}: {', '.join(ids)}")
        return lines

    # --- JSON ------------------------------------------------------------------------------

    def to_json(self) -> dict[str, Any]:
        """The machine-readable report (see docs/conformance.md)."""
        return {
            "format_version": FORMAT_VERSION,
            "tool": "rawp conformance",
            "target": {"ws_url": self.target.ws_url, "http_url": self.target.http_url},
            "started_at": self.started_at.isoformat().replace("+00:00", "Z"),
            "duration_s": round(self.duration_s, 3),
            "exit_code": self.exit_code,
            "summary": {
                **self.counts(),
                "by_level": {
                    level: self.counts([r for r in self.results if r.case.level == level])
                    for level in ("MUST", "SHOULD")
                },
                "total": len(self.results),
                "must_failures": sum(1 for r in self.results if r.blocking),
                "must_skipped": sum(
                    1 for r in self.results if r.status == "SKIP" and r.case.level == "MUST"
                ),
                "expected_failures": sum(
                    1 for r in self.results if r.expected_failure and r.status != "PASS"
                ),
            },
            "stale_expected_failures": self.stale,
            "unknown_expected_failures": self.unknown_expected,
            "missing_prerequisites": [p.feature.name for p in self.missing_prerequisites],
            "prerequisites": [
                {
                    "feature": p.feature.name,
                    "spec": p.feature.spec,
                    "description": p.feature.description,
                    "present": p.present,
                    "details": p.details,
                    "relied_on_by": [r.case.id for r in self.relying_on(p.feature.name)],
                    **({} if p.present else {"transcript": p.transcript.to_json()}),
                }
                for p in self.prerequisites.values()
            ],
            "cases": [_case_json(r) for r in self.results],
        }

    def write_html(self, path: str | Path) -> None:
        """Write the self-contained HTML report (:mod:`.html_report`) to ``path``."""
        from .html_report import render

        Path(path).write_text(render(self), encoding="utf-8")

    def write_json(self, path: str | Path) -> None:
        """Write :meth:`to_json` to ``path``."""
        text = json.dumps(self.to_json(), indent=2, ensure_ascii=False)
        Path(path).write_text(text + "\n", encoding="utf-8")

    # --- JUnit -----------------------------------------------------------------------------

    def to_junit(self) -> ET.ElementTree[ET.Element]:
        """JUnit XML: one testcase per case; FAIL → failure, SKIP and expected failures → skipped.

        WARN (a SHOULD that failed) is not a JUnit failure: it is reported in the testcase's
        ``system-out`` and in a ``level``/``status`` property pair. Every case that did not
        pass has its wire transcript in ``system-out``.
        """
        counts = self.counts()
        failures = sum(1 for r in self.results if r.blocking)
        skipped = sum(
            1 for r in self.results if r.status == "SKIP" or (r.status == "FAIL" and not r.blocking)
        )
        suite = ET.Element(
            "testsuite",
            {
                "name": "rawp-conformance",
                "tests": str(len(self.results)),
                "failures": str(failures),
                "errors": "0",
                "skipped": str(skipped),
                "time": f"{self.duration_s:.3f}",
                "timestamp": self.started_at.isoformat(),
            },
        )
        properties = ET.SubElement(suite, "properties")
        for name, value in (
            ("ws_url", self.target.ws_url),
            ("http_url", self.target.http_url),
            ("warnings", str(counts["WARN"])),
        ):
            ET.SubElement(properties, "property", {"name": name, "value": value})
        for r in self.results:
            testcase = ET.SubElement(
                suite,
                "testcase",
                {
                    "classname": r.case.spec,
                    "name": r.case.id,
                    "time": f"{r.duration_s:.3f}",
                },
            )
            props = ET.SubElement(testcase, "properties")
            ET.SubElement(props, "property", {"name": "level", "value": r.case.level})
            ET.SubElement(props, "property", {"name": "status", "value": r.status})
            if r.status == "FAIL" and r.expected_failure:
                ET.SubElement(testcase, "skipped", {"message": f"expected failure: {r.details}"})
            elif r.status == "FAIL":
                failure = ET.SubElement(testcase, "failure", {"message": r.details})
                failure.text = f"{r.case.level} {r.case.id}: {r.case.description}\n{r.details}"
            elif r.status == "SKIP":
                ET.SubElement(testcase, "skipped", {"message": r.details})
            if r.status != "PASS":
                out = ET.SubElement(testcase, "system-out")
                warn = f"WARN (SHOULD not met): {r.details}\n" if r.status == "WARN" else ""
                # frames as the master sent them: no control character XML cannot hold
                out.text = text_body(f"{warn}wire transcript:\n{r.transcript.to_text()}")
            if r.stale:
                out = ET.SubElement(testcase, "system-err")
                out.text = "stale expected failure: this case passes now"
        return ET.ElementTree(suite)

    def write_junit(self, path: str | Path) -> None:
        """Write :meth:`to_junit` to ``path``."""
        tree = self.to_junit()
        ET.indent(tree)
        tree.write(path, encoding="utf-8", xml_declaration=True)


def _case_json(r: Result) -> dict[str, Any]:
    """One case in the JSON report; the transcript only when it did not pass."""
    out: dict[str, Any] = {
        "id": r.case.id,
        "level": r.case.level,
        "status": r.status,
        "spec": r.case.spec,
        "description": r.case.description,
        "details": r.details,
        "duration_s": round(r.duration_s, 3),
        "expected_failure": r.expected_failure,
        "kill": r.case.kill,
        "checks": r.case.checks,
        "needs": list(r.case.needs),
        "uses": list(r.case.uses),
        "missing_prerequisites": list(r.missing),
    }
    if r.setting:
        out["would_run_with"] = r.setting
    if r.status != "PASS":
        out["transcript"] = r.transcript.to_json()
    return out
