"""Figures for benchmarks, evaluation and training (matplotlib: `pip install 'jaxdec[plot]'`).

matplotlib is imported only when a figure is drawn, and figures are built with its
object-oriented API on an Agg canvas: nothing touches pyplot's global state or needs a display,
so the same calls work in a headless run and inside a notebook. Every drawing function returns
the `matplotlib.figure.Figure`, so tests (and users) can read the drawn series back from its Axes;
`save` writes it at `DPI`, at exactly its size in inches x DPI pixels.
"""

from __future__ import annotations

import importlib.util
import math
import os
import textwrap
from typing import Sequence

import numpy as np

INSTALL = "pip install 'jaxdec[plot]'"
DPI = 100
WIDTH = 8.0  # Inches; heights grow with the number of bars or panels.
BASELINE_COLOR, OURS_COLOR, PEER_COLOR = "0.35", "tab:blue", "tab:orange"


def available() -> bool:
  return importlib.util.find_spec("matplotlib") is not None


def require() -> None:
  """ImportError naming the extra to install when matplotlib is missing."""
  if not available():
    raise ImportError(f"plots need matplotlib, which is not installed: {INSTALL} "
                      f"(or pip install 'matplotlib>=3.8')")


def figure(height: float, rows: int = 1, cols: int = 1, **subplots):
  """(Figure, Axes array of shape [rows, cols]) on an Agg canvas, WIDTH x `height` inches."""
  require()
  from matplotlib.backends.backend_agg import FigureCanvasAgg
  from matplotlib.figure import Figure

  fig = Figure(figsize=(WIDTH, height), dpi=DPI, layout="constrained")
  FigureCanvasAgg(fig)
  axes = fig.subplots(rows, cols, squeeze=False, **subplots)
  return fig, axes


def save(fig, path: str) -> str:
  """Write `fig` as a PNG at `path` (parent directories created); returns the path."""
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  fig.savefig(path, dpi=DPI, format="png")
  return path


def _wrap(title: str, width: int = 90) -> str:
  return textwrap.fill(title, width)


def _check_lengths(**named: Sequence) -> int:
  sizes = {k: len(v) for k, v in named.items()}
  if len(set(sizes.values())) != 1 or not next(iter(sizes.values())):
    raise ValueError(f"plots need equally long, non-empty series, got lengths {sizes}")
  return next(iter(sizes.values()))


def speedup_bars(labels: Sequence[str], speedups: Sequence[float], *, baseline: str, title: str,
                 peers: Sequence[bool] | None = None):
  """One horizontal bar per method (top to bottom in the given order), its wall-clock speedup
  over `baseline` (measured in the same run) written at its end, and a dashed line at 1x.
  `peers` marks other libraries' rows (drawn in another colour; the baseline's own bar, if
  listed, is grey)."""
  n = _check_lengths(labels=labels, speedups=speedups)
  peers = [False] * n if peers is None else list(peers)
  _check_lengths(labels=labels, peers=peers)
  fig, axes = figure(1.4 + 0.36 * n)
  ax = axes[0, 0]
  colors = [BASELINE_COLOR if l == baseline else PEER_COLOR if p else OURS_COLOR
            for l, p in zip(labels, peers)]
  bars = ax.barh(range(n), speedups, color=colors, height=0.7)
  ax.set_yticks(range(n), labels)
  ax.invert_yaxis()
  ax.axvline(1.0, color=BASELINE_COLOR, linestyle="--", linewidth=1)
  ax.bar_label(bars, labels=[f"{s:.2f}x" for s in speedups], padding=3, fontsize=8)
  ax.set_xlim(0, max(max(speedups), 1.0) * 1.18)
  ax.set_xlabel(f"speedup over {baseline} (wall clock, same run)")
  fig.suptitle(_wrap(title), fontsize=10)
  if any(peers):
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=OURS_COLOR, label="jaxdec"),
                       Patch(color=PEER_COLOR, label="transformers")], loc="lower right",
              fontsize=8)
  return fig


