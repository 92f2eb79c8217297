"""Charts drawn with Pillow: line charts, heat maps and bar charts with titled, labelled axes.

matplotlib is not a dependency (assumptions.md T58), so the run's report figures are drawn here.
Every chart is a fixed-size RGB image: a title on top, the y label turned on the left, the x label
below, "nice" ticks (1, 2 or 5 times a power of ten) with light grid lines, and a legend box
inside the plot area. Callers pick the size; nothing here writes files.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import numpy.typing as npt
from PIL import Image, ImageDraw, ImageFont

__all__ = [
    "Series",
    "bar_chart",
    "density_map",
    "font",
    "heat_map",
    "line_chart",
    "nice_ticks",
    "text_width",
]

Colour = tuple[int, int, int]
Font = ImageFont.FreeTypeFont | ImageFont.ImageFont
GRID: Colour = (225, 225, 225)
AXIS: Colour = (60, 60, 60)
TITLE_SIZE, LABEL_SIZE, TICK_SIZE = 20, 16, 13


@lru_cache(maxsize=16)
def font(size: int) -> Font:
    """Pillow's built-in scalable font at ``size`` px (a bitmap font where FreeType is missing)."""
    return ImageFont.load_default(size=size)


def text_width(text: str, size: int) -> int:
    """Width in pixels of ``text`` at ``size``."""
    left, _, right, _ = font(size).getbbox(text)
    return math.ceil(right - left)


