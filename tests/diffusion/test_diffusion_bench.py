"""`jaxdec bench diffusion` runs end to end (on a random model; the zoo model is for the figures)."""

import json

import pytest

from jaxdec.bench import diffusion as bench


def test_bench_reports_the_baseline_and_a_fast_configuration(tmp_path, capsys):
  out = tmp_path / "diffusion.json"
  record = bench.run("random", batch_sizes=(2,), num_prompts=2, gen_length=32, block_length=16,
                     prompt_tokens=20, repeats=1, names=["threshold 0.9 + dual"], out=str(out),
                     plot=True)
  base, fast = record["rows"]
  assert base["batch"] == fast["batch"] == 2
  assert base["config"] == "LLaDA steps=G" and fast["config"] == "threshold 0.9 + dual"
  assert base["NFE"] == 32 and base["agreement"] == 1.0 and base["speedup"] == 1.0
  assert 1 <= fast["NFE"] <= 32 and 0.0 <= fast["agreement"] <= 1.0
  saved = json.loads(out.read_text())
  assert saved["rows"][1]["config"] == "threshold 0.9 + dual"
  assert "threshold 0.9 + dual" in capsys.readouterr().out
  # Per forward: the baseline fills one mask each of its 32 forwards; every row fills all 32
  # masks; the rows still decoding end when the last row's forwards do.
  assert base["tokens per forward by step"] == [1.0] * 32 and base["rows by step"] == [2] * 32
  filled = sum(t * r for t, r in zip(fast["tokens per forward by step"], fast["rows by step"]))
  assert filled == 2 * 32
  assert sum(fast["rows by step"]) == 2 * fast["NFE"]
  # Forwards by kind: the baseline runs full canvas forwards only; the dual cache refreshes once
  # per block (2 blocks) and runs cached window steps for the rest; neither looks ahead.
  assert (base["full fwd"], base["refresh fwd"], base["cached fwd"]) == (32, 0, 0)
  assert fast["refresh fwd"] == 2 and fast["refresh fwd"] + fast["cached fwd"] == fast["NFE"]
  assert base["lookahead fwd"] == fast["lookahead fwd"] == 0
  assert fast["outside model"] <= 1.0
  assert {"full", "refresh", "('cached', 16)"} == set(fast["forward ms"])

  # The PNGs next to the JSON draw the JSON's numbers.
  from matplotlib.image import imread

  from jaxdec import plots

  assert saved["plots"] == [str(tmp_path / "diffusion_speedup.png"),
                            str(tmp_path / "diffusion_tokens_per_forward.png"),
                            str(tmp_path / "diffusion_agreement_vs_speed.png")]
  figs = bench.figures(saved)
  for name, fig in figs.items():
    image = imread(str(tmp_path / f"diffusion_{name}.png"))
    width, height = fig.get_size_inches() * plots.DPI
    assert image.shape == (round(height), round(width), 4) and image[..., :3].std() > 0.05
  ax = figs["speedup"].axes[0]
  assert [t.get_text() for t in ax.get_yticklabels()] == [r["config"] for r in saved["rows"]]
  assert [b.get_width() for b in ax.containers[0]] == [r["speedup"] for r in saved["rows"]]
  top, bottom = figs["tokens_per_forward"].axes
  for line, row in zip(top.get_lines(), saved["rows"]):
    assert line.get_label() == row["config"]
    assert list(line.get_ydata()) == row["tokens per forward by step"]
  assert [line.get_ydata()[-1] for line in bottom.get_lines()[:2]] == [32, 32]  # Every token.
  points = figs["agreement_vs_speed"].axes[0].collections[0].get_offsets()
  assert [tuple(p) for p in points] == [(r["tokens/s"], r["agreement"]) for r in saved["rows"]]


def test_distinct_ngrams_flags_loops():
  import numpy as np

  varied = np.arange(20)[None]
  loop = np.tile([5, 6, 7], 7)[None, :20]
  assert bench.distinct_ngrams(varied) == 1.0
  assert bench.distinct_ngrams(loop) == 3 / 17
  assert bench.distinct_ngrams(np.concatenate([varied, loop])) == (1.0 + 3 / 17) / 2


