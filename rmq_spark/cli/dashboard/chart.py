"""PURE: the traffic chart as inline SVG, drawn on the server (no JavaScript, no CDN: the
dashboard works offline). One line per topic over the minutes of a ``Traffic``, a labelled
y axis (messages per minute) and the window's first and last minute on the x axis.
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape

__all__ = ["COLORS", "traffic_svg"]

COLORS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")
_WIDTH, _HEIGHT = 720, 240
_LEFT, _RIGHT, _TOP, _BOTTOM = 56, 12, 12, 28


def _minute_label(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%H:%M")


def traffic_svg(start_ms: int, counts: dict[str, list[int]], minute_ms: int = 60_000) -> str:
    """An ``<svg>`` element: ``counts[topic][i]`` messages in the minute ``start_ms + i``."""
    minutes = max((len(row) for row in counts.values()), default=0)
    peak = max((max(row) for row in counts.values() if row), default=0)
    top = max(1, peak)
    plot_w, plot_h = _WIDTH - _LEFT - _RIGHT, _HEIGHT - _TOP - _BOTTOM

    def x(index: int) -> float:
        return _LEFT + (plot_w * index / max(1, minutes - 1))

    def y(value: int) -> float:
        return _TOP + plot_h - plot_h * value / top

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{_WIDTH}" '
        f'height="{_HEIGHT}" viewBox="0 0 {_WIDTH} {_HEIGHT}" role="img" '
        f'aria-label="messages per minute">',
        f'<rect x="{_LEFT}" y="{_TOP}" width="{plot_w}" height="{plot_h}" fill="#fafafa" '
        f'stroke="#ccc"/>',
        f'<text x="{_LEFT - 6}" y="{_TOP + 10}" text-anchor="end" font-size="11">{top}</text>',
        f'<text x="{_LEFT - 6}" y="{_TOP + plot_h}" text-anchor="end" font-size="11">0</text>',
        f'<text x="14" y="{_TOP + plot_h / 2}" font-size="11" text-anchor="middle" '
        f'transform="rotate(-90 14 {_TOP + plot_h / 2})">msgs/min</text>',
    ]
    if minutes:
        last_ms = start_ms + (minutes - 1) * minute_ms
        parts.append(
            f'<text x="{_LEFT}" y="{_HEIGHT - 8}" font-size="11">{_minute_label(start_ms)}</text>'
        )
        parts.append(
            f'<text x="{_WIDTH - _RIGHT}" y="{_HEIGHT - 8}" text-anchor="end" font-size="11">'
            f"{_minute_label(last_ms)} UTC</text>"
        )
    for index, (topic, row) in enumerate(sorted(counts.items())):
        color = COLORS[index % len(COLORS)]
        points = " ".join(f"{x(i):.1f},{y(v):.1f}" for i, v in enumerate(row))
        parts.append(
            f'<polyline fill="none" stroke="{color}" stroke-width="2" points="{points}">'
            f"<title>{escape(topic)}</title></polyline>"
        )
    parts.append("</svg>")
    return "".join(parts)
