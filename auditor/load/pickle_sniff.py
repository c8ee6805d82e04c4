"""Tell a pickle without a protocol header from a file whose first bytes only happen to be opcodes.

Protocol 0 and 1 pickles start with no magic bytes, and almost any byte is an opcode: ``G`` reads
eight bytes as a float, so a README titled ``Git v2.31.7 Release Notes`` replays as a one-value
pickle that stops at its ninth byte. A stream counts as a pickle only when a loader would read it
as one: its pickles replay back to back up to the end of the file (``pickle.dump``), it opens
with torch's legacy magic number (``torch.load`` reads on, and the static check judges every
pickle after it, a malformed one included), or one of them imports, calls, builds or modifies
something (the unpickler would run that much, whatever follows). Any other constant pickle
followed by bytes that are no pickle (text) is not one: ``pickle.load`` reads the constant and
stops, ``torch.load`` refuses the magic number, so nothing in it runs.
"""

from __future__ import annotations

import re
from typing import BinaryIO

from auditor.load.pickle_replay import _NeedMore, _Replay

#: The windows a stream is replayed in, smallest first: an opcode reaching past one widens it; a stream
#: still well formed past the last counts as a pickle.
SNIFF_WINDOWS = (1 << 20, 8 << 20, 64 << 20)
#: Pickles replayed back to back: torch's legacy layout holds five (magic number, protocol, system
#: info, the object, its storage keys); the static check scans as many.
MAX_SNIFFED_PICKLES = 5
#: ``torch.serialization.MAGIC_NUMBER``: the first pickle of every legacy (non-zip) ``torch.save`` file.
TORCH_LEGACY_MAGIC = 0x1950A86A20F9469CFC6C
_TEXT_LONG = re.compile(rb"L(\d{1,40})L?\n\.")  # a protocol 0/1 LONG and STOP: how the magic number is written


def runs_as_pickle(fh: BinaryIO) -> bool:
    """Tell whether a loader handed the stream at ``fh`` would read it as pickles (``fh`` is left where it was).

    True when the stream's pickles replay to its end, when it opens with torch's legacy magic
    number, when one of them imports, calls, builds or modifies something (even if the stream
    breaks after it), or when it is still well formed past the last of :data:`SNIFF_WINDOWS`.
    False for everything else, whatever its first bytes: a text file, JSON, a ``requirements.txt``
    whose letters happen to be opcodes, a stray constant followed by prose, a text whose first
    letters declare a string longer than the file (``This`` reads as a 544 MB ``BINSTRING``).
    """
    start = fh.tell()
    for window in SNIFF_WINDOWS:
        data = fh.read(window)
        fh.seek(start)
        verdict = pickle_verdict(data, final=len(data) < window)
        if verdict is not None:
            return verdict
    return True  # still well formed where the last window ends


def pickle_verdict(data: bytes, *, final: bool) -> bool | None:
    """Judge the stream that starts with ``data`` (all of it when ``final``); None: it runs past ``data``.

    Up to :data:`MAX_SNIFFED_PICKLES` pickles are replayed back to back.
    """
    offset = 0
    for _ in range(MAX_SNIFFED_PICKLES):
        replay = _Replay(data[offset:], "sniff", offset, final=final)
        try:
            end = replay.run()
        except _NeedMore:
            return None
        verdict = _runs_code(replay)
        if verdict is not None:
            return verdict
        if offset == 0 and _is_torch_magic(data[:end]):
            return True  # torch's legacy layout: torch.load reads every pickle after it
        offset += end
        if offset >= len(data):
            return True if final else None  # the whole stream is pickles, or more may follow
    return True  # as many clean pickles as any loader reads: judged as the pickle stream it is


def _runs_code(replay: _Replay) -> bool | None:
    """True: the replayed pickle makes its unpickler run something; False: it is no pickle; None: a clean constant."""
    scan = replay.scan
    if scan.uses or any(p.opcode not in ("malformed", "resource") for p in scan.problems):
        return True
    if scan.problems or replay.stack or replay.marks:
        return False  # broken (or not one value) before anything ran: no loader reads it as a pickle
    return True if scan.imports else None


def _is_torch_magic(pickle_bytes: bytes) -> bool:
    """Tell whether a constant pickle (no protocol header) is torch's legacy magic number."""
    found = _TEXT_LONG.fullmatch(pickle_bytes)
    return found is not None and int(found.group(1)) == TORCH_LEGACY_MAGIC
