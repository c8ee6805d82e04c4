"""Escape untrusted strings (module names, paths, messages quoting a checkpoint) for where they land.

A checkpoint chooses its module, parameter and file names, and those reach every report. Each
format gets the escape its reader needs: Markdown (pull-request comments, ``$GITHUB_STEP_SUMMARY``)
must show links, images, HTML, emphasis, table pipes and autolinks as text; SARIF message text
must not form embedded links; a terminal must not obey control sequences or rich markup. HTML is
escaped by the template engine's autoescape.
"""

from __future__ import annotations

import re

from rich.markup import escape as _rich_escape

#: Controls, line and paragraph separators, and the invisible/bidirectional characters that reorder text.
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]")
#: The marks that open a Markdown construct anywhere in a line: emphasis, code, links and images,
#: raw HTML, entities, table cells, strikethrough, headings, math.
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>!|&~#$])")
#: What GitHub turns into a link or a mention with no special mark at all.
_MD_AUTOLINK = re.compile(r"(?i)\b(www|https?|ftp|mailto|file|data|javascript)([.:])")
_JOINER = "\u2060"  # WORD JOINER: invisible, and stops the autolink and mention matchers
_SARIF_LINK = re.compile(r"([\\\[\]])")


def _visible(text: str) -> str:
    """``text`` with every unprintable character shown as a ``\\xNN``/``\\uNNNN`` escape."""
    return _UNPRINTABLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100
                            else f"\\u{ord(m.group()):04x}", text)


def terminal_plain(text: object) -> str:
    """``text`` for a terminal printed with ``markup=False``: control and bidi characters shown as escapes."""
    return _visible(str(text))


def terminal_markup(text: object) -> str:
    """``text`` for a rich markup string: controls shown as escapes, ``[`` not read as a tag."""
    return _rich_escape(terminal_plain(text))


def md_text(text: object) -> str:
    """``text`` as literal Markdown on one line: no link, image, HTML, emphasis, autolink or mention survives.

    Every mark that opens a construct is backslash-escaped (CommonMark shows an escaped mark as
    itself); line breaks and controls become visible escapes; a word joiner splits ``www.``,
    ``https:`` and ``@`` so GitHub's autolinker and mention parser see no link or user.
    """
    value = _MD_SPECIAL.sub(r"\\\1", terminal_plain(text))
    value = _MD_AUTOLINK.sub(lambda m: m.group(1) + _JOINER + m.group(2), value)
    return value.replace("@", "@" + _JOINER)


def md_code(text: object) -> str:
    """``text`` for inside a one-backtick code span of a table cell: no backtick, pipe or line break."""
    return terminal_plain(text).replace("`", "'").replace("|", "\\|")


def sarif_message(text: object) -> str:
    """``text`` for a SARIF ``message.text``: brackets and backslashes escaped so no embedded link forms.

    SARIF renders ``[text](target)`` in plain-text messages as a link; escaped brackets are literal.
    """
    return _SARIF_LINK.sub(r"\\\1", _visible(str(text)))
