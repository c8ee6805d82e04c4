"""PNG charts drawn with PIL: the leakage curve and the defence curve (the grid is auditor.plugin's)."""

from __future__ import annotations

from PIL import Image, ImageDraw

COLOURS = [(31, 119, 180), (214, 39, 40), (44, 160, 44), (148, 103, 189), (255, 127, 14), (23, 190, 207)]


def line_chart(title: str, xlabels: list[str], series: dict[str, tuple[list[float], list[float]]],
               floor: float, ylabel: str, size: tuple[int, int] = (640, 320)) -> Image.Image:
    """Draw mean ± SD lines over categorical x positions with a dashed floor line."""
    w, h = size
    left, right, top, bottom = 60, 150, 30, 70
    values = [v for m, s in series.values() for v, d in zip(m, s) for v in (v - d, v + d)] + [floor]
    lo, hi = min(values), max(values)
    lo, hi = (lo - 1, hi + 1) if hi - lo < 1e-6 else (lo - 0.05 * (hi - lo), hi + 0.05 * (hi - lo))
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    draw.text((left, 8), title, fill="black")
    draw.rectangle((left, top, w - right, h - bottom), outline="black")
    n = max(1, len(xlabels) - 1)

    def px(i: int, v: float) -> tuple[float, float]:
        return (left + (w - right - left) * i / n, h - bottom - (h - bottom - top) * (v - lo) / (hi - lo))

    for frac in (0, 0.5, 1):
        v = lo + frac * (hi - lo)
        draw.text((4, px(0, v)[1] - 6), f"{v:.2f}", fill="black")
    draw.text((4, top - 14), ylabel, fill="black")
    for i, label in enumerate(xlabels):
        x = px(i, lo)[0]
        draw.line((x, h - bottom, x, h - bottom + 4), fill="black")
        draw.text((x - 20, h - bottom + 6 + 12 * (i % 3)), label[:14], fill="black")
    y_floor = px(0, floor)[1]
    for x0 in range(left, w - right, 12):
        draw.line((x0, y_floor, min(x0 + 6, w - right), y_floor), fill=(120, 120, 120))
    draw.text((w - right + 6, y_floor - 6), "floor (mean image)", fill=(120, 120, 120))
    for k, (name, (means, sds)) in enumerate(series.items()):
        col = COLOURS[k % len(COLOURS)]
        pts = [px(i, v) for i, v in enumerate(means)]
        if len(pts) > 1:
            draw.line(pts, fill=col, width=2)
        for i, (v, d) in enumerate(zip(means, sds)):
            x, _ = px(i, v)
            draw.line((x, px(i, v - d)[1], x, px(i, v + d)[1]), fill=col)
            draw.ellipse((x - 3, px(i, v)[1] - 3, x + 3, px(i, v)[1] + 3), fill=col)
        draw.text((w - right + 6, top + 14 * k), name, fill=col)
    return img


def defence_chart(rows: list[dict], floor_psnr: float) -> Image.Image:
    """Plot utility against leakage (best-attack PSNR) for each noise kind, points labelled by σ."""
    kinds = sorted({r["kind"] for r in rows})
    series = {}
    for kind in kinds:
        pts = sorted((r for r in rows if r["kind"] == kind), key=lambda r: r["sigma"])
        series[kind] = pts
    w, h, left, right, top, bottom = 640, 320, 60, 150, 30, 50
    xs = [r["psnr"] for r in rows] + [floor_psnr]
    lo_x, hi_x = min(xs) - 1, max(xs) + 1
    img = Image.new("RGB", (w, h), "white")
    draw = ImageDraw.Draw(img)
    draw.text((left, 8), "Noise at the split: utility vs leakage (PSNR of the best attack)", fill="black")
    draw.rectangle((left, top, w - right, h - bottom), outline="black")

    def px(x: float, y: float) -> tuple[float, float]:
        return (left + (w - right - left) * (x - lo_x) / (hi_x - lo_x), h - bottom - (h - bottom - top) * y)

    for y in (0, 0.5, 1):
        draw.text((20, px(lo_x, y)[1] - 6), f"{y:.1f}", fill="black")
    draw.text((left, h - bottom + 20), f"PSNR dB ({lo_x:.1f} .. {hi_x:.1f}); dashed: floor", fill="black")
    fx = px(floor_psnr, 0)[0]
    for y0 in range(top, h - bottom, 12):
        draw.line((fx, y0, fx, min(y0 + 6, h - bottom)), fill=(120, 120, 120))
    for k, (kind, pts) in enumerate(series.items()):
        col = COLOURS[k % len(COLOURS)]
        coords = [px(r["psnr"], r["utility"]) for r in pts]
        if len(coords) > 1:
            draw.line(coords, fill=col, width=2)
        for (x, y), r in zip(coords, pts):
            draw.ellipse((x - 3, y - 3, x + 3, y + 3), fill=col)
            draw.text((x + 4, y - 12), f"{r['sigma']:g}", fill=col)
        draw.text((w - right + 6, top + 14 * k), kind, fill=col)
    return img
