import jax
import numpy as np
import pytest
from tokenizers import Tokenizer as HFTokenizer, models, pre_tokenizers, decoders, trainers

import jaxdec
from jaxdec import cli
from jaxdec.tokenizer import Tokenizer
from tiny import tiny_model


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
  monkeypatch.setenv("JAXDEC_CACHE_DIR", str(tmp_path / "xla-cache"))
  yield
  jax.config.update("jax_compilation_cache_dir", None)


def _tokenizer(vocab_size):
  backend = HFTokenizer(models.BPE())
  backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  backend.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<pad>", "<eos>"],
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  backend.train_from_iterator(["def f(x):\n    return x + 1\n"] * 50, trainer)
  return Tokenizer(backend=backend, pad_id=0, eos_id=1)


def test_generate_from_an_orbax_dir_with_a_tokenizer(tmp_path, capsys):
  model = tiny_model(vocab_size=320)  # Room for the 256 byte-level symbols.
  tok = _tokenizer(model.config.vocab_size)
  assert tok.vocab_size <= model.config.vocab_size
  path = jaxdec.save(model, str(tmp_path / "m"), tokenizer=tok)
  assert cli.main(["generate", "--model", path, "--prompt", "def f", "--max-new-tokens", "6"]) == 0
  text = capsys.readouterr().out
  ids = tok.encode("def f")
  expected = jaxdec.generate(model, [ids], max_new_tokens=6)
  assert text == "def f" + tok.decode(expected.tokens[0, : int(expected.lengths[0])]) + "\n"


def test_generate_with_prompt_ids(model, tmp_path, capsys):
  path = jaxdec.save(model, str(tmp_path / "m"))
  assert cli.main(["generate", "--model", path, "--prompt-ids", "5 6 7", "--max-new-tokens", "5"]) == 0
  expected = jaxdec.generate(model, [[5, 6, 7]], max_new_tokens=5)
  got = [int(t) for t in capsys.readouterr().out.split()]
  assert got == expected.tokens[0, : int(expected.lengths[0])].tolist()
  with pytest.raises(SystemExit, match="has no tokenizer.json"):
    cli.main(["generate", "--model", path, "--prompt", "hello"])


def test_errors_are_reported_without_a_traceback(model, tmp_path, capsys):
  path = jaxdec.save(model, str(tmp_path / "m"))
  assert cli.main(["generate", "--model", path, "--prompt-ids", "5 999"]) == 2
  assert "token id 999 outside the vocabulary" in capsys.readouterr().err


@pytest.mark.hf
def test_convert_from_hf(tmp_path, capsys):
  pytest.importorskip("transformers")
  from hf_models import make_hf_model

  make_hf_model("qwen2").save_pretrained(str(tmp_path / "hf"))
  assert cli.main(["convert", "--from-hf", str(tmp_path / "hf"), "--out", str(tmp_path / "o")]) == 0
  assert "wrote orbax checkpoint" in capsys.readouterr().out
  a, b = jaxdec.load(str(tmp_path / "o")), jaxdec.load(str(tmp_path / "hf"))
  tokens = np.arange(10)[None] % 256
  np.testing.assert_array_equal(jaxdec.forward(a, tokens), jaxdec.forward(b, tokens))


def test_bench_ar_runs(model, tmp_path, capsys):
  path = jaxdec.save(model, str(tmp_path / "m"))
  out = tmp_path / "ar.json"
  assert cli.main(["bench", "ar", "--model", path, "--no-peers", "--batch-sizes", "1", "2",
                   "--prompt-len", "8", "--new-tokens", "8", "--repeats", "1", "--out", str(out)]) == 0
  printed = capsys.readouterr().out
  assert "jaxdec tok/s" in printed and out.exists()
