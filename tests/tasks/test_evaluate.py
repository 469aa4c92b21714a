"""jaxdec.tasks.evaluate: scoring any decoder on gsm-synth problems."""

import numpy as np
import pytest

from jaxdec.decoding import DecodeOutput
from jaxdec.tasks import evaluate, gsm_synth


@pytest.fixture(scope="module")
def tokenizer():
  from jaxdec.train.tokenizer import train_bpe

  return train_bpe([p.text for p in gsm_synth.problems("train", 300, seed=0)], 512,
                   individual_digits=True)


def _oracle(tokenizer, problems, wrong=(), width=700):
  """A decoder that writes each problem's reference solution (then EOS and junk), or a wrong
  final answer for the problems at the indices in `wrong`; it records the batches it saw."""
  by_prompt = {}
  for i, p in enumerate(problems):
    solution = p.solution if i not in wrong else p.solution.replace(f"#### {p.answer}",
                                                                    f"#### {p.answer + 1}")
    by_prompt[tuple(tokenizer.encode(p.prompt))] = tokenizer.encode(solution, add_bos=False)
  calls = []

  def decode(prompts):
    calls.append(len(prompts))
    tokens = np.full((len(prompts), width), 7, np.int32)
    lengths = np.zeros((len(prompts),), np.int32)
    for row, prompt in enumerate(prompts):
      ids = by_prompt[tuple(prompt)] + [tokenizer.eos_id]
      tokens[row, : len(ids)], lengths[row] = ids, len(ids)
    return DecodeOutput(tokens=tokens, lengths=lengths,
                        stats={"nfe": np.maximum(lengths // 2, 1)})
  return decode, calls


def test_solve_scores_exact_answers_and_groups_them(tokenizer):
  problems = gsm_synth.problems("test", 10, seed=1)
  decode, calls = _oracle(tokenizer, problems, wrong={2, 5, 7})
  result = evaluate.solve(decode, tokenizer, problems, batch_size=4)
  assert result.correct == [i not in {2, 5, 7} for i in range(10)]
  assert result.accuracy == pytest.approx(0.7)
  assert calls == [4, 4, 4, 4]  # Compile pass, then 3 batches; the last one padded to 4.
  assert [c.split("####")[-1].strip() for c in result.completions][:2] == [
      str(p.answer) for p in problems[:2]]
  summary = result.summary()
  assert summary["problems"] == 10 and summary["tokens/forward"] == pytest.approx(
      result.lengths.sum() / result.forwards.sum())
  groups = result.by(lambda p: len(p.steps))
  assert sum(n for _, n in groups.values()) == 10
  for steps, (accuracy, n) in groups.items():
    members = [ok for p, ok in zip(problems, result.correct) if len(p.steps) == steps]
    assert (accuracy, n) == (np.mean(members), len(members))


def test_solve_grouped_by_length_batches_similar_problems_and_keeps_the_order(tokenizer):
  problems = gsm_synth.problems("test", 9, seed=2)
  decode, _ = _oracle(tokenizer, problems, wrong={1, 6})
  plain = evaluate.solve(decode, tokenizer, problems, batch_size=3)
  seen = []

  def recording(prompts):
    out = decode(prompts)
    seen.append(out.lengths.tolist())
    return out

  grouped = evaluate.solve(recording, tokenizer, problems, batch_size=3,
                           group_by=lambda p: len(p.solution))
  assert grouped.problems == problems and grouped.correct == plain.correct
  assert grouped.completions == plain.completions
  np.testing.assert_array_equal(grouped.lengths, plain.lengths)
  np.testing.assert_array_equal(grouped.forwards, plain.forwards)
  batches = seen[1:]  # After the compile pass: shortest solutions first.
  assert max(batches[0]) <= min(batches[1]) and max(batches[1]) <= min(batches[2])
  assert plain.lengths.tolist() != sorted(plain.lengths.tolist())  # Grouping changed the order.


def test_solve_rejects_bad_arguments(tokenizer):
  decode, _ = _oracle(tokenizer, [])
  with pytest.raises(ValueError, match="at least one problem"):
    evaluate.solve(decode, tokenizer, [])
  with pytest.raises(ValueError, match="batch_size must be >= 1, got 0"):
    evaluate.solve(decode, tokenizer, gsm_synth.problems("test", 1), batch_size=0)


def test_calibrate_picks_the_cheapest_decoder_within_tolerance(tokenizer):
  problems = gsm_synth.problems("validation", 10, seed=3)

  def costing(wrong, forwards):
    decode, _ = _oracle(tokenizer, problems, wrong=wrong)
    def run(prompts):
      out = decode(prompts)
      return DecodeOutput(out.tokens, out.lengths, {"nfe": np.full(len(prompts), forwards)})
    return run

  decoders = {"base": costing((), 100), "close": costing({1}, 40), "cheap but wrong":
              costing({1, 2, 3}, 10), "costly": costing((), 60)}
  best, results = evaluate.calibrate(decoders, tokenizer, problems, "base", tolerance=0.1,
                                     batch_size=5)
  assert best == "close" and results["close"].accuracy == pytest.approx(0.9)
  best, _ = evaluate.calibrate(decoders, tokenizer, problems, "base", tolerance=0.0, batch_size=5)
  assert best == "costly"
  with pytest.raises(ValueError, match="baseline 'llada' is not one of the decoders"):
    evaluate.calibrate(decoders, tokenizer, problems, "llada")
