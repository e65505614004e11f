"""Server-rendered SVG charts: no script, nothing fetched, the page's CSS styles them. Every label is escaped."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from html import escape

from markupsafe import Markup

WIDTH, HEIGHT, PAD_LEFT, PAD_BOTTOM, PAD_TOP = 720, 180, 48, 28, 12


def _scale(value: float, top: float) -> float:
    plot = HEIGHT - PAD_BOTTOM - PAD_TOP
    return HEIGHT - PAD_BOTTOM - (plot * value / top if top else 0.0)


def _axis(top: float, unit: str) -> list[str]:
    parts = [f'<line class="axis" x1="{PAD_LEFT}" y1="{HEIGHT - PAD_BOTTOM}" x2="{WIDTH}" y2="{HEIGHT - PAD_BOTTOM}"/>']
    for fraction in (0.5, 1.0):
        y = _scale(top * fraction, top)
        parts.append(f'<line class="grid" x1="{PAD_LEFT}" y1="{y:.1f}" x2="{WIDTH}" y2="{y:.1f}"/>')
        parts.append(f'<text class="tick" x="{PAD_LEFT - 4}" y="{y + 4:.1f}" text-anchor="end">'
                     f"{escape(_fmt(top * fraction))}{escape(unit)}</text>")
    return parts


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:.1f}"


def bars(title: str, times: Sequence[datetime], series: Sequence[tuple[str, Sequence[float]]]) -> Markup:
    """Bars over time, one series drawn over the other (e.g. requests, and accepted among them)."""
    top = max((v for _, values in series for v in values), default=0.0) or 1.0
    n = max(len(times), 1)
    step = (WIDTH - PAD_LEFT) / n
    out = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
           f"<title>{escape(title)}</title>", *_axis(top, "")]
    for index, (name, values) in enumerate(series):
        for i, value in enumerate(values):
            y = _scale(value, top)
            out.append(f'<rect class="s{index}" x="{PAD_LEFT + i * step + 1:.1f}" y="{y:.1f}" '
                       f'width="{max(step - 2, 1):.1f}" height="{HEIGHT - PAD_BOTTOM - y:.1f}">'
                       f"<title>{escape(name)} {escape(_label(times[i]))}: {value:,.0f}</title></rect>")
    out += _time_labels(times, step)
    out.append(_legend([name for name, _ in series]))
    out.append("</svg>")
    return Markup("".join(out))


def line(title: str, times: Sequence[datetime], values: Sequence[float | None], unit: str) -> Markup:
    """One line over time (e.g. p95 latency); a bucket without a value leaves a gap."""
    present = [v for v in values if v is not None]
    top = max(present, default=0.0) or 1.0
    n = max(len(times), 1)
    step = (WIDTH - PAD_LEFT) / n
    out = [f'<svg class="chart" viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(title)}">',
           f"<title>{escape(title)}</title>", *_axis(top, unit)]
    points = [(PAD_LEFT + (i + 0.5) * step, _scale(v, top)) for i, v in enumerate(values) if v is not None]
    if points:
        out.append('<polyline class="s0 line" points="' + " ".join(f"{x:.1f},{y:.1f}" for x, y in points) + '"/>')
        out += [f'<circle class="s0" cx="{x:.1f}" cy="{y:.1f}" r="2.5"/>' for x, y in points]
    out += _time_labels(times, step)
    out.append(_legend([title]))
    out.append("</svg>")
    return Markup("".join(out))


def _label(at: datetime) -> str:
    return at.strftime("%m-%d %H:%M")


def _time_labels(times: Sequence[datetime], step: float) -> list[str]:
    every = max(1, len(times) // 6)
    return [f'<text class="tick" x="{PAD_LEFT + (i + 0.5) * step:.1f}" y="{HEIGHT - 8}" text-anchor="middle">'
            f"{escape(_label(at))}</text>" for i, at in enumerate(times) if i % every == 0]


def _legend(names: list[str]) -> str:
    return "".join(f'<g class="legend"><rect class="s{i}" x="{PAD_LEFT + 8 + i * 130}" y="2" width="10" height="10"/>'
                   f'<text x="{PAD_LEFT + 22 + i * 130}" y="11">{escape(name)}</text></g>'
                   for i, name in enumerate(names))
