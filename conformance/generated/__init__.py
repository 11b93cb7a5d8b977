"""Generated conformance: random sessions judged against a reference model (``--generate N``).

:mod:`.steps` is a session's vocabulary (what one participant does, one step at a time) and
the seeded generator that draws sessions from it; :mod:`.model` says what a master must do
for each step, built on the sans-I/O state machine (``protocol.state``, ``protocol.finalize``,
``protocol.buffers``); :mod:`.drive` plays a session against a master and compares it
exchange by exchange; :mod:`.shrink` makes a failing session minimal; :mod:`.run` runs N
sessions and turns them into the runner's results.
"""

__all__: list[str] = []
