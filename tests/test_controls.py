"""Controls of the AR and speculative loops: log-probabilities, stop strings, min_new_tokens,
repetition penalty, streaming, and the text-in / text-out `jaxdec.complete`."""

import jax
import numpy as np
import pytest

import jaxdec
from jaxdec import spec
from tiny import tiny_model

NEW = 24


@pytest.fixture(scope="module")
def draft():
  return tiny_model(seed=1, hidden_size=32, intermediate_size=64, num_heads=2, num_kv_heads=1)


@pytest.fixture(scope="module")
def zoo():
  return jaxdec.load("zoo:pycode-ar"), jaxdec.load_tokenizer("zoo:pycode-ar")


def _prompts(vocab=128):
  rng = np.random.RandomState(0)
  return [np.tile(rng.randint(2, vocab, 4), n)[: 3 * n].tolist() for n in (1, 4, 2)]


def _drafters(draft):
  """A chain drafter and a tree drafter (the per-node rules differ between the two)."""
  return {"draft_model": spec.DraftModel(draft, num_tokens=3),
          "adapld": spec.AdaPLD(max_ngram=3, min_ngram=2, depth=3, branches=3)}


def _logits(model, seq):
  """The causal model's logits f32[len(seq), V], from one fixed-width forward (right padding
  does not reach earlier positions; one compiled program for every length)."""
  padded = np.zeros((1, 64), np.int32)
  padded[0, : len(seq)] = seq
  return jaxdec.forward(model, padded)[0, : len(seq)]


def _reference(model, prompt, new, *, penalty=1.0, min_new=0, stops=(1,)):
  """Greedy decoding by a host loop over full forwards, with transformers' rules written out."""
  seq = list(prompt)
  out = []
  for _ in range(new):
    logits = np.asarray(_logits(model, seq)[-1], np.float64)
    seen = np.zeros(logits.shape, bool)
    seen[seq] = True
    logits = np.where(seen, np.where(logits > 0, logits / penalty, logits * penalty), logits)
    if len(out) < min_new:
      logits[list(stops)] = -np.inf
    token = int(np.argmax(logits))
    out.append(token)
    seq.append(token)
    if token in stops:
      break
  return out


def _rows(out):
  return [np.asarray(out.tokens[r, : out.lengths[r]]).tolist() for r in range(out.tokens.shape[0])]


def test_logprobs_are_the_log_softmax_of_the_models_logits(model, draft):
  prompts = _prompts()
  outs = {"ar": jaxdec.generate(model, prompts, NEW, logprobs=True),
          "sampled": jaxdec.generate(model, prompts, NEW, logprobs=True, key=jax.random.key(3),
                                     sampling=jaxdec.Sampling.create(1.0, top_k=20))}
  for name, drafter in _drafters(draft).items():
    outs[name] = jaxdec.speculative_generate(model, prompts, drafter, max_new_tokens=NEW,
                                             logprobs=True)
  for name, out in outs.items():
    for r, prompt in enumerate(prompts):
      n = int(out.lengths[r])
      full = prompt + np.asarray(out.tokens[r, :n]).tolist()
      logp = jax.nn.log_softmax(_logits(model, full), -1)
      want = [logp[len(prompt) - 1 + i, full[len(prompt) + i]] for i in range(n)]
      np.testing.assert_allclose(out.logprobs[r, :n], want, atol=2e-5, err_msg=name)
      assert (np.asarray(out.logprobs[r, n:]) == 0).all()
  assert jaxdec.generate(model, prompts, NEW).logprobs is None


def test_min_new_tokens_and_repetition_penalty_match_a_host_reference(model, draft):
  prompts = _prompts()
  # Stop on each row's third greedy token, so min_new_tokens has something to suppress.
  plain = _rows(jaxdec.generate(model, prompts, NEW, stop_tokens=()))
  stops = sorted({row[2] for row in plain})
  settings = dict(repetition_penalty=[1.0, 1.5, 0.7], min_new_tokens=[0, 6, 3])
  out = jaxdec.generate(model, prompts, 12, stop_tokens=stops, **settings)
  for r, prompt in enumerate(prompts):
    want = _reference(model, prompt, 12, penalty=settings["repetition_penalty"][r],
                      min_new=settings["min_new_tokens"][r], stops=stops)
    assert _rows(out)[r] == want, r
  assert _rows(out)[0] == plain[0][:3]  # Row 0 has neither rule: it stops at its third token.
  for name, drafter in _drafters(draft).items():
    got = jaxdec.speculative_generate(model, prompts, drafter, max_new_tokens=12,
                                      stop_tokens=stops, **settings)
    assert _rows(got) == _rows(out), name


