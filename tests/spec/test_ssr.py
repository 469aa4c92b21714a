import jax.numpy as jnp
import numpy as np
import pytest

import jaxdec
from jaxdec import spec
from jaxdec.spec.drafter import Context
from jaxdec.spec.ssr import SSR, SuffixCache, suffix_match
from jaxdec.tasks import gsm_synth


def _answers(spans, width=8, pad=0):
  """One row's spans -> (answers i32[1, N, W], lengths i32[1, N])."""
  answers = np.full((1, len(spans), width), pad, np.int32)
  for i, s in enumerate(spans):
    answers[0, i, :len(s)] = s
  return jnp.asarray(answers), jnp.asarray([[len(s) for s in spans]], jnp.int32)


def _seq(tokens, capacity=16):
  seq = np.zeros((1, capacity), np.int32)
  seq[0, :len(tokens)] = tokens
  return jnp.asarray(seq), jnp.asarray([len(tokens)], jnp.int32)


def _ctx(tokens):
  seq, total = _seq(tokens)
  return Context(seq=seq, total=total, hidden=None, cache=None, sampling=None, key=None,
                 rows=jnp.arange(1))


def test_suffix_match_prefers_longest_ngram_then_latest_answer_then_earliest():
  answers, lengths = _answers([[5, 6, 7, 8, 9], [1, 6, 7, 3, 6, 7, 4], [6, 7, 2]])
  seq, total = _seq([9, 9, 5, 6, 7])
  slot, start, found, n = suffix_match(answers, lengths, seq, total, max_ngram=3)
  assert (int(slot[0]), int(start[0]), bool(found[0]), int(n[0])) == (0, 3, True, 3)  # "5 6 7" -> 8
  seq, total = _seq([9, 9, 1, 6, 7])  # "1 6 7" only in answer 1; "6 7" in all three
  assert [int(x[0]) for x in suffix_match(answers, lengths, seq, total, 3)] == [1, 3, 1, 3]
  seq, total = _seq([9, 9, 4, 6, 7])  # Only "6 7": the latest answer (2) wins.
  assert [int(x[0]) for x in suffix_match(answers, lengths, seq, total, 3)] == [2, 2, 1, 2]
  seq, total = _seq([9, 9, 4, 3, 6, 7])  # max_ngram 4: "3 6 7" (answer 1, second occurrence)
  assert [int(x[0]) for x in suffix_match(answers, lengths, seq, total, 4)] == [1, 6, 1, 3]


def test_suffix_match_needs_a_following_token_and_a_valid_span():
  answers, lengths = _answers([[5, 6, 7], [1, 2]])
  seq, total = _seq([3, 6, 7])  # "6 7" ends answer 0: nothing follows; "7" likewise.
  assert not bool(suffix_match(answers, lengths, seq, total, 3)[2][0])
  seq, total = _seq([3, 3, 0])  # Padding past a span's length never matches.
  assert not bool(suffix_match(answers, lengths, seq, total, 3)[2][0])


def test_suffix_cache_drafts_from_answers_then_falls_back_to_the_sequence():
  answers, lengths = _answers([[5, 6, 7, 8, 9, 10]])
  cache = SuffixCache(answers, lengths, max_ngram=3, num_tokens=4)
  unaligned = cache.init(None, None, 0, None)
  draft, _ = cache.propose(unaligned, _ctx([2, 3, 4, 11, 2, 3, 5, 6]))
  np.testing.assert_array_equal(draft.tokens[0], [7, 8, 9, 10])
  np.testing.assert_array_equal(draft.valid[0], [True] * 4)
  ctx = _ctx([2, 3, 4, 11, 2, 3])  # Not in the answer: "2 3" earlier in the sequence.
  draft, _ = cache.propose(unaligned, ctx)
  np.testing.assert_array_equal(draft.tokens[0, :4], [4, 11, 2, 3])
  np.testing.assert_array_equal(draft.valid[0], [True] * 4)
  draft, _ = SuffixCache(answers, lengths, 3, 4, lookup=False).propose(unaligned, ctx)
  assert not np.asarray(draft.valid).any()


def test_suffix_cache_stays_aligned_after_a_wrong_token():
  """A partial answer "= 7 6 8 . #" against a committed "= 6": no 2-token match, so the draft
  continues from the alignment (the token after the one that differed), and the alignment
  advances with every committed token."""
  answers, lengths = _answers([[20, 7, 6, 8, 30, 31]])
  cache = SuffixCache(answers, lengths, max_ngram=3, num_tokens=3)
  state = (jnp.zeros((1,), jnp.int32), jnp.asarray([2], jnp.int32))  # Next token <-> index 2.
  draft, state = cache.propose(state, _ctx([9, 20, 6]))
  np.testing.assert_array_equal(draft.tokens[0], [6, 8, 30])
  assert [int(x[0]) for x in state] == [0, 2]
  feedback = spec.Feedback(draft=draft, verdict=None, count=jnp.asarray([2], jnp.int32),
                           total=None, active=jnp.asarray([True]), logits=None)
  assert [int(x[0]) for x in cache.update(state, feedback)] == [0, 4]
  # A match of min_match tokens or more overrides the alignment.
  draft, state = cache.propose(state, _ctx([9, 20, 7]))
  np.testing.assert_array_equal(draft.tokens[0], [6, 8, 30])
  assert [int(x[0]) for x in state] == [0, 2]


