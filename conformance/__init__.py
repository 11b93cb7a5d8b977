"""Black-box conformance runner: checks any RAWP master against RAWP 1.0.2 §7 and rawp-notes.

``rawp conformance`` (:mod:`.cli`) runs the registered cases (:mod:`.case`, :mod:`.cases`) with
:mod:`.runner` over plain WebSocket and HTTP peers (:mod:`.peer`, :mod:`.wire`), probing the
features cases rely on once per run (:mod:`.probes`), records each case's wire exchange
(:mod:`.transcript`) and reports them (:mod:`.report`, :mod:`.html_report` with the spec text of
:mod:`.spec_text`). Nothing here imports the relay: a master is judged by the wire alone.
See docs/conformance.md.
"""

__all__: list[str] = []
