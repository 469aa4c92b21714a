"""The shipped zoo: real models trained by jaxdec (see jaxdec/configs/zoo and jaxdec/zoo/*/zoo.json).

The figures zoo.json records are recomputed here on a sample of the validation split, so a
changed, corrupt or mis-loaded weight file fails, not only a changed zoo.json.
"""

import os

import numpy as np
import pytest

import jaxdec
from jaxdec import spec, zoo
from jaxdec import corpus
from jaxdec.train import evaluate
from jaxdec.train.evaluate import bits_per_byte

ZOO = ("pycode-ar", "pycode-draft", "pycode-dlm")
# {model: (files in its sample, its sample's bits per byte / the recorded full-validation
# figure)}, measured with the shipped weights on Python 3.11's stdlib. A few files are not the
# split, so the sample sits off the recorded figure by a model-dependent ratio: the test pins
# that ratio. The DLM's ELBO (8 masking levels) costs more per token, so it gets fewer files.
SAMPLE = {"pycode-ar": (4, 1.0997), "pycode-draft": (4, 1.0082), "pycode-dlm": (2, 1.1010)}
# Relative. The sample figure is deterministic (the DLM's Monte Carlo ELBO has a fixed seed), so
# this only covers float differences across platforms. Weights perturbed by Gaussian noise of a
# tenth of each tensor's std raise the figure by 1.9-2.9%, a fifth of the std by 7-10%.
SAMPLE_TOLERANCE = 0.01


def _sample_texts(n: int) -> list[str]:
  """The first `n` validation files (path order) of 4-12 KB, generated encodings/ tables aside."""
  files = [f for f in corpus.stdlib_split("validation") if not f.relpath.startswith("encodings/")]
  texts, _ = corpus.read_texts(files)
  return [t for t in texts if 4000 <= len(t.encode()) <= 12000][:n]


def _recorded(name: str) -> float:
  return zoo.metadata(zoo.resolve(name))["eval"]["stdlib_validation"]["bits_per_byte"]


@pytest.fixture(scope="module")
def sample_bpb():
  """name -> bits per byte of its sample, each computed once, as the zoo recipe evaluates
  (fp32, the recipe's evaluation window), with the model's own tokenizer."""
  cache = {}

  def compute(name):
    if name not in cache:
      seq_len = evaluate.eval_window(f"zoo:{name}", jaxdec.load(f"zoo:{name}").config)
      cache[name] = bits_per_byte(jaxdec.load(f"zoo:{name}"), jaxdec.load_tokenizer(f"zoo:{name}"),
                                  _sample_texts(SAMPLE[name][0]), seq_len=seq_len, batch=8)
    return cache[name]["bits_per_byte"]

  return compute


def test_the_zoo_is_shipped():
  assert set(ZOO) <= set(zoo.available())


@pytest.fixture(scope="module")
def target():
  return jaxdec.load("zoo:pycode-ar")


@pytest.fixture(scope="module")
def draft():
  return jaxdec.load("zoo:pycode-draft")


@pytest.fixture(scope="module")
def prompts(target):
  return corpus.held_out_prompts(jaxdec.load_tokenizer("zoo:pycode-ar"), 4, prompt_tokens=96)


def test_shared_tokenizer_round_trips_every_validation_file():
  tokenizer = jaxdec.load_tokenizer("zoo:pycode-ar")
  texts, _ = corpus.read_texts(corpus.stdlib_split("validation"))
  assert len(texts) > 50
  for text in texts:
    assert tokenizer.decode(tokenizer.encode(text, add_bos=False), skip_special_tokens=False) == text
  for name in ("pycode-draft", "pycode-dlm"):
    assert jaxdec.load_tokenizer(f"zoo:{name}").backend.to_str() == tokenizer.backend.to_str()


def test_metadata_records_the_recipe():
  for name in zoo.available():
    meta = zoo.metadata(zoo.resolve(name))
    assert meta["name"] == name and meta["steps"] > 0 and meta["tokens_seen"] > 0
    if name.endswith("-mtp"):  # Drafter heads: their measured accuracy and the tree built from it.
      assert meta["eval"]["choices"] and meta["eval"]["expected_tau"] > 1
      assert 0 < np.asarray(meta["eval"]["head_accuracy"]).sum(1).max() <= 1
      continue
    if name.endswith("-eagle3"):  # An EAGLE-3 layer: its simulated acceptance by depth.
      assert meta["eval"]["sim_tau"] > 1 and 0 < min(meta["eval"]["alpha"]) <= 1
      continue
    if name.endswith("-kforcing"):  # A student: its next-token loss beside its teacher's.
      assert abs(meta["eval"]["student_nll"] - meta["eval"]["teacher_nll"]) < 0.05
      continue
    assert meta["eval"] and all(e["bits_per_byte"] > 0 for e in meta["eval"].values())
    if name.startswith("pycode-"):
      assert "stdlib_validation" in meta["eval"]


@pytest.mark.parametrize("name", ZOO)
def test_recorded_bits_per_byte_hold_on_a_sample(sample_bpb, name):
  ratio = SAMPLE[name][1]
  got, recorded = sample_bpb(name), _recorded(name)
  assert abs(got / recorded - ratio) <= SAMPLE_TOLERANCE * ratio, (
      f"{name}: {got:.4f} bits/byte on the sample, {got / recorded:.4f} of the recorded "
      f"{recorded:.4f}; expected {ratio:.4f} of it")


