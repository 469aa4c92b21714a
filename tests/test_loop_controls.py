"""The token loop's core (`jaxdec.decoding`): `commit`'s cuts on hand-made blocks, and every
control (stop strings, min_new_tokens, repetition penalty, log-probabilities, streaming) in the
loops built on it besides AR and speculative decoding (tests/test_controls.py): standalone
K-Forcing and HPD, each checked against plain decoding with the same controls."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdec
from jaxdec import decoding
from jaxdec.controls import Controls, LogitsRules
from jaxdec.spec.kforcing import NoiseParams, PushForward
from tiny import tiny_model


def _rows(out):
  return [np.asarray(out.tokens[r, : out.lengths[r]]).tolist() for r in range(len(out.lengths))]


def _state(d, prompt_lengths, budget, width=4, capacity=16, done=None):
  prompt = jnp.ones((len(prompt_lengths), width), jnp.int32)
  s = decoding.init(d, prompt, jnp.asarray(prompt_lengths, jnp.int32),
                    jnp.asarray(budget, jnp.int32), capacity, 32)
  return s if done is None else s.replace(done=jnp.asarray(done))


def test_commit_cuts_at_stop_tokens_budget_and_offer_and_freezes_done_rows():
  d = decoding.Decoding(sampling=None, key=None, stop_tokens=jnp.asarray([7], jnp.int32))
  s = _state(d, [2, 3, 4, 1], budget=[8, 2, 8, 8], done=[False, False, False, True])
  block = jnp.asarray([[5, 7, 9, 9], [5, 6, 9, 9], [5, 6, 9, 7], [5, 6, 9, 9]], jnp.int32)
  offered = jnp.asarray([4, 4, 3, 4], jnp.int32)
  s, count = decoding.commit(d, s, block, offered)
  # Row 0 ends with the stop token, row 1 at its budget of 2, row 2 takes the 3 offered (the
  # stop token after them was not offered), row 3 was done.
  assert count.tolist() == [2, 2, 3, 0]
  assert s.total.tolist() == [4, 5, 7, 1]
  assert s.done.tolist() == [True, True, False, True]
  assert np.asarray(s.seq[0, 2:5]).tolist() == [5, 7, 0]
  out = decoding.output(d, s, buffer_len=4)
  assert _rows(out) == [[5, 7], [5, 6], [5, 6, 9], []]
  assert out.stats["nfe"].tolist() == [0, 0, 0, 0] and set(out.stats) >= {"steps",
                                                                           "tokens_per_forward"}


def test_commit_applies_min_new_tokens_to_stop_tokens_only_through_the_rules():
  """A rule suppresses a stop token's logit before the choice; commit itself never ignores a
  stop token that was chosen (the rules are what keeps it from being chosen)."""
  rules = LogitsRules(repetition_penalty=jnp.ones((1,)), min_new_tokens=jnp.asarray([3]))
  d = decoding.Decoding(sampling=None, key=None, stop_tokens=jnp.asarray([7], jnp.int32),
                        controls=Controls(rules=rules))
  s = _state(d, [2], budget=[8])
  logits = jnp.zeros((1, 32)).at[0, 7].set(5.0).at[0, 3].set(1.0)
  assert int(decoding.choose(d, s, logits)[0]) == 3  # Stop token 7 suppressed: 0 generated < 3.
  s, _ = decoding.commit(d, s, jnp.asarray([[3, 3, 3]], jnp.int32), jnp.asarray([3]))
  assert int(decoding.choose(d, s, logits)[0]) == 7  # 3 generated: allowed again.


# ---- standalone K-Forcing ----------------------------------------------------------------------

@pytest.fixture(scope="module")
def target():
  return tiny_model(seed=5, std=0.3, tokens=dict(eos=(), pad=None))


def _student(model, k):
  d = model.config.hidden_size
  noise = NoiseParams(w=0.3 * jax.random.normal(jax.random.key(0), (16, d)), base=jnp.zeros((d,)))
  return PushForward(model, noise, num_tokens=k)


PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12], [3, 4], [9, 9, 9]]


def test_push_forward_controls_equal_generate_with_one_token_per_forward(target):
  """A 1-token student is greedy AR of its decoder, so with the same controls (rules, stop
  tokens, log-probabilities) it must give generate's tokens and log-probabilities; streaming
  delivers exactly them."""
  plain = _rows(jaxdec.generate(target, PROMPTS, 16))
  stops = sorted({row[4] for row in plain})
  kw = dict(stop_tokens=stops, repetition_penalty=[1.0, 1.6, 0.8], min_new_tokens=[0, 6, 2],
            logprobs=True)
  want = jaxdec.generate(target, PROMPTS, 16, **kw)
  steps = []
  got = jaxdec.push_forward_generate(_student(target, 1), PROMPTS, 16, stream=steps.append, **kw)
  assert _rows(got) == _rows(want)
  assert _rows(want) != plain  # The controls changed something.
  np.testing.assert_allclose(got.logprobs, want.logprobs, atol=2e-5)
  for r, row in enumerate(_rows(got)):
    assert np.concatenate([s[r] for s in steps]).tolist() == row


def test_push_forward_stop_strings_and_four_tokens_per_forward():
  student = jaxdec.load_push_forward("zoo:gsm-kforcing")
  tok = jaxdec.load_tokenizer("zoo:gsm-kforcing")
  prompts = [tok.encode(f"Question: {q}\n<think>\n") for q in (
      "Ann has 3 apples and buys 4 more. How many apples does she have?",
      "A box holds 12 pens. How many pens are in 5 boxes?")]
  plain = jaxdec.push_forward_generate(student, prompts, 48, stop_tokens=())
  texts = [tok.decode(r) for r in _rows(plain)]
  stop = texts[0][6:10]
  steps = []
  out = jaxdec.push_forward_generate(student, prompts, 48, stop_tokens=(), stop_strings=[stop],
                                     tokenizer=tok, logprobs=True, stream=steps.append)
  for r, row in enumerate(_rows(out)):
    assert row == _rows(plain)[r][: len(row)]  # A prefix of the unstopped run.
    text, before = tok.decode(row), tok.decode(row[:-1])
    assert (stop in text and stop not in before) or len(row) == 48, (r, text)
    assert np.concatenate([s[r] for s in steps]).tolist() == row
  assert int(out.lengths[0]) < 48 and float(plain.stats["tokens_per_forward"][0]) > 1.5
  logp = np.asarray(out.logprobs)
  assert np.isfinite(logp).all() and (logp <= 0).all()
  assert (logp[0, int(out.lengths[0]):] == 0).all() and (logp[0, : int(out.lengths[0])] < 0).any()


# ---- HPD ---------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def zoo():
  return jaxdec.load("zoo:pycode-ar"), jaxdec.load_tokenizer("zoo:pycode-ar")


def test_parallel_generate_controls_equal_each_query_alone(zoo):
  model, tok = zoo
  context = tok.encode("import os\nimport sys\n\n")
  queries = [tok.encode(q, add_bos=False) for q in ("def walk(path):", "def main():",
                                                     "class Config:")]
  alone = [context + q for q in queries]
  plain = _rows(jaxdec.generate(model, alone, 32, stop_tokens=()))
  stop = tok.decode(plain[1])[6:10]
  kw = dict(stop_tokens=(), stop_strings=[stop], tokenizer=tok,
            repetition_penalty=[1.0, 1.0, 1.4], min_new_tokens=[0, 0, 5], logprobs=True)
  want = jaxdec.generate(model, alone, 32, **kw)
  steps = []
  got = jaxdec.parallel_generate(model, context, queries, 32, stream=steps.append, **kw)
  assert _rows(got) == _rows(want)
  assert int(want.lengths[1]) < 32 and _rows(want)[2] != plain[2]
  np.testing.assert_allclose(got.logprobs, want.logprobs, atol=1e-4)
  assert all(len(s) == len(queries) for s in steps)
  for r, row in enumerate(_rows(got)):
    assert np.concatenate([s[r] for s in steps]).tolist() == row


# ---- SSR ---------------------------------------------------------------------------------------

def test_ssr_controls_equal_generate_in_both_phases():
  """SSR's reasoning rows are the token loop's rows and its answer phase the speculative step,
  so with the same controls it gives generate's tokens and log-probabilities; a stop string
  from the answer phase and one from the reasoning phase both end where they complete."""
  from jaxdec.tasks import gsm_synth

  model, tok = jaxdec.load("zoo:gsm-ar"), jaxdec.load_tokenizer("zoo:gsm-ar")
  prompts = [tok.encode(p.prompt) for p in gsm_synth.problems("test", 3, 1)]
  ssr = jaxdec.spec.SSR.for_tokenizer(tok, range(32, 448, 32), answer_tokens=64, num_tokens=6)
  plain = jaxdec.generate(model, prompts, gsm_synth.GEN_LENGTH)
  texts = [tok.decode(r) for r in _rows(plain)]
  answer = texts[0].split("</think>")[1]
  stops = [answer[8:13], texts[1][20:24]]  # Row 0: in its answer; row 1: in its reasoning.
  kw = dict(stop_strings=stops, tokenizer=tok, repetition_penalty=[1.0, 1.0, 3.0], logprobs=True)
  want = jaxdec.generate(model, prompts, gsm_synth.GEN_LENGTH, **kw)
  steps = []
  got = jaxdec.ssr_generate(model, prompts, ssr, gsm_synth.GEN_LENGTH, stream=steps.append, **kw)
  assert _rows(got) == _rows(want)
  assert int(got.lengths[0]) < int(plain.lengths[0]) and "</think>" in tok.decode(_rows(got)[0])
  assert int(got.lengths[1]) < int(plain.lengths[1]) and "</think>" not in tok.decode(_rows(got)[1])
  row = _rows(got)[2]
  assert row != _rows(plain)[2][: len(row)]  # The penalty changed row 2.
  assert int(got.stats["answer_length"][0]) > 0 and int(got.stats["partial_answers"][0]) > 0
  np.testing.assert_allclose(got.logprobs, want.logprobs, atol=1e-4)
  for r, row in enumerate(_rows(got)):
    assert np.concatenate([s[r] for s in steps]).tolist() == row
