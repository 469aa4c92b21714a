"""Every control of `jaxdec.diffusion_generate` (stop strings, min_new_tokens, repetition penalty,
log-probabilities, streaming) on zoo:gsm-dlm, checked against the run without it, against
host-side readings of the rule, and, decoding one token per forward left to right (whose
causal stream makes that the AR model's greedy decoding), against `jaxdec.generate` and a plain
forward; and on a tiny random model, the rules inside a scheduler's lookahead forwards."""

import collections

import numpy as np
import pytest

import jaxdec
from jaxdec import decoding, diffusion
from jaxdec.model import Bidirectional
from tiny import tiny_model

GEN = dict(gen_length=64, block_length=32, steps=64)
EOS = 2
QUESTIONS = ["Question: Ann has 3 apples and buys 4 more. How many apples does she have?"
             "\n<think>\n",
             "Question: Tom has 12 pens and gives away 5. How many pens are left?\n<think>\n"]


@pytest.fixture(scope="module")
def dlm():
  model = jaxdec.load("zoo:gsm-dlm")
  tok = jaxdec.load_tokenizer("zoo:gsm-dlm")
  return model, tok, [tok.encode(q) for q in QUESTIONS]


def _parallel(**kw):
  """Threshold commits on the (exact, block-causal) dual cache: rows finish blocks apart."""
  return dict(GEN, scheduler=diffusion.Threshold(0.9), cache=diffusion.DualCache(), **kw)


def _serial(**kw):
  """One token per forward, left to right: on gsm-dlm, its causal stream's greedy decoding."""
  return dict(GEN, scheduler=diffusion.FixedSteps(confidence=diffusion.LeftToRight()),
              cache=diffusion.DualCache(), **kw)


_runs = {}


def _run(dlm, name, **kw):
  """Runs shared by the tests (each compiles once per module)."""
  if name not in _runs:
    model, _, prompts = dlm
    _runs[name] = jaxdec.diffusion_generate(model, prompts, **kw)
  return _runs[name]


def _tokens(out, row):
  return np.asarray(out.tokens[row]).tolist()


def _completes(tok, tokens, text):
  """Tokens up to and including the one that completes `text`, read left to right (None)."""
  for k in range(1, len(tokens) + 1):
    if text in tok.decode(tokens[:k]):
      return k
  return None


def _stop_strings(dlm):
  """Two strings: one completing within row 0's first block, and row 1's text across its
  blocks' boundary (4 tokens before it, 1 after), so the match carries bytes between blocks."""
  _, tok, _ = dlm
  base = _run(dlm, "parallel", **_parallel())
  return ["0=", tok.decode(_tokens(base, 1)[28:33])]


def _ends(tok, tokens, strings):
  found = [k for k in (_completes(tok, tokens, s) for s in strings) if k is not None]
  return min(found, default=len(tokens))


def test_stop_strings_cut_lengths_where_the_string_completes(dlm):
  model, tok, _ = dlm
  base = _run(dlm, "parallel", **_parallel())
  strings = _stop_strings(dlm)
  ends = [_ends(tok, _tokens(base, r), strings) for r in range(2)]
  assert ends[0] <= 32 and ends[1] == 33  # Row 1's string completes across the boundary.
  kw = _parallel(stop_strings=strings, tokenizer=tok)
  stopped = _run(dlm, "parallel stop strings", **kw)
  np.testing.assert_array_equal(stopped.tokens, base.tokens)  # Only lengths are cut.
  assert np.asarray(stopped.lengths).tolist() == ends
  early = jaxdec.diffusion_generate(model, dlm[2], stop_early=True, **kw)
  assert np.asarray(early.lengths).tolist() == ends
  # Row 0 stops once it finishes block 0 (the rest is pad, no forward spent on it); row 1 runs on.
  assert np.asarray(early.stats["decoded"]).tolist() == [32, 64]
  assert int(early.stats["nfe"][0]) < int(base.stats["nfe"][0])
  np.testing.assert_array_equal(early.tokens[0, :32], base.tokens[0, :32])
  assert set(_tokens(early, 0)[32:]) == {model.config.tokens.pad}
  np.testing.assert_array_equal(early.tokens[1], base.tokens[1])


def test_min_new_tokens_pushes_the_stop_token_past_the_minimum(dlm):
  base = _run(dlm, "serial", **_serial())
  first = _tokens(base, 0).index(EOS)
  assert first < 60 and int(base.lengths[0]) == first + 1 and EOS not in _tokens(base, 1)
  out = _run(dlm, "serial min_new_tokens", **_serial(min_new_tokens=60))
  row = _tokens(out, 0)
  assert EOS not in row[:60]
  assert row[:first] == _tokens(base, 0)[:first]  # Unchanged where EOS was not the choice.
  assert int(out.lengths[0]) == (row.index(EOS, 60) + 1 if EOS in row[60:] else 64)
  np.testing.assert_array_equal(out.tokens[1], base.tokens[1])