def acceptance_histograms(histograms: dict[str, Sequence[int]], *, title: str):
  """One panel per speculative method: how many verification steps emitted 1, 2, ... tokens
  (drafts accepted + 1). `histograms[name][a]` = steps that accepted `a` drafts."""
  if not histograms:
    raise ValueError("acceptance_histograms needs at least one method's histogram, got none")
  names = list(histograms)
  cols = min(3, len(names))
  rows = math.ceil(len(names) / cols)
  fig, axes = figure(0.8 + 2.3 * rows, rows, cols, sharex=True)
  longest = max(len(h) for h in histograms.values())
  for ax, name in zip(axes.flat, names):
    counts = list(histograms[name])
    steps = sum(counts)
    tau = sum((a + 1) * c for a, c in enumerate(counts)) / max(steps, 1)
    ax.bar([a + 1 for a in range(len(counts))], counts, color=OURS_COLOR, width=0.8)
    ax.axvline(tau, color=BASELINE_COLOR, linestyle="--", linewidth=1)
    ax.set_title(f"{name}\nmean {tau:.2f} tokens/step, {steps} steps", fontsize=8)
    ax.set_xticks(range(1, longest + 1))
  for ax in axes.flat[len(names):]:
    ax.set_axis_off()
  fig.supxlabel("tokens emitted per verification step (drafts accepted + 1; dashed: mean)",
                fontsize=9)
  fig.supylabel("verification steps", fontsize=9)
  fig.suptitle(_wrap(title), fontsize=10)
  return fig


def acceptance_by_depth(curves: dict[str, Sequence[float]], *, title: str,
                        spread: dict[str, Sequence[float]] | None = None):
  """Conditional acceptance rate at each draft depth (accepted at depth d given accepted up to
  d - 1), one line per drafter; `spread[name]` draws +- that much around its line."""
  if not curves:
    raise ValueError("acceptance_by_depth needs at least one drafter's curve, got none")
  fig, axes = figure(4.0)
  ax = axes[0, 0]
  for name, curve in curves.items():
    depth = np.arange(1, len(curve) + 1)
    line, = ax.plot(depth, curve, marker="o", linewidth=1.2, label=name)
    if spread and name in spread:
      ax.fill_between(depth, np.subtract(curve, spread[name]), np.add(curve, spread[name]),
                      color=line.get_color(), alpha=0.2)
  ax.set_xlabel("draft depth")
  ax.set_ylabel("acceptance rate given the earlier drafts accepted")
  ax.set_ylim(0, 1.02)
  ax.legend(fontsize=8)
  fig.suptitle(_wrap(title), fontsize=10)
  return fig


def tokens_per_forward_curves(curves: dict[str, Sequence[float]],
                              rows: dict[str, Sequence[int]], *, gen_length: int, title: str):
  """Diffusion decoding speed over a run, one line per configuration.

  Top: masks filled by forward n (the mean over the rows still decoding, `curves[name][n]`).
  Bottom: tokens generated per row after n forwards (cumulative, from `rows[name][n]` = rows
  still decoding at forward n, out of rows[name][0]); the one-token-per-forward baseline is the
  diagonal, and a steeper line reaches `gen_length` in fewer forwards.
  """
  if not curves:
    raise ValueError("tokens_per_forward_curves needs at least one configuration, got none")
  fig, axes = figure(7.0, 2, 1, sharex=True)
  top, bottom = axes[0, 0], axes[1, 0]
  for name, curve in curves.items():
    n = _check_lengths(curve=curve, rows=rows[name])
    steps = range(1, n + 1)
    line, = top.plot(steps, curve, linewidth=1, label=name)
    cumulative = np.cumsum(np.multiply(curve, rows[name])) / rows[name][0]
    bottom.plot(steps, cumulative, linewidth=1.2, color=line.get_color())
  longest = max(len(c) for c in curves.values())
  bottom.plot([0, gen_length], [0, gen_length], color=BASELINE_COLOR, linestyle="--",
              linewidth=1, label="1 token per forward")
  bottom.set_xlim(0, longest + 1)
  bottom.set_ylim(0, gen_length * 1.03)
  top.set_ylabel("masks filled by this forward\n(mean over rows still decoding)", fontsize=9)
  bottom.set_ylabel("tokens generated per row", fontsize=9)
  bottom.set_xlabel("forward (model evaluations of a row, in order)")
  top.legend(fontsize=7, ncols=2)
  bottom.legend(fontsize=7, loc="lower right")
  fig.suptitle(_wrap(title), fontsize=10)
  return fig


def pareto_front(points: Sequence[tuple[float, float]]) -> list[int]:
  """Indices of the points (speed, quality) that no other point beats on both, by speed."""
  order = sorted(range(len(points)), key=lambda i: (-points[i][0], -points[i][1]))
  front, best = [], -math.inf
  for i in order:
    if points[i][1] > best:
      front.append(i)
      best = points[i][1]
  return sorted(front, key=lambda i: points[i][0])


