"""Names from a checkpoint that reach generated code: refused when they could break out of it.

torch.fx writes every module, parameter, buffer and attribute name it reaches into the Python
source of the ``forward()`` it generates, as ``self.name`` or ``getattr(self, "name")``, and runs
that source. A name holding a quote, a backslash or anything Python or ``str.splitlines`` treats
as a line break ends the string literal or the line, and what follows runs as code. Such names
are refused on every loaded model, whatever the format; any other name (``stem-conv``,
``block/1``, ``head fc``) is written inside the quotes harmlessly.
"""

from __future__ import annotations

import unicodedata

import torch

#: Characters that end a string literal or a line: quotes, backslash, and str.splitlines' separators.
_BREAKOUT = frozenset("\"'\\\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029")
#: The printable ASCII characters among them (every other ASCII one is a control character, Cc).
_ASCII_BREAKOUT = frozenset("\"'\\")


def name_reason(name: object) -> str | None:
    """Why ``name`` must not reach generated code, or None when it is harmless there."""
    if not isinstance(name, str):
        return f"a name that is a {type(name).__name__}, not a string"
    if name.isascii() and name.isprintable() and not _ASCII_BREAKOUT.intersection(name):
        return None  # the common case, decided without a look-up per character
    for char in name:
        if char in _BREAKOUT or unicodedata.category(char) in ("Cc", "Cs", "Zl", "Zp"):
            return f"the name {name!r} holds {char!r}, which ends a string literal or a line of generated code"
    return None


def unsafe_name(model: torch.nn.Module) -> tuple[str, str] | None:
    """The first (owner path, reason) of a name in ``model`` that could break out of generated code.

    Every module's submodule, parameter and buffer keys and every attribute name are checked.
    """
    for path, module in model.named_modules(remove_duplicate=False):
        state = vars(module)
        for table in ("_modules", "_parameters", "_buffers"):
            entries = state.get(table)
            for key in entries.keys() if entries is not None else ():  # a ScriptModule's tables iterate oddly
                reason = name_reason(key)
                if reason is not None:
                    return path, reason
        for key in state:
            reason = name_reason(key)
            if reason is not None:
                return path, reason
    return None
