"""The case modules, one per spec section; importing this package registers every case.

RAWP 1.0.2 §7: :mod:`.s7_1_history`, :mod:`.s7_3_usage`, :mod:`.s7_4_errors`,
:mod:`.s7_5_turns`, :mod:`.s7_6_rename`, :mod:`.s7_7_delete`, :mod:`.s7_8_recovery`.
rawp-notes: :mod:`.handshake` (§2, §5, §14), :mod:`.envelope` (§3), :mod:`.buffers` (§7, §15.4–5),
:mod:`.state_machine` (§6, §15.11), :mod:`.http_api` (§10),
:mod:`.acks` (§16.3–4), :mod:`.archive` (§16.1), :mod:`.trust` (§11, §16.6–9),
:mod:`.runs` (§17.3, one run at a time).
:mod:`.common` holds the scenarios several modules share.
"""

from . import (  # noqa: F401
    acks,
    archive,
    buffers,
    envelope,
    handshake,
    http_api,
    runs,
    s7_1_history,
    s7_3_usage,
    s7_4_errors,
    s7_5_turns,
    s7_6_rename,
    s7_7_delete,
    s7_8_recovery,
    state_machine,
    trust,
)

__all__: list[str] = []