def accuracy_vs_speed(rows: Sequence[dict], *, label: str = "method", title: str = "",
                      quality: str = "accuracy"):
  """The speed / quality frontier: one point per row (x = its 'tokens/s', y = its `quality`,
  'accuracy' or e.g. 'agreement'), named by `row[label]`, and the Pareto front (rows no other row
  beats on both) as a line."""
  if not rows:
    raise ValueError("accuracy_vs_speed needs at least one row, got none")
  for row in rows:
    missing = [k for k in (label, quality, "tokens/s") if k not in row]
    if missing:
      raise ValueError(f"accuracy_vs_speed: row {row!r} has no {missing}")
  points = [(float(r["tokens/s"]), float(r[quality])) for r in rows]
  fig, axes = figure(4.5)
  ax = axes[0, 0]
  ax.scatter([p[0] for p in points], [p[1] for p in points], color=OURS_COLOR, zorder=3)
  for row, (x, y) in zip(rows, points):
    ax.annotate(str(row[label]), (x, y), textcoords="offset points", xytext=(4, 4), fontsize=7)
  front = pareto_front(points)
  ax.plot([points[i][0] for i in front], [points[i][1] for i in front], color=BASELINE_COLOR,
          linestyle="--", linewidth=1, label="Pareto front", zorder=2)
  ax.set_xlabel("tokens/s")
  ax.set_ylabel(quality)
  ax.legend(fontsize=8)
  fig.suptitle(_wrap(title), fontsize=10)
  return fig


def bits_per_byte_bars(names: Sequence[str], values: Sequence[float], *, title: str):
  """One horizontal bar per data set: the model's bits per byte on it (lower is better)."""
  n = _check_lengths(names=names, values=values)
  fig, axes = figure(1.4 + 0.4 * n)
  ax = axes[0, 0]
  bars = ax.barh(range(n), values, color=OURS_COLOR, height=0.6)
  ax.set_yticks(range(n), names)
  ax.invert_yaxis()
  ax.bar_label(bars, labels=[f"{v:.3f}" for v in values], padding=3, fontsize=8)
  ax.set_xlim(0, max(values) * 1.15)
  ax.set_xlabel("bits per byte (lower is better)")
  fig.suptitle(_wrap(title), fontsize=10)
  return fig


def training_curves(records: Sequence[dict], *, title: str, tokens_per_byte: float | None = None,
                    final: dict[str, float] | None = None):
  """A run's metrics.jsonl records ({'step', 'loss', optional 'val_loss'}) as two panels.

  Left: training loss at every step and validation loss where it was measured (the objective's
  units). Right: validation bits per byte vs step, val_loss / ln 2 x `tokens_per_byte` (when the
  loss is a nats-per-token NLL; None leaves the curve out), with `final` ({name: bits per
  byte}: the full evaluations of the exported weights) as stars at the last step.
  """
  if not records:
    raise ValueError("training_curves needs at least one metrics record, got none")
  steps = [r["step"] for r in records]
  val = [(r["step"], r["val_loss"]) for r in records if "val_loss" in r]
  fig, axes = figure(3.8, 1, 2)
  left, right = axes[0, 0], axes[0, 1]
  left.plot(steps, [r["loss"] for r in records], linewidth=0.8, color=OURS_COLOR, label="train")
  if val:
    left.plot(*zip(*val), marker="o", markersize=3, color=PEER_COLOR, label="validation")
  left.set_xlabel("step")
  left.set_ylabel("loss (objective, nats/token)")
  left.legend(fontsize=8)
  if val and tokens_per_byte is not None:
    right.plot([s for s, _ in val], [v / math.log(2) * tokens_per_byte for _, v in val],
               marker="o", markersize=3, color=PEER_COLOR, label="validation windows")
  for i, (name, bpb) in enumerate((final or {}).items()):
    right.plot([steps[-1]], [bpb], marker="*", markersize=10, linestyle="none",
               color=f"C{i + 2}", label=f"{name}: {bpb:.3f}")
  right.set_xlabel("step")
  right.set_ylabel("validation bits per byte")
  if right.lines:
    right.legend(fontsize=8)
  fig.suptitle(_wrap(title), fontsize=10)
  return fig
