"""The gsm-synth zoo models solve problems: accuracy recomputed here on a small sample of the
test split with the shipped weights (never read from zoo.json), and the decoders that must be
lossless are checked against greedy AR."""

import numpy as np
import pytest

import jaxdec
from jaxdec import diffusion, spec, zoo
from jaxdec.tasks import evaluate, gsm_synth

# Each model's checks run wherever it is installed (all three ship; a retrained checkout may
# lack one).
INSTALLED = set(zoo.available())
pytestmark = pytest.mark.skipif("gsm-ar" not in INSTALLED, reason="zoo:gsm-ar is not installed")
needs = lambda name: pytest.mark.skipif(name not in INSTALLED, reason=f"zoo:{name} not installed")

GEN = gsm_synth.GEN_LENGTH
SAMPLE = 16  # Test problems per check (the note's figures are on 200 per split).
# Floors for the sample, set below what the shipped weights scored on it (deterministic greedy
# decoding; the margin covers float differences across platforms). See MEASURED.
FLOORS = {"gsm-ar": 13 / 16, "gsm-dlm LLaDA + dual": 10 / 16,
          "gsm-dlm threshold 0.9 + dual": 5 / 16, "gsm-mtp tau": 2.0, "gsm-kforcing tau": 3.0,
          "gsm-kforcing first forward right": 14 / 16, "gsm-eagle3 chain tau": 6.0,
          "gsm-eagle3 dynamic tau": 6.0}
# The shipped weights on the sample (x86 CPU, JAX 0.10.2).
MEASURED = {"gsm-ar": 15 / 16, "gsm-dlm LLaDA + dual": 12 / 16,
            "gsm-dlm threshold 0.9 + dual": 7 / 16}


@pytest.fixture(scope="module")
def problems():
  return gsm_synth.problems("test", SAMPLE, 0)


@pytest.fixture(scope="module")
def tokenizer():
  return jaxdec.load_tokenizer("zoo:gsm-ar")


@pytest.fixture(scope="module")
def ar():
  return jaxdec.load("zoo:gsm-ar")


@pytest.fixture(scope="module")
def ar_result(ar, tokenizer, problems):
  return evaluate.solve(lambda p: jaxdec.generate(ar, p, max_new_tokens=GEN), tokenizer,
                        problems, batch_size=SAMPLE)


def test_gsm_models_share_the_task_tokenizer(tokenizer):
  for name in sorted(INSTALLED & {"gsm-draft", "gsm-dlm"}):
    assert jaxdec.load_tokenizer(f"zoo:{name}").backend.to_str() == tokenizer.backend.to_str()
  ids = tokenizer.encode("Sam has 4071 pens.", add_bos=False)
  assert sum(tokenizer.decode([i]).isdigit() for i in ids) == 4  # One token per digit.


def test_gsm_ar_solves_test_problems(ar_result):
  assert ar_result.accuracy >= FLOORS["gsm-ar"]
  assert all("</think>" in c for c in ar_result.completions)  # It writes the task's format.


@needs("gsm-dlm")
@pytest.mark.parametrize("name, scheduler", [
    # Quality checks of the shipped weights, 40-70 s each: the samplers' rules are checked against
    # LLaDA's reference in CI (tests/diffusion/test_diffusion_zoo.py, test_diffusion_reference.py)
    # and the caches on block-causal attention
    # (tests/train/test_block_diffusion.py).
    pytest.param("gsm-dlm LLaDA + dual", diffusion.FixedSteps(), marks=pytest.mark.slow),
    pytest.param("gsm-dlm threshold 0.9 + dual", diffusion.Threshold(0.9), marks=pytest.mark.slow)])
def test_gsm_dlm_solves_test_problems(tokenizer, problems, name, scheduler):
  """The dual cache is exact for gsm-dlm's block-causal attention, so the LLaDA row is LLaDA's
  one-token-per-forward sampler itself, at a window's cost per forward; a batch gives each row
  its own tokens, and rows whose blocks end at different steps never wait for each other."""
  dlm = jaxdec.load("zoo:gsm-dlm")
  decode = lambda p: jaxdec.diffusion_generate(
      dlm, p, gen_length=GEN, block_length=32, steps=GEN, scheduler=scheduler,
      cache=diffusion.DualCache(), stop_early=True)
  # One row at a time: on two CPU cores a batch of 16 is compute-bound and runs until its
  # longest row ends (measured: 157 s for both checks batched, 66 s row by row; same tokens).
  result = evaluate.solve(decode, tokenizer, problems, batch_size=1)
  assert result.accuracy >= FLOORS[name]
  if isinstance(scheduler, diffusion.Threshold):  # Parallel commits may even break the format.
    assert result.tokens_per_forward >= 2.0
  else:
    assert all("</think>" in c for c in result.completions)


