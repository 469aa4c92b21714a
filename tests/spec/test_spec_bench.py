"""`jaxdec bench spec --task gsm-synth` runs end to end on tiny models with the task's tokenizer."""

import numpy as np
import pytest

import jaxdec
from jaxdec.bench import spec as bench
from jaxdec.tasks import gsm_synth
from jaxdec.train.tokenizer import train_bpe
from tiny import tiny_model


@pytest.mark.slow  # every method of the bench once (a minute); CI checks each method by its own tests
def test_bench_on_a_task_scores_every_method_and_checks_it_against_ar(tmp_path, capsys):
  tok = train_bpe([p.text for p in gsm_synth.problems("train", 200)], 320, individual_digits=True)
  ids = dict(vocab_size=320, max_position_embeddings=512, tokens=dict(bos=1, eos=(2,)))
  target, draft = tiny_model(**ids), tiny_model(seed=1, num_layers=1, **ids)
  paths = [jaxdec.save(m, str(tmp_path / name), tokenizer=tok)
           for name, m in (("target", target), ("draft", draft))]
  record = bench.run(*paths, num_prompts=2, new_tokens=16, num_tokens=(2,), repeats=1,
                     peers=False, task="gsm-synth")
  problems = gsm_synth.problems("test", 2, 0)
  texts = []
  for p in problems:
    out = jaxdec.generate(target, [tok.encode(p.prompt)], max_new_tokens=16)
    texts.append(tok.decode(np.asarray(out.tokens[0, : int(out.lengths[0])]).tolist()))
  expected = gsm_synth.score(texts, problems)
  assert [r["method"] for r in record["rows"]][:2] == ["jaxdec greedy AR", "jaxdec draft model k=2"]
  for row in record["rows"]:
    assert row["same as AR"] and row["accuracy"] == expected
  assert record["task"] == "gsm-synth"
  assert "2 gsm-synth test problems, 16 new tokens" in capsys.readouterr().out
  phases = record["ssr_phases"]  # SSR's reasoning and answer phases, timed apart.
  assert [r["method"] for r in phases][0] == "greedy AR" and phases[1]["same as AR"]
  assert all(r["reasoning s"] > 0 and r["total s"] > 0 for r in phases)