def test_ar_models_beat_the_draft_and_a_unigram_baseline(sample_bpb):
  """On the sample, recomputed. The unigram baseline is fitted on the sample's tokens themselves
  (an optimistic bound for any unigram model); the trained models must sit far below it."""
  tokenizer = jaxdec.load_tokenizer("zoo:pycode-ar")
  texts = _sample_texts(SAMPLE["pycode-ar"][0])
  ids = np.concatenate([np.asarray(tokenizer.encode(t, add_bos=False), np.int64) for t in texts])
  freq = np.bincount(ids, minlength=tokenizer.vocab_size) / ids.size
  unigram = -np.sum(freq[freq > 0] * np.log2(freq[freq > 0])) * ids.size / sum(len(t.encode()) for t in texts)
  ar, draft = sample_bpb("pycode-ar"), sample_bpb("pycode-draft")
  assert ar < draft - 0.05
  assert draft < 0.75 * unigram


@pytest.mark.hf
def test_exported_ar_models_run_in_transformers(tmp_path, target, draft):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  tokens = np.random.RandomState(0).randint(0, target.config.vocab_size, (2, 48))
  for model in (target, draft):
    out = jaxdec.export_hf(model, None, str(tmp_path / str(model.config.hidden_size)))
    hf = transformers.AutoModelForCausalLM.from_pretrained(out, dtype=torch.float32).eval()
    with torch.no_grad():
      ref = hf(torch.tensor(tokens)).logits.numpy()
    np.testing.assert_allclose(jaxdec.forward(model, tokens), ref, atol=1e-4, rtol=0)


@pytest.mark.parametrize("name", ["draft_model", "prompt_lookup", "adapld"])
def test_greedy_speculative_equals_greedy_ar_on_the_zoo(target, draft, prompts, name):
  drafter = {"draft_model": spec.DraftModel(draft, 4), "prompt_lookup": spec.PromptLookup(3, 6),
             "adapld": spec.AdaPLD()}[name]
  for batch in (prompts[:1], prompts):
    ref = jaxdec.generate(target, batch, max_new_tokens=48)
    out = jaxdec.speculative_generate(target, batch, drafter, max_new_tokens=48)
    np.testing.assert_array_equal(out.lengths, ref.lengths)
    np.testing.assert_array_equal(out.tokens, ref.tokens)
  if name == "draft_model":  # The draft learned something: drafts do get accepted.
    assert float(np.mean(out.stats["acceptance_length"])) > 1.5


@pytest.mark.skipif("pycode-mtp" not in zoo.available(), reason="zoo:pycode-mtp not installed")
def test_pycode_mtp_heads_predict_and_speculate_losslessly(target, prompts):
  """The heads' per-rank accuracy recomputed on validation windows (close to what zoo.json
  records on more of them), and lossless speculation that accepts drafts."""
  from jaxdec.configs import load_config
  from jaxdec.train.mtp import head_accuracy

  drafter = jaxdec.load_drafter("zoo:pycode-mtp")
  tokenizer = jaxdec.load_tokenizer("zoo:pycode-ar")
  cfg = load_config("zoo:pycode-mtp")  # The windows the export measured on.
  windows = corpus.fixed_windows(corpus.token_stream("validation", tokenizer), cfg.eval_windows,
                                 cfg.seq_len)
  accuracy = head_accuracy(drafter.params, target, windows, ranks=4)
  recorded = np.asarray(zoo.metadata(zoo.resolve("pycode-mtp"))["eval"]["head_accuracy"])[:, :4]
  np.testing.assert_allclose(accuracy, recorded, atol=2e-3)
  assert np.all(accuracy[:, 0] > 0.25)
  for batch in (prompts[:1], prompts):
    ref = jaxdec.generate(target, batch, max_new_tokens=48)
    out = jaxdec.speculative_generate(target, batch, drafter, max_new_tokens=48)
    np.testing.assert_array_equal(out.lengths, ref.lengths)
    np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert float(np.mean(out.stats["acceptance_length"])) > 1.5


@pytest.mark.skipif("pycode-eagle3" not in zoo.available(), reason="zoo:pycode-eagle3 not installed")
def test_pycode_eagle3_drafts_losslessly_with_its_dynamic_tree(target, prompts):
  drafter = jaxdec.load_drafter("zoo:pycode-eagle3")
  for batch in (prompts[:1], prompts):
    ref = jaxdec.generate(target, batch, max_new_tokens=48)
    out = jaxdec.speculative_generate(target, batch, drafter, max_new_tokens=48)
    np.testing.assert_array_equal(out.lengths, ref.lengths)
    np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert float(np.mean(out.stats["acceptance_length"])) > 2.0


def test_demo_runs(capsys):
  from jaxdec import demo

  rows = demo.run(num_prompts=2, new_tokens=16, show=1, gsm=False)  # gsm: test_gsm_zoo.py
  assert {r["method"] for r in rows} >= {"greedy AR (pycode-ar)"} and all(r["tokens"] > 0 for r in rows)
  assert "held-out prompt 0" in capsys.readouterr().out


def test_the_zoo_fits_its_budget():
  """Every shipped model's files together stay under 64 MiB (the repository's budget)."""
  size = sum(os.path.getsize(os.path.join(root, f)) for root, _, files in os.walk(zoo.ZOO_DIR)
             for f in files if not f.endswith((".py", ".pyc")))
  assert size < 64 * 2**20, f"the zoo holds {size / 2**20:.1f} MiB"