@needs("gsm-draft")
def test_gsm_draft_speculation_is_lossless_and_accepts_drafts(ar, tokenizer, problems):
  prompts = [tokenizer.encode(p.prompt) for p in problems[:4]]
  ref = jaxdec.generate(ar, prompts, max_new_tokens=GEN)
  out = jaxdec.speculative_generate(ar, prompts, spec.DraftModel(jaxdec.load("zoo:gsm-draft"), 4),
                                    max_new_tokens=GEN)
  np.testing.assert_array_equal(out.lengths, ref.lengths)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert float(np.mean(out.stats["acceptance_length"])) > 2.0


@needs("gsm-mtp")
@pytest.mark.slow  # test_zoo checks pycode-mtp's heads the same way
def test_gsm_mtp_heads_predict_and_speculate_losslessly(ar, tokenizer, problems):
  """The heads' per-rank accuracy recomputed on validation rows (the shipped tree is built from
  it), and their speculation equal to greedy AR with several tokens per target forward."""
  from jaxdec.configs import load_config
  from jaxdec.configs.zoo import gsm_ar
  from jaxdec.train.mtp import head_accuracy

  drafter = jaxdec.load_drafter("zoo:gsm-mtp")
  rows = gsm_ar.DATA.validation(tokenizer, load_config("zoo:gsm-mtp").eval_windows)
  accuracy = head_accuracy(drafter.params, ar, rows, ranks=4)  # The rows the export measured on.
  recorded = np.asarray(zoo.metadata(zoo.resolve("gsm-mtp"))["eval"]["head_accuracy"])[:, :4]
  np.testing.assert_allclose(accuracy, recorded, atol=2e-3)
  assert np.all(accuracy[:, 0] > 0.5)
  prompts = [tokenizer.encode(p.prompt) for p in problems[:4]]
  ref = jaxdec.generate(ar, prompts, max_new_tokens=GEN)
  for heads in (drafter, jaxdec.load_drafter("zoo:gsm-mtp", entropy_switching=True)):
    out = jaxdec.speculative_generate(ar, prompts, heads, max_new_tokens=GEN)
    np.testing.assert_array_equal(out.lengths, ref.lengths)
    np.testing.assert_array_equal(out.tokens, ref.tokens)
    assert float(np.mean(out.stats["acceptance_length"])) > FLOORS["gsm-mtp tau"]


@needs("gsm-kforcing")
@pytest.mark.slow  # K-Forcing is checked on tiny models in tests/spec
def test_gsm_kforcing_drafts_losslessly_and_decodes_alone(ar, tokenizer, problems):
  """As a drafter: equal to greedy AR with several tokens per target forward. Alone (lossy):
  four tokens per forward, the first forward's four equal to greedy AR's first four (an
  untrained noise embedding gets the later three wrong). Its answers are wrong: one wrong digit
  in a ~200-token scratchpad spoils an answer, and each later slot errs ~20% of the time."""
  student = jaxdec.load_push_forward("zoo:gsm-kforcing")
  prompts = [tokenizer.encode(p.prompt) for p in problems]
  ref = jaxdec.generate(ar, prompts[:4], max_new_tokens=GEN)
  out = jaxdec.speculative_generate(ar, prompts[:4], spec.KForcing(student), max_new_tokens=GEN)
  np.testing.assert_array_equal(out.lengths, ref.lengths)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert float(np.mean(out.stats["acceptance_length"])) > FLOORS["gsm-kforcing tau"]
  alone = jaxdec.push_forward_generate(student, prompts, max_new_tokens=GEN)
  assert float(np.sum(alone.lengths) / np.sum(alone.stats["nfe"])) > 3.5
  greedy = jaxdec.generate(ar, prompts, max_new_tokens=8).tokens
  same = np.all(np.asarray(alone.tokens[:, :4]) == np.asarray(greedy[:, :4]), axis=1)
  assert same.sum() >= FLOORS["gsm-kforcing first forward right"] * len(problems)


