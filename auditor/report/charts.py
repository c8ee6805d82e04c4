"""Charts for the report: matplotlib figures written as SVG, and the sanitiser that inlines them.

Plugins draw inside :func:`chart` and store :func:`svg_artifact` in their results; the HTML renderer
inlines an ``image/svg+xml`` artifact only after :func:`sanitize_svg` has rebuilt it from an
allowlist of the elements and attributes matplotlib writes (no scripts, no event handlers, no
external references). matplotlib runs on its Agg canvas with its bundled DejaVu fonts, so nothing
is fetched and no display is needed; text stays text (``svg.fonttype: none``) and ids are salted
with a constant so the same figure gives the same bytes.
"""

from __future__ import annotations

import io
import re
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from markupsafe import Markup, escape

from auditor.report.model import Artifact

SVG_MEDIA_TYPE = "image/svg+xml"

#: One colour per series, colour-blind safe (Okabe-Ito), in a fixed order.
CHART_COLOURS = ("#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442")

_RC = {
    "svg.fonttype": "none",
    "svg.hashsalt": "auditor",
    "font.family": "sans-serif",
    "font.size": 9.0,
    "axes.titlesize": 10.0,
    "axes.grid": True,
    "grid.color": "#d9dde3",
    "grid.linewidth": 0.6,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.frameon": False,
    "legend.fontsize": 8.0,
}

_SVG_NS = "{http://www.w3.org/2000/svg}"
_XLINK_HREF = "{http://www.w3.org/1999/xlink}href"
_ELEMENTS = frozenset(
    "svg g path defs clipPath use text tspan rect circle ellipse line polyline polygon title desc".split()
)
_ATTRIBUTES = frozenset(
    """id class d x y x1 y1 x2 y2 dx dy cx cy r rx ry width height viewBox transform style fill stroke
    stroke-width stroke-linecap stroke-linejoin stroke-dasharray stroke-opacity fill-opacity opacity
    clip-path points font-family font-size font-weight font-style text-anchor dominant-baseline
    preserveAspectRatio version""".split()
)
_LOCAL_REF = re.compile(r"^#[A-Za-z0-9_.-]+$")
_UNSAFE_VALUE = re.compile(r"url\((?!#[A-Za-z0-9_.-]+\))|expression|javascript:|@import|\\", re.IGNORECASE)


@contextmanager
def chart(width_in: float = 6.4, height_in: float = 3.4) -> Iterator[Any]:
    """Yield a matplotlib ``Figure`` on the Agg canvas with the report's style applied (no pyplot state).

    Draw and call :func:`figure_svg` inside the ``with`` block: matplotlib reads the style while drawing.
    """
    import matplotlib
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    with matplotlib.rc_context(_RC):
        fig = Figure(figsize=(width_in, height_in), layout="constrained")
        FigureCanvasAgg(fig)
        yield fig


def figure_svg(fig: Any) -> str:
    """Return the figure as SVG text (deterministic: fixed id salt, no date in the metadata)."""
    buf = io.StringIO()
    fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None})
    return buf.getvalue()


def svg_artifact(svg: str, name: str, description: str) -> Artifact:
    """Return SVG text from :func:`figure_svg` as an ``image/svg+xml`` artifact (SVG in ``text``)."""
    return Artifact(name=name, media_type=SVG_MEDIA_TYPE, description=description, text=svg)


def sanitize_svg(text: str, label: str = "", prefix: str = "svg") -> Markup | None:
    """Return SVG rebuilt from the allowlist, safe to inline in HTML, or None if it does not parse.

    Every element and attribute outside the allowlist is dropped with its content (``script``,
    ``style``, ``foreignObject``, ``on*`` handlers, ``metadata``); references must point inside the
    document (``#id``); DTDs and entities are refused. ``label`` becomes the chart's accessible name;
    ``prefix`` (``[A-Za-z0-9-]``) is put before every id and reference, so charts on one page never
    share ids (matplotlib derives them from the content).
    """
    if "<!ENTITY" in text or "<!entity" in text.lower():
        return None
    body = re.sub(r"<!DOCTYPE[^>\[]*>", "", text, count=1)
    try:
        root = ET.fromstring(body)
    except ET.ParseError:
        return None
    if _local(root.tag) != "svg":
        return None
    out: list[str] = []
    _write(root, out, re.sub(r"[^A-Za-z0-9-]", "-", prefix), top=True, label=label)
    return Markup("".join(out))


def _local(tag: Any) -> str:
    if not isinstance(tag, str):
        return ""
    return tag[len(_SVG_NS):] if tag.startswith(_SVG_NS) else ("" if tag.startswith("{") else tag)


def _write(node: ET.Element, out: list[str], prefix: str, *, top: bool = False, label: str = "") -> None:
    tag = _local(node.tag)
    if tag not in _ELEMENTS:
        return
    attrs: list[str] = []
    for key, value in node.attrib.items():
        if key == _XLINK_HREF or key == "href":
            if _LOCAL_REF.match(value):
                attrs.append(f' href="#{prefix}-{escape(value[1:])}"')
            continue
        if key not in _ATTRIBUTES or _UNSAFE_VALUE.search(value):
            continue
        if key == "id":
            value = f"{prefix}-{value}"
        value = value.replace("url(#", f"url(#{prefix}-")
        if top and key in ("width", "height"):
            continue  # sized by CSS from the viewBox, so charts shrink with the page
        attrs.append(f' {key}="{escape(value)}"')
    if top:
        attrs.append(' role="img"' + (f' aria-label="{escape(label)}"' if label else ""))
    out.append(f"<{tag}{''.join(attrs)}>")
    if node.text and tag in ("text", "tspan", "title", "desc"):
        out.append(str(escape(node.text)))
    for child in node:
        _write(child, out, prefix)
        if child.tail and tag in ("text", "tspan"):
            out.append(str(escape(child.tail)))
    out.append(f"</{tag}>")