def test_bench_on_a_task_scores_answers_and_stops_at_eos(tmp_path, capsys):
  import numpy as np

  import jaxdec
  from jaxdec.diffusion import DualCache, Threshold
  from jaxdec.model import Bidirectional
  from jaxdec.tasks import gsm_synth
  from jaxdec.train.tokenizer import train_bpe
  from tiny import tiny_model

  tok = train_bpe([p.text for p in gsm_synth.problems("train", 200)], 320, individual_digits=True)
  model = tiny_model(vocab_size=320, max_position_embeddings=512, attention=Bidirectional(),
                     architecture="llada", std=0.5, tokens=dict(bos=1, eos=(2,), mask=3))
  path = jaxdec.save(model, str(tmp_path / "dlm"), tokenizer=tok)
  record = bench.run(path, batch_sizes=(2,), num_prompts=2, gen_length=32, block_length=16,
                     repeats=1, names=["threshold 0.9 + dual"], task="gsm-synth",
                     out=str(tmp_path / "d.json"), plot=True)
  problems = gsm_synth.problems("test", 2, 0)
  out = jaxdec.diffusion_generate(model, [tok.encode(p.prompt) for p in problems], gen_length=32,
                                  block_length=16, steps=32, scheduler=Threshold(0.9),
                                  cache=DualCache(), stop_early=True)
  fast = record["rows"][1]
  assert fast["config"] == "threshold 0.9 + dual"
  assert fast["mean length"] == float(np.mean(out.lengths))
  assert fast["NFE"] == float(np.mean(out.stats["nfe"]))
  texts = [tok.decode(np.asarray(row[:n]).tolist()) for row, n in zip(out.tokens, out.lengths)]
  assert fast["accuracy"] == gsm_synth.score(texts, problems)
  assert record["task"] == "gsm-synth" and record["plots"][-1].endswith("_accuracy_vs_speed.png")
  assert "gsm-synth test problems" in capsys.readouterr().out


def test_the_judge_prefers_its_own_greedy_continuation():
  """An AR judge scores its own greedy continuation at fewer bits per byte than random tokens,
  and a continuation's score depends on its prompt."""
  import numpy as np

  import jaxdec
  from tiny import tiny_model

  judge = tiny_model()

  class Bytes:  # Every token is one byte.
    def decode(self, ids):
      return "x" * len(ids)

  prompts = [[7, 8, 9], [10, 11, 12, 13]]
  greedy = np.asarray(jaxdec.generate(judge, prompts, max_new_tokens=8).tokens)
  noise = np.random.RandomState(0).randint(4, judge.config.vocab_size, greedy.shape)
  own = bench.judge_bits_per_byte(judge, Bytes(), prompts, greedy)
  assert own < bench.judge_bits_per_byte(judge, Bytes(), prompts, noise)
  assert own != bench.judge_bits_per_byte(judge, Bytes(), prompts[::-1], greedy)


@pytest.mark.slow  # the bench's other tests run in CI
def test_bench_times_a_subset_against_a_chosen_baseline(tmp_path, capsys):
  """On a block-causal model the dual cache is exact, so it can stand in as the baseline: the
  uncached LLaDA row then agrees with it row for row. Quality comes from every prompt, the timed
  repeats from the first (whole batches); the cache refreshes once per row (its first step)."""
  import pytest

  import jaxdec
  from jaxdec.model import BlockCausal
  from jaxdec.tasks import gsm_synth
  from jaxdec.train.tokenizer import train_bpe
  from tiny import tiny_model

  tok = train_bpe([p.text for p in gsm_synth.problems("train", 200)], 320, individual_digits=True)
  model = tiny_model(vocab_size=320, max_position_embeddings=512, attention=BlockCausal(16),
                     architecture="llada", std=0.5, tokens=dict(bos=1, eos=(2,), mask=3))
  path = jaxdec.save(model, str(tmp_path / "bd"), tokenizer=tok)
  record = bench.run(path, batch_sizes=(2,), num_prompts=3, gen_length=32, block_length=16,
                     repeats=1, timed_prompts=1, baseline="LLaDA steps=G + dual",
                     names=["LLaDA steps=G", "threshold 0.9 + dual"], task="gsm-synth",
                     out=str(tmp_path / "d.json"))
  base, plain, fast = record["rows"]
  assert base["config"] == "LLaDA steps=G + dual" and plain["config"] == "LLaDA steps=G"
  assert plain["rows equal"] == 1.0 and base["speedup"] == 1.0
  assert fast["vs threshold+dual"] == 1.0 and record["baseline"] == "LLaDA steps=G + dual"
  assert base["refresh fwd"] == fast["refresh fwd"] == 1 and plain["cached fwd"] == 0
  assert base["cached fwd"] == plain["full fwd"] - 1
  assert "of the first 1 (whole batches; quality from all)" in capsys.readouterr().out
  with pytest.raises(ValueError, match="unknown configurations.*'fast'"):
    bench.run(path, baseline="fast")
  with pytest.raises(ValueError, match="timed_prompts must be"):
    bench.run(path, timed_prompts=0)
