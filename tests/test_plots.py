"""jaxdec.plots and the suites' figures: the drawn series are the recorded numbers, PNGs are
written at their stated size, and a missing matplotlib is named with the extra to install."""

import json
import math

import numpy as np
import pytest
from matplotlib.image import imread

from jaxdec import cli, plots, spec
from jaxdec.bench import spec as spec_bench


def assert_png(path, fig):
  """A readable, non-blank PNG of exactly the figure's size."""
  image = imread(str(path))
  width, height = fig.get_size_inches() * plots.DPI
  assert image.shape == (round(height), round(width), 4)
  assert image.shape[1] == 800  # plots.WIDTH inches at plots.DPI.
  assert image[..., :3].std() > 0.05  # Something was drawn on the white canvas.


def _bars(ax):
  (container,) = ax.containers
  return list(container)


def test_spec_figures_draw_the_recorded_speedups_and_every_verification_step(model, tmp_path):
  """A real speculative run on a tiny model: the histogram counts every verification step once."""
  prompts = [[5, 6, 7, 8, 5, 6, 7, 8], [9, 10, 11, 9, 10, 11, 9, 10]]  # One length: one compile.
  drafter = spec.PromptLookup(max_ngram=2, num_tokens=3)
  outs = spec_bench._run_jaxdec(model, prompts, 12, drafter)
  histogram = spec_bench.accepted_histogram(outs, drafter)
  steps = sum(forwards - 1 for _, forwards, _ in outs)  # The prefill is no verification step.
  assert len(histogram) == 4 and sum(histogram) == steps > 0
  tokens = sum(len(t) for t, _, _ in outs)
  # Each step emits its accepted drafts + 1 (a row's last step may lose the + 1 to the budget),
  # the prefill one token per prompt.
  emitted = sum((a + 1) * c for a, c in enumerate(histogram))
  assert 0 <= emitted - (tokens - len(prompts)) <= len(prompts)
  rows = [{"method": "jaxdec greedy AR", "speedup vs jaxdec AR": 1.0},
          {"method": "lookup", "speedup vs jaxdec AR": 1.7, "accepted histogram": histogram},
          {"method": "draft k=2", "speedup vs jaxdec AR": 2.25, "accepted histogram": [3, 0, 5]},
          {"method": "transformers greedy", "speedup vs jaxdec AR": 0.4}]
  record = {"target": "tiny", "draft": "tiny", "prompts": 2, "new_tokens": 12, "rows": rows}
  record = json.loads(json.dumps(record))  # As read back from the JSON file.

  figs = spec_bench.figures(record)
  assert set(figs) == {"speedup", "acceptance"}
  ax = figs["speedup"].axes[0]
  assert [t.get_text() for t in ax.get_yticklabels()] == [r["method"] for r in rows]
  bars = _bars(ax)
  assert [b.get_width() for b in bars] == [r["speedup vs jaxdec AR"] for r in rows]
  colors = [b.get_facecolor() for b in bars]
  assert colors[0] != colors[1] != colors[-1]  # Baseline grey, jaxdec, transformers.
  assert [t.get_text() for t in ax.texts] == [f"{r['speedup vs jaxdec AR']:.2f}x" for r in rows]

  panels = [a for a in figs["acceptance"].axes if a.axison]
  assert len(panels) == 2
  for panel, row in zip(panels, rows[1:3]):
    assert panel.get_title().startswith(row["method"])
    heights = [p.get_height() for p in panel.patches]
    assert heights == row["accepted histogram"]
    lengths = [p.get_x() + p.get_width() / 2 for p in panel.patches]
    assert lengths == pytest.approx(range(1, len(heights) + 1))  # Tokens per step: accepted + 1.
    assert f"{sum(heights)} steps" in panel.get_title()
  for name, fig in figs.items():
    path = plots.save(fig, str(tmp_path / f"spec_{name}.png"))
    assert_png(path, fig)


def test_accuracy_vs_speed_draws_each_row_and_the_pareto_front(tmp_path):
  rows = [{"method": "AR", "tokens/s": 100.0, "accuracy": 0.80},
          {"method": "fast", "tokens/s": 400.0, "accuracy": 0.70},
          {"method": "dominated", "tokens/s": 150.0, "accuracy": 0.60},
          {"method": "fastest", "tokens/s": 900.0, "accuracy": 0.20}]
  fig = plots.accuracy_vs_speed(rows, title="gsm-synth")
  ax = fig.axes[0]
  (points,) = ax.collections
  np.testing.assert_array_equal(points.get_offsets(), [[100, 0.8], [400, 0.7], [150, 0.6],
                                                       [900, 0.2]])
  assert [t.get_text() for t in ax.texts] == ["AR", "fast", "dominated", "fastest"]
  (front,) = ax.get_lines()
  assert list(front.get_xdata()) == [100, 400, 900]
  assert list(front.get_ydata()) == [0.8, 0.7, 0.2]
  assert_png(plots.save(fig, str(tmp_path / "frontier.png")), fig)
  with pytest.raises(ValueError, match="has no \\['accuracy'\\]"):
    plots.accuracy_vs_speed([{"method": "AR", "tokens/s": 1.0}])


