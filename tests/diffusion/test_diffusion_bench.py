"""`jaxdec bench diffusion` runs end to end (on a random model; the zoo model is for the figures)."""

import json

from jaxdec.bench import diffusion as bench


def test_bench_reports_the_baseline_and_a_fast_configuration(tmp_path, capsys):
  out = tmp_path / "diffusion.json"
  record = bench.run("random", batch_sizes=(2,), num_prompts=2, gen_length=32, block_length=16,
                     prompt_tokens=20, repeats=1, names=["threshold 0.9 + dual"], out=str(out))
  base, fast = record["rows"]
  assert base["batch"] == fast["batch"] == 2
  assert base["config"] == "LLaDA steps=G" and fast["config"] == "threshold 0.9 + dual"
  assert base["NFE"] == 32 and base["agreement"] == 1.0 and base["speedup"] == 1.0
  assert 1 <= fast["NFE"] <= 32 and 0.0 <= fast["agreement"] <= 1.0
  assert json.loads(out.read_text())["rows"][1]["config"] == "threshold 0.9 + dual"
  assert "threshold 0.9 + dual" in capsys.readouterr().out


def test_distinct_ngrams_flags_loops():
  import numpy as np

  varied = np.arange(20)[None]
  loop = np.tile([5, 6, 7], 7)[None, :20]
  assert bench.distinct_ngrams(varied) == 1.0
  assert bench.distinct_ngrams(loop) == 3 / 17
  assert bench.distinct_ngrams(np.concatenate([varied, loop])) == (1.0 + 3 / 17) / 2