def _tiny_ssr(model, prompts, **options):
  """Close and line-end tokens the random model actually emits, so both phases run."""
  ref = jaxdec.generate(model, prompts, max_new_tokens=40, stop_tokens=())
  out = np.asarray(ref.tokens)
  values, counts = np.unique(out[:, 4:], return_counts=True)
  line_end, close = (int(v) for v in values[np.argsort(-counts)][:2])
  return ref, SSR(budgets=np.asarray([3, 8, 14]), close_tokens=(close,), line_end=line_end,
                  **options)


@pytest.mark.parametrize("options", [dict(answer_tokens=6, num_tokens=4),
                                     dict(answer_tokens=3, num_tokens=2, preempt=True),
                                     dict(answer_tokens=8, num_tokens=5, lookup=False)])
def test_ssr_equals_greedy_on_a_ragged_batch(model, options):
  prompts = [[5, 9, 3], [7], [2, 8, 8, 4, 1, 6], [3, 3]]
  ref, ssr = _tiny_ssr(model, prompts, **options)
  out = jaxdec.ssr_generate(model, prompts, ssr, max_new_tokens=40, stop_tokens=())
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  np.testing.assert_array_equal(out.lengths, ref.lengths)
  s = {k: np.asarray(v) for k, v in out.stats.items()}
  np.testing.assert_array_equal(s["reasoning_length"] + s["answer_length"], out.lengths)
  np.testing.assert_array_equal(s["nfe"], s["reason_forwards"] + s["answer_forwards"])
  assert (s["answer_length"] > 0).any() and (s["partial_answers"] > 0).any()
  for i, p in enumerate(prompts):  # Each row as it would be alone.
    alone = jaxdec.ssr_generate(model, [p], ssr, max_new_tokens=40, stop_tokens=())
    np.testing.assert_array_equal(alone.tokens[0], out.tokens[i])
    assert int(alone.stats["answer_forwards"][0]) == int(s["answer_forwards"][i])


@pytest.mark.slow  # on a zoo model; the tiny-model tests above check SSR == greedy in CI
def test_ssr_equals_greedy_on_gsm_ar_and_drafts_long_prefixes():
  model, tok = jaxdec.load("zoo:gsm-ar"), jaxdec.load_tokenizer("zoo:gsm-ar")
  prompts = [tok.encode(p.prompt) for p in gsm_synth.problems("test", 3, 0)]
  ssr = SSR.for_tokenizer(tok, range(32, 448, 32), answer_tokens=64, num_tokens=8)
  assert ssr.close_tokens == tuple(tok.encode("</think>\n", add_bos=False))
  ref = jaxdec.generate(model, prompts, max_new_tokens=gsm_synth.GEN_LENGTH)
  out = jaxdec.ssr_generate(model, prompts, ssr, max_new_tokens=gsm_synth.GEN_LENGTH)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  np.testing.assert_array_equal(out.lengths, ref.lengths)
  s = {k: np.asarray(v) for k, v in out.stats.items()}
  assert (s["partial_answers"] >= 1).all() and (s["answer_length"] > 10).all()
  # The first answer step right after "</think>\n" accepts a long stretch of the latest answer.
  assert (s["accepted"][:, 0] >= 4).any()
  assert s["answer_acceptance_length"].mean() > 2.0
  for i in range(3):
    text = tok.decode(np.asarray(out.tokens[i, :int(out.lengths[i])]).tolist())
    assert "</think>" in text


def test_bad_inputs(model):
  good = dict(close_tokens=(3,), line_end=4)
  for budgets, what in (([], "non-empty"), ([5, 5], "increasing"), ([0, 4], "positive"),
                        ([1.5], "ints")):
    with pytest.raises(ValueError, match=what):
      jaxdec.ssr_generate(model, [[1, 2]], SSR(budgets=np.asarray(budgets), **good), 8)
  with pytest.raises(ValueError, match="token ids"):
    jaxdec.ssr_generate(model, [[1, 2]], SSR(np.asarray([2]), (10 ** 6,), 4), 8)
  with pytest.raises(ValueError, match="answer_tokens"):
    jaxdec.ssr_generate(model, [[1, 2]], SSR(np.asarray([2]), answer_tokens=0, **good), 8)
  with pytest.raises(TypeError, match="jaxdec.spec.SSR"):
    jaxdec.ssr_generate(model, [[1, 2]], [8, 16], 8)
  tok = jaxdec.load_tokenizer("zoo:gsm-ar")
  with pytest.raises(ValueError, match="one token"):
    SSR.for_tokenizer(tok, [8], line_end="\n\nQuestion")
  assert spec.SSR is SSR
