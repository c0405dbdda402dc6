"""The dashboard's plots as Vega-Lite specifications, from the statistics' samples.

Gradio's own line plot has no logarithmic axis, and latencies span four orders of
magnitude (a hit in 0.1 ms, a miss in 2 s): on a linear axis every hit lies on zero. A
``gr.Plot`` renders a Vega-Lite specification (Gradio's ``PlotData`` of type "altair",
the format it sends to its Vega renderer), so the spec is written here and no plotting
library is needed. Times are epoch milliseconds, which Vega shows in the viewer's local
time; hit and miss differ in colour and in shape.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from typing import Any

from gradio.components.plot import AltairPlotData
from typing_extensions import TypedDict

__all__ = ["WINDOWS", "hit_rate_plot", "in_window", "latency_plot", "window_rate"]

#: (label, seconds) of the windows the operator can choose; 0 means every kept sample.
WINDOWS: list[tuple[str, int]] = [
    ("最近 15 分钟 Last 15 min", 900),
    ("最近 1 小时 Last hour", 3600),
    ("最近 24 小时 Last 24 h", 86400),
    ("全部 All kept samples", 0),
]

Sample = tuple[float, str, float]
"""(unix time, result, seconds) as :attr:`lib.cache.stats.Stats.samples` keeps them."""

_RESULTS = ["hit", "miss", "bypass", "error", "composed"]
_LEGEND = ["命中 hit", "未命中 miss", "绕过 bypass", "错误 error", "拼接 composed"]
_COLOURS = ["#15803d", "#b45309", "#475569", "#b91c1c", "#1d4ed8"]
_SHAPES = ["circle", "square", "triangle-up", "cross", "diamond"]


def in_window(samples: Sequence[Sample], window: float, now: float) -> list[Sample]:
    return [s for s in samples if window <= 0 or s[0] >= now - window]


def window_rate(samples: Sequence[Sample], window: float, now: float) -> tuple[float, int]:
    """Hit rate of the user lookups (hits and misses) in the window, and their number."""
    lookups = [kind for _, kind, _ in in_window(samples, window, now) if kind in ("hit", "miss")]
    return (lookups.count("hit") / len(lookups) if lookups else 0.0), len(lookups)


class _TimeAxis(TypedDict):
    """A Vega-Lite axis (``encoding.x.axis``) of local times, labelled to suit the span."""

    title: str
    format: str
    """A d3 time format: seconds within two hours, else month, day and minutes."""
    labelOverlap: bool
    labelSeparation: int
    tickCount: int


def _time_axis(span: float) -> _TimeAxis:
    return {
        "title": "本地时间 Local time",
        "format": "%H:%M:%S" if span <= 2 * 3600 else "%m-%d %H:%M",
        "labelOverlap": True,
        "labelSeparation": 12,
        "tickCount": 6,
    }


def _spec(values: list[dict[str, Any]], body: dict[str, Any], height: int) -> AltairPlotData:
    spec = {"$schema": "https://vega.github.io/schema/vega-lite/v5.json", "data": {"values": values}, "height": height}
    return AltairPlotData(chart="scatter", plot=json.dumps({**spec, **body}, ensure_ascii=False))


def latency_plot(samples: Sequence[Sample], window: float, now: float) -> AltairPlotData | None:
    """Each request's latency on a logarithmic axis, by result (colour and shape)."""
    chosen = in_window(samples, window, now)
    if not chosen:
        return None
    values = [
        {"t": round(t * 1000), "ms": max(seconds * 1e3, 0.01), "result": _LEGEND[_RESULTS.index(kind)]}
        for t, kind, seconds in chosen
        if kind in _RESULTS
    ]
    legend = {"domain": _LEGEND, "range": _COLOURS}
    body = {
        "encoding": {
            "x": {"field": "t", "type": "temporal", "axis": _time_axis(chosen[-1][0] - chosen[0][0])},
            "y": {
                "field": "ms", "type": "quantitative", "title": "毫秒 ms (log)",
                "scale": {"type": "log"}, "axis": {"format": "~g"},
            },
        },
        "layer": [{
            "mark": {"type": "point", "filled": True, "size": 45, "opacity": 0.85, "strokeWidth": 0},
            "encoding": {
                "color": {"field": "result", "type": "nominal", "scale": legend, "title": "结果 Result"},
                "shape": {"field": "result", "type": "nominal", "scale": {"domain": _LEGEND, "range": _SHAPES}},
                "tooltip": [
                    {"field": "t", "type": "temporal", "format": "%H:%M:%S", "title": "时间 time"},
                    {"field": "ms", "type": "quantitative", "format": ".2f", "title": "ms"},
                    {"field": "result", "type": "nominal", "title": "结果 result"},
                ],
            },
        }],
    }  # fmt: skip
    return _spec(values, body, 240)


def hit_rate_plot(samples: Sequence[Sample], window: float, now: float, bins: int = 20) -> AltairPlotData | None:
    """The hit rate of user lookups over the window, in ``bins`` equal time slices."""
    lookups = [(t, kind == "hit") for t, kind, _ in in_window(samples, window, now) if kind in ("hit", "miss")]
    if not lookups:
        return None
    start = now - window if window > 0 else lookups[0][0]
    width = max((now - start) / bins, 1e-3)
    slices: dict[int, list[bool]] = {}
    for t, hit in lookups:
        slices.setdefault(min(bins - 1, max(0, math.floor((t - start) / width))), []).append(hit)
    values = [
        {"t": round((start + (i + 0.5) * width) * 1000), "rate": round(100 * sum(h) / len(h), 1), "n": len(h)}
        for i, h in sorted(slices.items())
    ]
    body = {
        "encoding": {
            "x": {"field": "t", "type": "temporal", "axis": _time_axis(now - start)},
            "y": {"field": "rate", "type": "quantitative", "title": "%", "scale": {"domain": [0, 100]}},
        },
        "layer": [{
            "mark": {"type": "line", "point": {"filled": True, "size": 40}, "color": "#1d4ed8"},
            "encoding": {
                "tooltip": [
                    {"field": "t", "type": "temporal", "format": "%H:%M:%S", "title": "时间 time"},
                    {"field": "rate", "type": "quantitative", "title": "命中率 hit rate %"},
                    {"field": "n", "type": "quantitative", "title": "请求 lookups"},
                ],
            },
        }],
    }  # fmt: skip
    return _spec(values, body, 240)
