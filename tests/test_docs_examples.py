"""The worked examples in docs/adding-a-method.md run as written: their code blocks are executed
and their tests called on tiny models."""

import os
import re

import numpy as np
import pytest

import jaxdec
from jaxdec import diffusion
from jaxdec.model import Bidirectional
from tiny import tiny_model

DOC = os.path.join(os.path.dirname(__file__), "..", "docs", "adding-a-method.md")


@pytest.fixture(scope="module")
def namespace():
  with open(DOC) as f:
    blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
  assert len(blocks) >= 4, "the worked examples lost their code blocks"
  names = {"np": np, "jaxdec": jaxdec, "diffusion": diffusion}
  for block in blocks:
    exec(compile(block, DOC, "exec"), names)
  return names


def _prompts(seed, lengths):
  rng = np.random.RandomState(seed)
  return [np.tile(rng.randint(6, 128, 4), n)[: 3 * n].tolist() for n in lengths]


def test_the_scheduler_example(namespace):
  dlm = tiny_model(attention=Bidirectional(), architecture="llada", std=0.5, tokens=dict(mask=5))
  namespace["test_capped_threshold_reduces_to_threshold"](dlm, _prompts(0, (2, 4)))
  with pytest.raises(ValueError, match="CappedThreshold.tau"):
    jaxdec.diffusion_generate(dlm, _prompts(0, (2,)), scheduler=namespace["CappedThreshold"](2.0))


def test_the_drafter_example(model, namespace):
  prompts = _prompts(1, (2, 5))
  namespace["test_bigram_is_lossless"](model, prompts)
  # On the zoo model, whose greedy code repeats lines, the bigram guess is often right.
  zoo, tok = jaxdec.load("zoo:pycode-ar"), jaxdec.load_tokenizer("zoo:pycode-ar")
  out = jaxdec.speculative_generate(zoo, [tok.encode("import os\nimport sys\n")],
                                    namespace["Bigram"](), max_new_tokens=32)
  assert float(out.stats["acceptance_length"][0]) > 1.2


def test_the_token_loop_example(model, namespace):
  namespace["test_my_generate_equals_generate"](model, _prompts(2, (2, 5)))


def test_the_readme_python_runs_as_written(capsys):
  """Every python block of the README, in order, in one namespace (the zoo models, the real
  calls a newcomer copies)."""
  with open(os.path.join(os.path.dirname(DOC), "..", "README.md")) as f:
    blocks = re.findall(r"```python\n(.*?)```", f.read(), flags=re.S)
  assert len(blocks) >= 2
  names = {}
  for block in blocks:
    exec(compile(block, "README.md", "exec"), names)
  assert len(names["texts"]) == 2 and all(isinstance(t, str) for t in names["texts"])
  # The streaming example prints the first completion whole (streamed past its stop string)
  # and nothing of the second.
  printed = capsys.readouterr().out
  assert names["texts"][0] in printed and names["texts"][1] not in printed
  # What the README's comments claim of the last blocks: the student alone emits four tokens per
  # forward, and speculation with the EAGLE-3 drafter is greedy AR's output.
  alone = names["alone"]
  assert float(np.sum(alone.lengths) / np.sum(alone.stats["nfe"])) > 3.5
  ref = jaxdec.generate(names["target"], names["problem"], max_new_tokens=448)
  np.testing.assert_array_equal(names["out"].tokens, ref.tokens)
  np.testing.assert_array_equal(names["out"].lengths, ref.lengths)