def test_stop_strings_end_where_the_string_completes(zoo):
  model, tok = zoo
  prompts = [tok.encode(t) for t in ("def fib(n):\n", "import os\n", "class A:\n    def")]
  plain = jaxdec.generate(model, prompts, 48, stop_tokens=())
  texts = [tok.decode(r) for r in _rows(plain)]
  stop = texts[1][5:9]  # A piece of row 1's own text (where it lies in tokens is not chosen).
  out = jaxdec.generate(model, prompts, 48, stop_tokens=(), stop_strings=[stop, "\n\n\n"],
                        tokenizer=tok)
  runs = {"ar": out}
  runs["lookup"] = jaxdec.speculative_generate(
      model, prompts, spec.PromptLookup(max_ngram=3, num_tokens=4), max_new_tokens=48,
      stop_tokens=(), stop_strings=[stop, "\n\n\n"], tokenizer=tok)
  for name, got in runs.items():
    for r, row in enumerate(_rows(got)):
      assert row == _rows(plain)[r][: len(row)], (name, r)  # A prefix of the unstopped run.
      text, before = tok.decode(row), tok.decode(row[:-1])
      hit = any(s in text for s in (stop, "\n\n\n"))
      assert hit or len(row) == 48, (name, r, text)
      if hit:
        assert not any(s in before for s in (stop, "\n\n\n")), (name, r)
  assert int(out.lengths[1]) < 48
  # min_new_tokens postpones a stop string.
  late = jaxdec.generate(model, prompts[1:2], 48, stop_tokens=(), stop_strings=[stop],
                         tokenizer=tok, min_new_tokens=int(out.lengths[1]))
  assert int(late.lengths[0]) > int(out.lengths[1])


def test_streaming_delivers_every_token_and_changes_nothing(model, draft):
  prompts = _prompts()
  sampling, key = jaxdec.Sampling.create(0.8), jax.random.key(1)
  for name, call in {
      "ar": lambda **kw: jaxdec.generate(model, prompts, NEW, sampling, key, **kw),
      "spec": lambda **kw: jaxdec.speculative_generate(
          model, prompts, _drafters(draft)["draft_model"], max_new_tokens=NEW, **kw)}.items():
    steps = []
    streamed, plain = call(stream=steps.append), call()
    np.testing.assert_array_equal(streamed.tokens, plain.tokens)
    for r, row in enumerate(_rows(plain)):
      assert np.concatenate([s[r] for s in steps]).tolist() == row, (name, r)
    assert all(len(s) == len(prompts) for s in steps)


@pytest.mark.parametrize("kwargs, error, message", [
    (dict(repetition_penalty=0.0), ValueError, "repetition_penalty"),
    (dict(repetition_penalty=[1.0, 2.0]), ValueError, "repetition_penalty"),
    (dict(min_new_tokens=-1), ValueError, "min_new_tokens"),
    (dict(min_new_tokens=1.5), TypeError, "min_new_tokens"),
    (dict(stop_strings=["x"]), ValueError, "tokenizer"),
    (dict(logprobs="yes"), TypeError, "logprobs"),
    (dict(stream=3), TypeError, "stream"),
])
def test_bad_controls_raise_clear_errors(model, kwargs, error, message):
  with pytest.raises(error, match=message):
    jaxdec.generate(model, _prompts(), 4, **kwargs)


def test_stop_strings_are_checked(zoo):
  model, tok = zoo
  with pytest.raises(TypeError, match="stop_strings"):
    jaxdec.generate(model, [tok.encode("x")], 4, stop_strings="\n", tokenizer=tok)
  with pytest.raises(TypeError, match="stop_strings"):
    jaxdec.generate(model, [tok.encode("x")], 4, stop_strings=[""], tokenizer=tok)


def test_complete_text_in_text_out(zoo):
  model, tok = zoo
  texts = ["def add(a, b):\n", "for i in range("]
  out = jaxdec.generate(model, [tok.encode(t) for t in texts], 32)
  assert jaxdec.complete(model, tok, texts, 32) == [tok.decode(r) for r in _rows(out)]
  pieces = {0: "", 1: ""}
  streamed = jaxdec.complete(model, tok, texts, 32, stream=lambda r, p: pieces.__setitem__(
      r, pieces[r] + p))
  assert [pieces[0], pieces[1]] == streamed
  draft = jaxdec.load("zoo:pycode-draft")
  assert jaxdec.complete(model, tok, texts, 32, drafter=spec.DraftModel(draft, 3)) == streamed
  stop = streamed[0][3:6]
  cut = jaxdec.complete(model, tok, texts[:1], 32, stop_strings=[stop])[0]
  assert cut.endswith(stop) and cut == streamed[0][: streamed[0].find(stop) + len(stop)]
  with pytest.raises(TypeError, match="list of strings"):
    jaxdec.complete(model, tok, "def f():", 8)
