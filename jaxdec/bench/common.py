"""Benchmark plumbing shared by every suite: interleaved timing with a CPU-contention guard, a
text table, a JSON record and the suite's PNG plots next to it. Ratios are measured side by side
in one run; nothing here asserts a wall-clock time.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from typing import Callable

from jaxdec.plots import INSTALL


def _cpu_busy_seconds() -> float | None:
  """Seconds of CPU time all processes spent busy (from /proc/stat), or None off Linux."""
  try:
    with open("/proc/stat") as f:
      fields = [float(x) for x in f.readline().split()[1:]]
  except OSError:
    return None
  idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)
  return (sum(fields) - idle) / os.sysconf("SC_CLK_TCK")


def _own_cpu_seconds() -> float:
  t = os.times()
  return t.user + t.system + t.children_user + t.children_system


class Timer:
  """Times callables; flags samples during which other processes used the CPU.

  `other_load` of a sample = CPU-seconds used by other processes per wall second. Samples above
  `max_other_load` are retaken (up to `retries` times) and, if still noisy, kept but counted in
  `noisy_samples`, so the report can warn.
  """

  def __init__(self, max_other_load: float = 0.15, retries: int = 3):
    self.max_other_load = max_other_load
    self.retries = retries
    self.noisy_samples = 0
    self.max_seen_load = 0.0

  def sample(self, fn: Callable[[], object]) -> float:
    for attempt in range(self.retries + 1):
      busy0, own0, t0 = _cpu_busy_seconds(), _own_cpu_seconds(), time.perf_counter()
      fn()
      wall = time.perf_counter() - t0
      busy1, own1 = _cpu_busy_seconds(), _own_cpu_seconds()
      if busy0 is None:
        return wall
      other = max(0.0, (busy1 - busy0) - (own1 - own0)) / max(wall, 1e-9)
      self.max_seen_load = max(self.max_seen_load, other)
      if other <= self.max_other_load:
        return wall
    self.noisy_samples += 1
    return wall

  def interleaved(self, fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median wall time per name, running the callables A B C A B C ... `repeats` times."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(repeats):
      for name, fn in fns.items():
        times[name].append(self.sample(fn))
    return {name: statistics.median(ts) for name, ts in times.items()}

  def warning(self) -> str | None:
    if self.noisy_samples:
      return (f"WARNING: {self.noisy_samples} sample(s) ran while other processes used up to "
              f"{self.max_seen_load:.2f} cores; these figures are unreliable. Rerun on an idle machine.")
    return None


def format_table(rows: list[dict], columns: list[str]) -> str:
  def cell(v):
    if isinstance(v, float):
      return f"{v:,.2f}" if abs(v) < 100 else f"{v:,.0f}"
    return str(v)

  body = [[cell(r.get(c, "")) for c in columns] for r in rows]
  widths = [max(len(c), *(len(b[i]) for b in body)) for i, c in enumerate(columns)]
  line = lambda vals: "| " + " | ".join(v.ljust(w) for v, w in zip(vals, widths)) + " |"
  sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
  return "\n".join([line(columns), sep] + [line(b) for b in body])


def environment() -> dict:
  import jax

  info = {"python": sys.version.split()[0], "platform": platform.platform(), "jax": jax.__version__,
          "devices": [str(d) for d in jax.devices()], "cpu_count": os.cpu_count()}
  try:
    import torch
    import transformers

    info.update(torch=torch.__version__, transformers=transformers.__version__,
                torch_threads=torch.get_num_threads())
  except ImportError:
    pass
  return info


def write_json(path: str, record: dict) -> None:
  os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
  with open(path, "w") as f:
    json.dump(record, f, indent=2, default=str)


def check_plot(plot: bool, out: str | None) -> None:
  """Before a suite runs: `plot` needs matplotlib and a JSON path to write the PNGs next to."""
  if plot:
    from jaxdec import plots

    plots.require()
    if not out:
      raise ValueError("plot=True writes PNGs next to the JSON record: give out=PATH.json")


def plot_path(out: str, name: str) -> str:
  """'dir/spec.json', 'speedup' -> 'dir/spec_speedup.png'."""
  return f"{os.path.splitext(out)[0]}_{name}.png"


def report(rows: list[dict], columns: list[str], timer: Timer, record: dict,
           out: str | None, plot: Callable[[dict], dict] | None = None) -> dict:
  """Print the table (and the noise warning), complete the JSON record and write it to `out`;
  `plot(record) -> {name: Figure}` draws the suite's figures, saved as `plot_path(out, name)`
  (their paths are listed in the record's 'plots')."""
  print(format_table(rows, columns))
  if timer.warning():
    print(timer.warning())
  record = {**record, "rows": rows, "noisy_samples": timer.noisy_samples,
            "environment": environment()}
  figures = plot(record) if plot is not None and out else {}
  if figures:
    record["plots"] = [plot_path(out, name) for name in figures]
  if out:
    write_json(out, record)
    print(f"wrote {out}")
  if figures:
    from jaxdec import plots

    for name, fig in figures.items():
      print(f"wrote {plots.save(fig, plot_path(out, name))}")
  return record


def add_output_flags(parser, suite: str, plots: str | None = None) -> None:
  """`--out` (the suite's JSON path) and, when the suite draws `plots` (what --plot writes,
  e.g. "OUT_speedup.png: ..."), `--plot`: the flags every bench suite takes."""
  parser.add_argument("--out", default=f"bench_results/{suite}.json", help="JSON output path")
  if plots is not None:
    parser.add_argument("--plot", action="store_true",
                        help=f"also write {plots} next to --out (needs matplotlib: {INSTALL})")
