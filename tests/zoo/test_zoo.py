"""The shipped zoo: real models trained by jaxdec (see configs/zoo and jaxdec/zoo/*/zoo.json)."""

import numpy as np
import pytest

import jaxdec
from jaxdec import spec, zoo
from jaxdec.train import corpus

pytestmark = pytest.mark.skipif(not {"pycode-ar", "pycode-draft", "pycode-dlm"} <= set(zoo.available()),
                                reason="the zoo is not shipped in this checkout")


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
    assert tokenizer.decode(tokenizer.encode(text), skip_special_tokens=False) == text
  for name in ("pycode-draft", "pycode-dlm"):
    assert jaxdec.load_tokenizer(f"zoo:{name}").backend.to_str() == tokenizer.backend.to_str()


def test_metadata_records_the_recipe():
  for name in zoo.available():
    meta = zoo.metadata(zoo.resolve(name))
    assert meta["name"] == name and meta["steps"] > 0 and meta["tokens_seen"] > 0
    assert meta["eval"]["stdlib_validation"]["bits_per_byte"] > 0


def test_ar_models_beat_the_draft_and_a_unigram_baseline():
  """The unigram baseline is fitted on the validation tokens themselves (an optimistic bound for
  any unigram model); the trained models must sit far below it."""
  tokenizer = jaxdec.load_tokenizer("zoo:pycode-ar")
  texts, _ = corpus.read_texts(corpus.stdlib_split("validation"))
  ids = np.concatenate([np.asarray(tokenizer.encode(t), np.int64) for t in texts])
  freq = np.bincount(ids, minlength=tokenizer.vocab_size) / ids.size
  unigram = -np.sum(freq[freq > 0] * np.log2(freq[freq > 0])) * ids.size / sum(len(t.encode()) for t in texts)
  ar = zoo.metadata(zoo.resolve("pycode-ar"))["eval"]["stdlib_validation"]["bits_per_byte"]
  draft = zoo.metadata(zoo.resolve("pycode-draft"))["eval"]["stdlib_validation"]["bits_per_byte"]
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


def test_demo_runs(capsys):
  from jaxdec import demo

  rows = demo.run(num_prompts=2, new_tokens=16, show=1)
  assert {r["method"] for r in rows} >= {"greedy AR (pycode-ar)"} and all(r["tokens"] > 0 for r in rows)
  assert "held-out prompt 0" in capsys.readouterr().out