def test_repetition_penalty_is_the_ar_rule_when_decoding_left_to_right(dlm):
  """Left to right, the tokens committed on the canvas are exactly those before the position
  being proposed, so the reading is the AR rule: the output equals `generate`'s."""
  model, _, prompts = dlm
  base = _run(dlm, "serial", **_serial())
  out = _run(dlm, "serial penalty", **_serial(repetition_penalty=1.3))
  assert not np.array_equal(out.tokens, base.tokens)
  ar = jaxdec.generate(model, prompts, 64, repetition_penalty=1.3, stop_tokens=())
  np.testing.assert_array_equal(out.tokens, ar.tokens)


def _log_softmax(logits):
  logits = logits - logits.max(axis=-1, keepdims=True)
  return logits - np.log(np.exp(logits).sum(axis=-1, keepdims=True))


def test_logprobs_equal_a_plain_forward_of_the_causal_stream(dlm):
  model, _, prompts = dlm
  base = _run(dlm, "serial", **_serial())
  out = _run(dlm, "serial logprobs", **_serial(logprobs=True))
  np.testing.assert_array_equal(out.tokens, base.tokens)
  assert base.logprobs is None and out.logprobs.shape == (2, 64)
  stream = decoding.ar_view(model)
  for r, prompt in enumerate(prompts):
    seq = np.asarray(prompt + _tokens(out, r), np.int32)[None]
    logits = np.asarray(jaxdec.forward(stream, seq)[0], np.float64)
    p, n = len(prompt), int(out.lengths[r])
    want = _log_softmax(logits)[np.arange(p - 1, p + 63), seq[0, p:]]
    np.testing.assert_allclose(np.asarray(out.logprobs[r, :n]), want[:n], atol=1e-4)
    assert not np.asarray(out.logprobs[r, n:]).any()  # 0 past lengths.
  assert int(out.lengths[0]) < 64


def test_streaming_delivers_each_finished_block_cut_at_the_stop(dlm):
  model, tok, prompts = dlm
  kw = _parallel(stop_strings=_stop_strings(dlm), tokenizer=tok)
  want = _run(dlm, "parallel stop strings", **kw)
  calls = []
  out = jaxdec.diffusion_generate(model, prompts, stream=calls.append, **kw)
  for field in ("tokens", "lengths"):
    np.testing.assert_array_equal(getattr(out, field), getattr(want, field))
  np.testing.assert_array_equal(out.stats["nfe"], want.stats["nfe"])
  assert all(len(call) == 2 for call in calls)
  for r in range(2):
    pieces = [call[r] for call in calls if len(call[r])]
    assert np.concatenate(pieces).tolist() == _tokens(want, r)[: int(want.lengths[r])]
  # Row 0 ended in block 0: it sends one piece; row 1 one per block; they finish apart.
  assert [sum(len(call[r]) > 0 for call in calls) for r in range(2)] == [1, 2]
  assert any(len(call[0]) == 0 for call in calls) and any(len(call[1]) == 0 for call in calls)


def test_min_new_tokens_rules_a_schedulers_lookahead_logits_too():
  """RPS with `ripple` commits on its lookahead forward's logits: they obey the rules as well, so
  the tokens a plain run uses most, made stop tokens, appear nowhere before min_new_tokens."""
  model = tiny_model(attention=Bidirectional(), architecture="llada", std=0.5, tokens=dict(mask=5))
  prompts = [[7, 8, 9], [10, 11, 12, 13, 14], [20, 30]]
  kw = dict(gen_length=16, block_length=8, steps=16, scheduler=diffusion.RipplePivot(0.5))
  base = jaxdec.diffusion_generate(model, prompts, stop_tokens=(), **kw)
  used = collections.Counter(np.asarray(base.tokens).ravel().tolist())
  common = [t for t, _ in used.most_common(4)]
  out = jaxdec.diffusion_generate(model, prompts, stop_tokens=common, min_new_tokens=16, **kw)
  assert not np.isin(np.asarray(out.tokens), common).any()
  assert np.asarray(out.lengths).tolist() == [16, 16, 16]


def test_controls_are_validated_as_generate_validates_them(dlm):
  model, tok, prompts = dlm
  with pytest.raises(ValueError, match="tokenizer"):
    jaxdec.diffusion_generate(model, prompts, stop_strings=["0="], **_parallel())
  with pytest.raises(ValueError, match="repetition_penalty"):
    jaxdec.diffusion_generate(model, prompts, repetition_penalty=0.0, **_parallel())
  with pytest.raises(ValueError, match="min_new_tokens"):
    jaxdec.diffusion_generate(model, prompts, min_new_tokens=[1, 2, 3], **_parallel())
  with pytest.raises(TypeError, match="logprobs"):
    jaxdec.diffusion_generate(model, prompts, logprobs="yes", **_parallel())
  with pytest.raises(TypeError, match="stream"):
    jaxdec.diffusion_generate(model, prompts, stream="print", **_parallel())