def nice_ticks(lo: float, hi: float, count: int = 6) -> list[float]:
    """About ``count`` round tick values covering ``[lo, hi]`` (steps 1, 2 or 5 x 10^k)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], first
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def _fmt(value: float) -> str:
    return f"{value:.4g}"


@dataclass
class Series:
    """One line of a `line_chart`: ``x`` and ``y`` of equal length, drawn in ``colour``;
    ``label`` None leaves it out of the legend."""

    x: Sequence[float] | npt.NDArray[np.float64]
    y: Sequence[float] | npt.NDArray[np.float64]
    label: str | None
    colour: Colour
    width: int = 2
    points: bool = False


@dataclass
class _Frame:
    """The plot area of a chart and its data ranges."""

    box: tuple[int, int, int, int]
    xlim: tuple[float, float]
    ylim: tuple[float, float]
    legend: list[tuple[str, Colour]] = field(default_factory=list)
    y_down: bool = False  # image convention: ylim[0] at the top

    def to_px(self, x: float, y: float) -> tuple[float, float]:
        (x0, x1), (y0, y1) = self.xlim, self.ylim
        left, top, right, bottom = self.box
        px = left + (x - x0) / (x1 - x0) * (right - left)
        up = (y - y0) / (y1 - y0) * (bottom - top)
        return px, top + up if self.y_down else bottom - up


def _vertical_text(img: Image.Image, text: str, centre: tuple[int, int], size: int) -> None:
    w, h = text_width(text, size) + 4, size + 6
    label = Image.new("RGBA", (w, h), (255, 255, 255, 0))
    ImageDraw.Draw(label).text((2, 1), text, fill=AXIS, font=font(size))
    turned = label.rotate(90, expand=True)
    img.paste(turned, (centre[0] - turned.width // 2, centre[1] - turned.height // 2), turned)


def _axes(
    size: tuple[int, int],
    title: str,
    xlabel: str,
    ylabel: str,
    xlim: tuple[float, float],
    ylim: tuple[float, float],
    *,
    xticks: Sequence[float] | None = None,
    y_down: bool = False,
) -> tuple[Image.Image, ImageDraw.ImageDraw, _Frame]:
    """A white image with title, axis labels, ticks and grid; returns the frame to plot in."""
    w, h = size
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    draw.text((w // 2, 10), title, fill="black", font=font(TITLE_SIZE), anchor="ma")
    yt = nice_ticks(*ylim)
    tick_w = max(text_width(_fmt(t), TICK_SIZE) for t in yt)
    box = (LABEL_SIZE + 16 + tick_w, TITLE_SIZE + 24, w - 20, h - (TICK_SIZE + LABEL_SIZE + 24))
    frame = _Frame(box, xlim, ylim, y_down=y_down)
    left, top, right, bottom = box
    for t in yt:
        _, py = frame.to_px(xlim[0], t)
        draw.line([(left, py), (right, py)], fill=GRID)
        draw.text((left - 4, py), _fmt(t), fill=AXIS, font=font(TICK_SIZE), anchor="rm")
    for t in nice_ticks(*xlim) if xticks is None else xticks:
        px, _ = frame.to_px(t, ylim[0])
        draw.line([(px, top), (px, bottom)], fill=GRID)
        draw.text((px, bottom + 4), _fmt(t), fill=AXIS, font=font(TICK_SIZE), anchor="ma")
    draw.rectangle(box, outline=AXIS)
    draw.text(((left + right) // 2, h - 6), xlabel, fill=AXIS, font=font(LABEL_SIZE), anchor="md")
    _vertical_text(img, ylabel, (LABEL_SIZE // 2 + 4, (top + bottom) // 2), LABEL_SIZE)
    return img, draw, frame


def _legend(draw: ImageDraw.ImageDraw, frame: _Frame, corner: str) -> None:
    if not frame.legend:
        return
    line_h = TICK_SIZE + 6
    width = max(text_width(t, TICK_SIZE) for t, _ in frame.legend) + 40
    height = line_h * len(frame.legend) + 8
    left, top, right, bottom = frame.box
    x = right - width - 8 if corner.endswith("right") else left + 8
    y = top + 8 if corner.startswith("upper") else bottom - height - 8
    draw.rectangle((x, y, x + width, y + height), fill="white", outline=(170, 170, 170))
    for i, (text, colour) in enumerate(frame.legend):
        cy = y + 4 + i * line_h + line_h // 2
        draw.line([(x + 6, cy), (x + 28, cy)], fill=colour, width=3)
        draw.text((x + 34, cy), text, fill="black", font=font(TICK_SIZE), anchor="lm")


def line_chart(
    series: Sequence[Series],
    *,
    size: tuple[int, int],
    title: str,
    xlabel: str,
    ylabel: str,
    xlim: tuple[float, float] | None = None,
    ylim: tuple[float, float] | None = None,
    legend: str = "upper right",
    xticks: Sequence[float] | None = None,
) -> Image.Image:
    """Lines (non-finite points are skipped) on titled axes; ranges default to the data's and
    ticks to `nice_ticks`.

    ``legend`` is ``upper right``, ``upper left``, ``lower right`` or ``lower left``."""
    xs = np.concatenate([np.asarray(s.x, np.float64) for s in series]) if series else np.zeros(0)
    ys = np.concatenate([np.asarray(s.y, np.float64) for s in series]) if series else np.zeros(0)
    ok = np.isfinite(xs) & np.isfinite(ys)
    if xlim is None:
        xlim = (float(xs[ok].min()), float(xs[ok].max())) if ok.any() else (0.0, 1.0)
    if ylim is None:
        ylim = (float(ys[ok].min()), float(ys[ok].max())) if ok.any() else (0.0, 1.0)
    if xlim[1] - xlim[0] < 1e-12:
        xlim = (xlim[0] - 0.5, xlim[1] + 0.5)
    if ylim[1] - ylim[0] < 1e-12:
        ylim = (ylim[0] - 0.5, ylim[1] + 0.5)
    img, draw, frame = _axes(size, title, xlabel, ylabel, xlim, ylim, xticks=xticks)
    for s in series:
        x, y = np.asarray(s.x, np.float64), np.asarray(s.y, np.float64)
        keep = np.isfinite(x) & np.isfinite(y)
        pts = [frame.to_px(a, b) for a, b in zip(x[keep].tolist(), y[keep].tolist(), strict=True)]
        if len(pts) > 1:
            draw.line(pts, fill=s.colour, width=s.width, joint="curve")
        if s.points or len(pts) == 1:
            for px, py in pts:
                draw.ellipse([px - 3, py - 3, px + 3, py + 3], fill=s.colour)
        if s.label is not None:
            frame.legend.append((s.label, s.colour))
    _legend(draw, frame, legend)
    return img


def _cell_colour(value: float) -> Colour:
    """White (0) to dark blue (1)."""
    v = min(max(value, 0.0), 1.0)
    return (int(247 - 239 * v), int(251 - 203 * v), int(255 - 148 * v))


def heat_map(
    values: npt.NDArray[np.float64],
    *,
    size: tuple[int, int],
    title: str,
    xlabel: str,
    ylabel: str,
    col_names: Sequence[str],
    row_names: Sequence[str],
    number_format: str = "{:.0f}",
    show_numbers: bool = True,
) -> Image.Image:
    """A matrix ``(R, C)`` as shaded cells (darker = larger, relative to the largest cell), with
    each cell's value written in it, columns named along the bottom and rows down the left."""
    rows, cols = values.shape
    w, h = size
    img = Image.new("RGB", size, "white")
    draw = ImageDraw.Draw(img)
    draw.text((w // 2, 10), title, fill="black", font=font(TITLE_SIZE), anchor="ma")
    name_w = max([text_width(n, TICK_SIZE) for n in row_names] + [10]) + 8
    col_w = max([text_width(n, TICK_SIZE) for n in col_names] + [10]) + 8
    left, top = LABEL_SIZE + 12 + name_w, TITLE_SIZE + 24
    right, bottom = w - 20, h - (LABEL_SIZE + 16 + col_w)
    cw, ch = (right - left) / max(cols, 1), (bottom - top) / max(rows, 1)
    peak = float(np.nanmax(values)) if values.size and np.isfinite(values).any() else 0.0
    cell_font = max(8, min(TICK_SIZE, int(min(cw, ch) / 3)))
    for r in range(rows):
        for c in range(cols):
            v = float(values[r, c])
            shade = v / peak if peak > 0 and math.isfinite(v) else 0.0
            x0, y0 = left + c * cw, top + r * ch
            draw.rectangle((x0, y0, x0 + cw, y0 + ch), fill=_cell_colour(shade), outline=GRID)
            if show_numbers and math.isfinite(v) and v != 0:
                ink = "white" if shade > 0.55 else "black"
                draw.text(
                    (x0 + cw / 2, y0 + ch / 2),
                    number_format.format(v),
                    fill=ink,
                    font=font(cell_font),
                    anchor="mm",
                )
    draw.rectangle((left, top, right, bottom), outline=AXIS)
    for r, name in enumerate(row_names):
        draw.text(
            (left - 4, top + (r + 0.5) * ch), name, fill=AXIS, font=font(TICK_SIZE), anchor="rm"
        )
    for c, name in enumerate(col_names):
        tick = Image.new("RGBA", (text_width(name, TICK_SIZE) + 4, TICK_SIZE + 6), (0, 0, 0, 0))
        ImageDraw.Draw(tick).text((2, 1), name, fill=AXIS, font=font(TICK_SIZE))
        turned = tick.rotate(90, expand=True)
        img.paste(turned, (int(left + (c + 0.5) * cw - turned.width / 2), bottom + 4), turned)
    draw.text(((left + right) // 2, h - 6), xlabel, fill=AXIS, font=font(LABEL_SIZE), anchor="md")
    _vertical_text(img, ylabel, (LABEL_SIZE // 2 + 4, (top + bottom) // 2), LABEL_SIZE)
    return img


def bar_chart(
    counts: Sequence[float],
    names: Sequence[str],
    *,
    size: tuple[int, int],
    title: str,
    xlabel: str,
    ylabel: str,
    colours: Sequence[Colour],
) -> Image.Image:
    """One bar per name with its count above it; names along the x axis (turned when long)."""
    peak = max([float(c) for c in counts] + [1.0])
    img, draw, frame = _axes(size, title, xlabel, ylabel, (0.0, 1.0), (0.0, peak * 1.12), xticks=())
    left, _, right, bottom = frame.box
    n = max(len(counts), 1)
    slot = (right - left) / n
    for i, (count, name) in enumerate(zip(counts, names, strict=True)):
        x0, x1 = left + (i + 0.15) * slot, left + (i + 0.85) * slot
        _, y = frame.to_px(0, float(count))
        draw.rectangle((x0, y, x1, bottom), fill=colours[i % len(colours)], outline=AXIS)
        draw.text(((x0 + x1) / 2, y - 2), _fmt(float(count)), fill="black",
                  font=font(TICK_SIZE), anchor="md")  # fmt: skip
        if n <= 12:
            draw.text(((x0 + x1) / 2, bottom + 4), name, fill=AXIS, font=font(TICK_SIZE),
                      anchor="ma")  # fmt: skip
    return img


def density_map(
    x: npt.NDArray[np.float64],
    y: npt.NDArray[np.float64],
    *,
    size: tuple[int, int],
    title: str,
    xlabel: str,
    ylabel: str,
    bins: int = 50,
    xlim: tuple[float, float] = (0.0, 1.0),
    ylim: tuple[float, float] = (0.0, 1.0),
    y_down: bool = False,
) -> Image.Image:
    """A 2-D histogram of the points ``(x, y)`` on titled axes (darker = more points; the
    square-root scale keeps sparse cells visible); ``y_down`` puts ``ylim[0]`` at the top, as
    in an image."""
    img, _, frame = _axes(size, title, xlabel, ylabel, xlim, ylim, y_down=y_down)
    left, top, right, bottom = frame.box
    hist, _, _ = np.histogram2d(y, x, bins=bins, range=[list(ylim), list(xlim)])
    shade = np.sqrt(hist / hist.max()) if hist.size and hist.max() > 0 else hist
    colours = np.array([_cell_colour(float(v)) for v in np.linspace(0, 1, 256)], np.uint8)
    rows = shade if y_down else shade[::-1]  # histogram row 0 is ylim[0]
    cells = colours[(rows * 255).astype(np.int64)]
    inner = (right - left - 1, bottom - top - 1)
    tile = Image.fromarray(cells).resize(inner, Image.Resampling.NEAREST)
    img.paste(tile, (left + 1, top + 1))
    return img
