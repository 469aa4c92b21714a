import os
import re

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


def _tokenizer(vocab_size, bos=False):
  backend = HFTokenizer(models.BPE())
  backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
  backend.decoder = decoders.ByteLevel()
  trainer = trainers.BpeTrainer(vocab_size=vocab_size,
                                special_tokens=["<pad>", "<eos>"] + ["<bos>"] * bos,
                                initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
  backend.train_from_iterator(["def f(x):\n    return x + 1\n"] * 50, trainer)
  return Tokenizer(backend=backend, pad_id=0, eos_id=1, bos_id=2 if bos else None)


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


def test_generate_prompts_start_with_bos_by_the_tokenizers_rule(tmp_path, capsys):
  """The CLI encodes with `Tokenizer.encode` (BOS first), nothing added on top."""
  model = tiny_model(vocab_size=320)
  tok = _tokenizer(model.config.vocab_size, bos=True)
  path = jaxdec.save(model, str(tmp_path / "m"), tokenizer=tok)
  ids = tok.encode("def f")
  assert ids[0] == 2 and ids[1:] == tok.encode("def f", add_bos=False)
  assert cli.main(["generate", "--model", path, "--prompt", "def f", "--max-new-tokens", "6"]) == 0
  expected = jaxdec.generate(model, [ids], max_new_tokens=6)
  assert capsys.readouterr().out == "def f" + tok.decode(expected.tokens[0, : int(expected.lengths[0])]) + "\n"


@pytest.mark.parametrize("flags, message", [
    (["--temperature", "-1"], "--temperature must be >= 0"),
    (["--top-p", "0.9"], "--temperature 0 decodes greedily; pass --temperature > 0"),
    (["--top-k", "5"], "--temperature 0 decodes greedily"),
    (["--seed", "3"], "--seed 3 only act on sampling"),
    (["--temperature", "1", "--top-p", "0"], "--top-p must be in \\(0, 1\\]"),
    (["--temperature", "1", "--top-k", "-2"], "--top-k must be >= 0"),
])
def test_generate_refuses_sampling_flags_it_would_ignore(model, tmp_path, capsys, flags, message):
  """Before: each of these silently decoded greedily."""
  path = jaxdec.save(model, str(tmp_path / "m"))
  assert cli.main(["generate", "--model", path, "--prompt-ids", "5 6", *flags]) == 2
  assert re.search(message, capsys.readouterr().err)


def test_generate_samples_with_top_p_when_asked(model, tmp_path, capsys):
  path = jaxdec.save(model, str(tmp_path / "m"))
  argv = ["generate", "--model", path, "--prompt-ids", "5 6 7", "--max-new-tokens", "8",
          "--temperature", "1.5", "--top-p", "0.9", "--seed", "3"]
  assert cli.main(argv) == 0
  got = [int(t) for t in capsys.readouterr().out.split()]
  expected = jaxdec.generate(model, [[5, 6, 7]], max_new_tokens=8, key=jax.random.key(3),
                             sampling=jaxdec.Sampling.create(1.5, 0, 0.9))
  assert got == expected.tokens[0, : int(expected.lengths[0])].tolist()


def test_convert_a_zoo_model_writes_its_tokenizer(tmp_path, capsys):
  """Before: only a directory path carried tokenizer.json over; 'zoo:NAME' lost it."""
  out = str(tmp_path / "o")
  assert cli.main(["convert", "--from-hf", "zoo:pycode-draft", "--out", out]) == 0
  assert "wrote orbax checkpoint" in capsys.readouterr().out
  reference = jaxdec.load_tokenizer("zoo:pycode-draft")
  assert jaxdec.load_tokenizer(out).encode("def f(x):") == reference.encode("def f(x):")


def test_eval_names_a_data_directory_without_python_files(tmp_path, capsys):
  """Before: 'need at least one array to stack'."""
  (tmp_path / "empty").mkdir()
  (tmp_path / "empty" / "notes.txt").write_text("no code here")
  assert cli.main(["eval", "--model", "zoo:pycode-draft", "--data", str(tmp_path / "empty")]) == 2
  assert f"--data directory {tmp_path / 'empty'} has no .py files" in capsys.readouterr().err


def test_eval_window_defaults_to_the_training_window(model, tmp_path, monkeypatch, capsys):
  """Before: 256 tokens whatever the model, so pycode-dlm's recorded 1.37 bits/byte (512-token
  windows) came out as 1.42."""
  from jaxdec import corpus
  from jaxdec.train import evaluate
  from tiny import tiny_config

  windows = []

  def fake_bits_per_byte(model, tokenizer, texts, seq_len):
    windows.append(seq_len)
    return {"tokens": 1, "nats_per_token": 1.0, "bits_per_byte": 1.0}

  monkeypatch.setattr(evaluate, "bits_per_byte", fake_bits_per_byte)
  monkeypatch.setattr(corpus, "stdlib_split", lambda split: corpus.list_python_files(
      os.path.dirname(os.path.abspath(__file__)))[:1])
  assert cli.main(["eval", "--model", "zoo:pycode-dlm"]) == 0
  assert "windows of 512 tokens" in capsys.readouterr().out
  assert cli.main(["eval", "--model", "zoo:pycode-dlm", "--seq-len", "128"]) == 0
  assert windows == [512, 128]
  assert cli.main(["eval", "--model", "zoo:pycode-dlm", "--seq-len", "4096"]) == 2
  assert "--seq-len must be in [2, 512]" in capsys.readouterr().err
  assert evaluate.eval_window("zoo:pycode-ar", jaxdec.load("zoo:pycode-ar").config) == 256
  assert evaluate.eval_window(str(tmp_path), tiny_config(max_position_embeddings=2048)) == 512
  assert evaluate.eval_window(str(tmp_path), tiny_config(max_position_embeddings=100)) == 100


@pytest.fixture
def small_corpus(monkeypatch):
  """`jaxdec train` on a few stdlib files: the tiny zoo tokenizer and streams, no 30 s encode."""
  from jaxdec import corpus
  from jaxdec.train import zoo as train_zoo
  from jaxdec.train.tokenizer import train_bpe

  files = corpus.stdlib_split("validation")[:30]
  texts, _ = corpus.read_texts(files)
  tok = train_bpe(texts, 512)
  monkeypatch.setattr(train_zoo, "zoo_tokenizer", lambda: tok)
  monkeypatch.setattr(corpus, "token_stream", lambda split, t: corpus.encode_documents(texts, t))
  monkeypatch.setattr(corpus, "stdlib_split", lambda split: files[:2])
  with jax.numpy_dtype_promotion("standard"):  # optax mixes Python floats and int32 counts.
    yield


def test_train_exports_under_the_workdir_never_into_the_package(tmp_path, monkeypatch, capsys,
                                                                 small_corpus):
  """Before: a 20-step run of a copied zoo config replaced the shipped jaxdec/zoo/NAME."""
  from jaxdec import configs, zoo

  monkeypatch.setattr(zoo, "ZOO_DIR", str(tmp_path / "package-zoo"))  # Where it used to write.
  copy = tmp_path / "my_draft.py"
  copy.write_text(open(configs.config_path("zoo:pycode-draft")).read())
  workdir = tmp_path / "run"
  argv = ["train", "--config", str(copy), "--workdir", str(workdir), "--steps", "2"]
  assert cli.main(argv) == 0, capsys.readouterr().err
  assert f"exported {workdir / 'export'}" in capsys.readouterr().out
  assert jaxdec.load(str(workdir / "export")).config.hidden_size == 64
  assert (workdir / "export" / "tokenizer.json").exists()
  assert not (tmp_path / "package-zoo").exists()
  # The same workdir with another model: a clear error, not orbax's strict-restore traceback.
  copy.write_text(copy.read_text().replace("hidden_size=64", "hidden_size=32"))
  assert cli.main(argv) == 2
  err = capsys.readouterr().err
  assert "holds another model's run" in err and "use a new --workdir" in err


def test_train_takes_a_zoo_recipe_name(tmp_path, capsys, small_corpus):
  workdir = tmp_path / "run"
  assert cli.main(["train", "--config", "zoo:pycode-draft", "--workdir", str(workdir),
                   "--steps", "1", "--no-export"]) == 0
  assert '"name": "pycode-draft"' in capsys.readouterr().out
  assert not (workdir / "export").exists()
  assert cli.main(["train", "--config", "zoo:nope"]) == 2
  assert "unknown zoo config 'zoo:nope'; available: ['zoo:pycode-ar'" in capsys.readouterr().err


def test_train_rejects_a_bad_recipe_before_loading_data(tmp_path, monkeypatch, capsys):
  """Before: optax's 'decay_steps=-40' after 30 s of corpus loading."""
  from jaxdec import corpus

  def no_data(*args):
    raise AssertionError("the corpus was loaded")

  monkeypatch.setattr(corpus, "token_stream", no_data)
  config = tmp_path / "bad.py"
  config.write_text("import dataclasses\nfrom jaxdec.configs import load_config\n\n\n"
                    "def get_config():\n"
                    "  return dataclasses.replace(load_config('zoo:pycode-draft'), steps=40,\n"
                    "                             warmup_steps=80)\n")
  assert cli.main(["train", "--config", str(config), "--workdir", str(tmp_path / "w")]) == 2
  assert "warmup_steps must be in [0, steps), got warmup_steps=80 with steps=40" in capsys.readouterr().err
  assert cli.main(["train", "--config", "zoo:pycode-draft", "--steps", "0"]) == 2
  assert "TrainConfig.steps must be an int >= 1, got 0" in capsys.readouterr().err