@needs("gsm-eagle3")
@pytest.mark.slow  # test_zoo checks pycode-eagle3 the same way
def test_gsm_eagle3_drafts_losslessly_with_chains_and_dynamic_trees(ar, tokenizer, problems):
  """The shipped EAGLE-3 drafter (its embedding and LM head read from gsm-ar) is lossless with a
  chain and with its dynamic tree, and drafts deep: its acceptance per depth (simulated at
  export) is high, so a chain of 8 emits > 6 tokens per target forward."""
  drafter = jaxdec.load_drafter("zoo:gsm-eagle3")
  assert isinstance(drafter, spec.Eagle3) and drafter.top_k > 1
  prompts = [tokenizer.encode(p.prompt) for p in problems[:4]]
  ref = jaxdec.generate(ar, prompts, max_new_tokens=GEN)
  for shape, d in (("chain", drafter.with_tree(top_k=1, depth=8)), ("dynamic", drafter)):
    out = jaxdec.speculative_generate(ar, prompts, d, max_new_tokens=GEN)
    np.testing.assert_array_equal(out.tokens, ref.tokens)
    tau = float(np.sum(out.lengths) / np.sum(out.stats["target_forwards"]))
    assert tau > FLOORS[f"gsm-eagle3 {shape} tau"], (shape, tau)


@needs("gsm-kforcing")
@pytest.mark.slow  # the bench's rows; tests/spec/test_kforcing checks K-Forcing itself
def test_bench_kforcing_rows_and_quality(tmp_path):
  """Every method at every batch size; the student emits several tokens per forward, and the
  teacher finds its greedy text less likely than its own."""
  import json

  from jaxdec import cli
  from jaxdec.bench.kforcing import AR

  out = tmp_path / "kforcing.json"
  assert cli.main(["bench", "kforcing", "--batch-sizes", "1", "2", "--new-tokens", "24",
                   "--repeats", "1", "--out", str(out)]) == 0
  rows = json.loads(out.read_text())["rows"]
  methods = [AR, "K-Forcing greedy (k=2)", "K-Forcing greedy (k=4)"]
  assert [(r["batch"], r["method"]) for r in rows] == [(b, m) for b in (1, 2) for m in methods]
  by = {(r["batch"], r["method"]): r for r in rows}
  assert by[1, AR]["tokens/forward"] == 1.0 and by[1, AR]["speedup vs AR"] == 1.0
  assert by[1, methods[2]]["tokens/forward"] > 3.0
  assert by[1, AR]["teacher bits/byte of greedy"] < by[1, methods[2]]["teacher bits/byte of greedy"]


def _demo_models() -> list[str]:
  """The models of the demo's gsm-synth rows, in order, given what is installed."""
  expected = [m for m in ("gsm-ar", "gsm-ar", "gsm-draft", "gsm-mtp", "gsm-kforcing",
                          "gsm-kforcing", "gsm-eagle3", "gsm-dlm", "gsm-dlm", "gsm-dlm")
              if m in INSTALLED]
  if {"gsm-dlm", "gsm-dlm-draft"} <= INSTALLED:
    expected.append("gsm-dlm + gsm-dlm-draft")  # SimSD.
  return expected


def test_demo_gsm_section_has_a_method_for_each_installed_model():
  """The section's methods, built (models and drafters loaded) without decoding: the decoders
  themselves are checked on these models by the tests above (and SSR on gsm-ar by
  tests/spec/test_ssr.py); the section's full run is the slow test below."""
  from jaxdec import demo

  assert [name.split("(")[-1].rstrip(")") for name in demo._gsm_methods()] == _demo_models()


@pytest.mark.slow
def test_demo_gsm_section_solves_a_problem_with_each_installed_model(capsys):
  from jaxdec import demo

  rows = demo.gsm_section(0)
  assert [r["method"].split("(")[-1].rstrip(")") for r in rows] == _demo_models()
  answer = gsm_synth.problems("test", 1, 0)[0].answer
  assert all(r["correct"] == (r["answer"] == answer) for r in rows)
  # SSR drafts the answer phase only (about a tenth of the tokens): more than one token per
  # forward overall; every other method, several.
  assert rows[1]["method"].startswith("SSR") and rows[1]["tokens/forward"] > 1.05
  assert all(r["tokens/forward"] > 1.5 for r in rows[2:])
  assert "gsm-synth test problem 0" in capsys.readouterr().out