def test_training_curves_convert_the_validation_loss_to_bits_per_byte():
  records = [{"step": s, "loss": 5.0 - s / 10} for s in range(1, 7)]
  for r in records[1::2]:
    r["val_loss"] = r["loss"] + 0.5
  fig = plots.training_curves(records, title="run", tokens_per_byte=0.3,
                              final={"stdlib validation": 1.2})
  loss, bpb = fig.axes
  train, val = loss.get_lines()
  assert list(train.get_xdata()) == list(range(1, 7))
  assert list(val.get_xdata()) == [2, 4, 6]
  assert list(val.get_ydata()) == [r["val_loss"] for r in records[1::2]]
  curve, final = bpb.get_lines()
  np.testing.assert_allclose(curve.get_ydata(),
                             [r["val_loss"] / math.log(2) * 0.3 for r in records[1::2]])
  assert list(final.get_xdata()) == [6] and list(final.get_ydata()) == [1.2]
  no_conversion = plots.training_curves(records, title="distill", final={"stdlib": 1.2})
  assert len(no_conversion.axes[1].get_lines()) == 1  # Only the final evaluation.


def test_training_writes_its_curves_into_the_workdir(tmp_path, monkeypatch, capsys):
  from jaxdec.configs import load_config
  from jaxdec.train import zoo

  cfg = load_config("zoo:pycode-draft")
  lines = [{"step": 1, "loss": 9.0}, {"step": 2, "loss": 8.0, "val_loss": 8.5},
           {"step": 2, "loss": 7.5, "val_loss": 8.2}]  # A resumed run logs step 2 again.
  (tmp_path / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
  meta = {"steps": 2, "eval": {"stdlib_validation": {"bits_per_byte": 3.0, "tokens": 30,
                                                     "bytes": 100}}}
  path = zoo._maybe_plot(cfg, str(tmp_path), meta, None)
  assert path == str(tmp_path / "training.png")
  assert f"wrote {path}" in capsys.readouterr().out
  assert imread(path).shape == (380, 800, 4)
  monkeypatch.setattr(plots, "available", lambda: False)
  assert zoo._maybe_plot(cfg, str(tmp_path), meta, None) is None
  assert "no training plot: matplotlib is not installed (pip install 'jaxdec[plot]')" in (
      capsys.readouterr().out)
  assert zoo._maybe_plot(cfg, str(tmp_path), meta, False) is None
  assert capsys.readouterr().out == ""


@pytest.mark.parametrize("argv", [
    ["bench", "diffusion", "--model", "random", "--plot"],
    ["bench", "ar", "--plot"],
    ["eval", "--model", "zoo:pycode-draft", "--plot", "bpb.png"],
    ["train", "--config", "zoo:pycode-draft", "--plot"],
])
def test_plot_flags_without_matplotlib_name_the_extra_before_any_work(argv, monkeypatch, capsys):
  import jaxdec
  from jaxdec.bench import ar, diffusion
  from jaxdec.train import zoo

  def no_work(*args, **kwargs):
    raise AssertionError("work started before the matplotlib check")

  monkeypatch.setattr(plots, "available", lambda: False)
  for module, name in ((jaxdec, "load"), (ar, "load_bench_model"),
                       (diffusion, "load_bench_model"), (zoo, "Trainer")):
    monkeypatch.setattr(module, name, no_work)
  assert cli.main(argv) == 2
  err = capsys.readouterr().err
  assert "plots need matplotlib, which is not installed: pip install 'jaxdec[plot]'" in err


def test_bench_plots_need_an_output_path_and_ar_needs_its_peer():
  from jaxdec.bench import ar

  with pytest.raises(ValueError, match="give out=PATH.json"):
    ar.run(out=None, plot=True)
  with pytest.raises(ValueError, match="drop --no-peers"):
    ar.run(out="x.json", peers=False, plot=True)


def test_ar_figure_draws_one_bar_per_batch_size(tmp_path):
  from jaxdec.bench import ar

  rows = [{"batch": 1, "speedup": 3.5}, {"batch": 8, "speedup": 1.25}]
  fig = ar.figures({"model": "random", "prompt_len": 16, "new_tokens": 8, "rows": rows})["speedup"]
  ax = fig.axes[0]
  assert [t.get_text() for t in ax.get_yticklabels()] == ["jaxdec, batch 1", "jaxdec, batch 8"]
  assert [b.get_width() for b in ax.containers[0]] == [3.5, 1.25]
  assert "transformers generate" in ax.get_xlabel()
  assert_png(plots.save(fig, str(tmp_path / "ar_speedup.png")), fig)


def test_eagle_figure_draws_one_acceptance_curve_per_drafter(tmp_path):
  from jaxdec.bench import eagle

  record = {"target": "zoo:gsm-ar", "depth": 3, "prompts": 2, "task": "gsm-synth", "rows": [
      {"drafter": "plain: mean +- std over 2 seeds", "seed": None, "reuse": "hidden",
       "acceptance by depth": [0.9, 0.8, 0.7]},
      {"drafter": "plain seed 0", "seed": 0, "reuse": "hidden", "acceptance by depth": [0.9, 0.8, 0.6]},
      {"drafter": "KV only seed 0", "seed": 0, "reuse": "kv", "acceptance by depth": [0.5, 0.6, 0.7]}]}
  fig = eagle.figures(record)["depth"]
  lines = fig.axes[0].get_lines()
  assert [list(l.get_ydata()) for l in lines] == [[0.9, 0.8, 0.7], [0.5, 0.6, 0.7]]
  fig.savefig(tmp_path / "depth.png", dpi=plots.DPI)
  assert_png(tmp_path / "depth.png", fig)
