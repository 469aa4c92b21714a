import argparse
import json
import os
import re

import jax
import numpy as np
import pytest
from tokenizers import Tokenizer as HFTokenizer, models, pre_tokenizers, decoders, trainers

import jaxdec
from jaxdec import cli, diffusion, plugins
from jaxdec.cli import plugins as cli_plugins
from jaxdec.cli.output import one_line
from jaxdec.model import Bidirectional
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
  assert cli.main(["generate", "--model", path, "--prompt", "hello"]) == 2
  assert "has no tokenizer.json: pass token ids (--prompt-ids" in capsys.readouterr().err


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


@pytest.mark.parametrize("flags, message", [
    (["--split", "test"], "--split acts with --task gsm-synth"),
    (["--threshold", "0.5"], "--threshold acts with --task gsm-synth"),
    (["--top-k", "5"], "--top-k acts with --task gsm-synth"),
    (["--task", "gsm-synth", "--stdlib"],
     "--stdlib acts on the bits-per-byte evaluation, not with --task gsm-synth"),
    (["--task", "gsm-synth", "--seq-len", "64"],
     "--seq-len acts on the bits-per-byte evaluation, not with --task gsm-synth"),
    (["--task", "gsm-synth", "--method", "diffusion"],
     "--method diffusion needs a masked-diffusion model"),
])
def test_eval_task_flags_are_checked(flags, message, capsys):
  assert cli.main(["eval", "--model", "zoo:pycode-draft", *flags]) == 2
  assert message in capsys.readouterr().err


@pytest.fixture(scope="module")
def gsm_models(tmp_path_factory):
  """Tiny random AR and diffusion models saved with a gsm-synth tokenizer (ids as the zoo's:
  pad 0, bos 1, eos 2, mask 3)."""
  from jaxdec.model import Bidirectional
  from jaxdec.tasks import gsm_synth
  from jaxdec.train.tokenizer import train_bpe

  tok = train_bpe([p.text for p in gsm_synth.problems("train", 200)], 320, individual_digits=True)
  ids = dict(vocab_size=320, max_position_embeddings=512)
  tokens = dict(bos=1, eos=(2,))
  root = tmp_path_factory.mktemp("gsm")
  ar = tiny_model(tokens=tokens, **ids)
  dlm = tiny_model(attention=Bidirectional(), architecture="llada", std=0.5,
                   tokens=dict(tokens, mask=3), **ids)
  return tok, {name: (m, jaxdec.save(m, str(root / name), tokenizer=tok))
               for name, m in (("ar", ar), ("dlm", dlm))}


def _printed_summary(out: str) -> dict:
  """The first table `jaxdec eval --task` prints, as {column: cell}."""
  lines = [line for line in out.splitlines() if line.startswith("| ")]
  head, row = ([c.strip() for c in line.strip("|").split("|")] for line in lines[:2])
  return dict(zip(head, row))


@pytest.mark.parametrize("name, flags", [
    ("ar", ["--max-new-tokens", "24"]),
    ("dlm", ["--gen-length", "32", "--block-length", "16", "--threshold", "0.5", "--cache", "dual"]),
])
def test_eval_task_prints_what_the_api_measures(gsm_models, name, flags, capsys):
  from jaxdec import diffusion
  from jaxdec.tasks import evaluate, gsm_synth

  tok, models = gsm_models
  model, path = models[name]
  assert cli.main(["eval", "--task", "gsm-synth", "--model", path, "--n", "3", "--batch-size",
                   "2", "--split", "test-unseen-templates", *flags]) == 0
  out = capsys.readouterr().out
  problems = gsm_synth.problems("test-unseen-templates", 3, 0)
  if name == "ar":
    decode = lambda p: jaxdec.generate(model, p, max_new_tokens=24)
  else:
    decode = lambda p: jaxdec.diffusion_generate(
        model, p, gen_length=32, block_length=16, steps=32, scheduler=diffusion.Threshold(0.5),
        cache=diffusion.DualCache(), stop_early=True)
  expected = evaluate.solve(decode, tok, problems, batch_size=2,
                            group_by=lambda p: len(p.solution)).summary()
  printed = _printed_summary(out)
  assert printed["problems"] == "3" and printed["accuracy"] == f"{expected['accuracy']:.2f}"
  assert printed["NFE"] == f"{expected['NFE']:.2f}"
  assert printed["mean length"] == f"{expected['mean length']:.2f}"
  assert f"gsm-synth test-unseen-templates (3 problems" in out
  assert "| steps | problems | accuracy |" in out


def test_eval_window_defaults_to_the_training_window(model, tmp_path, monkeypatch, capsys):
  """Before: 256 tokens whatever the model, so pycode-dlm's recorded 1.37 bits/byte (512-token
  windows) came out as 1.42. Its long-context stage trains on 4096-token windows and records
  its figure on 512 (the recipe's eval_seq_len), so eval uses 512."""
  from jaxdec import corpus
  from jaxdec.train import evaluate
  from tiny import tiny_config

  windows = []

  def fake_bits_per_byte(model, tokenizer, texts, seq_len, **kwargs):
    windows.append(seq_len)
    return {"tokens": 1, "nats_per_token": 1.0, "bits_per_byte": 1.0}

  monkeypatch.setattr(evaluate, "bits_per_byte", fake_bits_per_byte)
  monkeypatch.setattr(corpus, "stdlib_split", lambda split: corpus.list_python_files(
      os.path.dirname(os.path.abspath(__file__)))[:1])
  assert cli.main(["eval", "--model", "zoo:pycode-dlm"]) == 0
  assert "windows of 512 tokens" in capsys.readouterr().out
  assert cli.main(["eval", "--model", "zoo:pycode-dlm", "--seq-len", "128"]) == 0
  assert windows == [512, 128]
  assert cli.main(["eval", "--model", "zoo:pycode-dlm", "--seq-len", "16384"]) == 2
  assert "--seq-len must be in [2, 8192]" in capsys.readouterr().err
  assert evaluate.eval_window("zoo:pycode-ar", jaxdec.load("zoo:pycode-ar").config) == 256
  # Without a recipe: the model's own context length.
  assert evaluate.eval_window(str(tmp_path), tiny_config(max_position_embeddings=2048)) == 2048
  assert evaluate.eval_window(str(tmp_path), tiny_config(max_position_embeddings=100)) == 100


def test_eval_scores_only_the_data_it_names(tmp_path, monkeypatch, capsys):
  """Before: --data always added the stdlib validation split (minutes of scoring)."""
  from matplotlib.image import imread

  from jaxdec import corpus
  from jaxdec.train.evaluate import bits_per_byte

  (tmp_path / "stdlib").mkdir()
  (tmp_path / "stdlib" / "lib.py").write_text("import os\n\n\ndef main():\n    return os.sep\n")
  monkeypatch.setattr(corpus, "stdlib_split",
                      lambda split: corpus.list_python_files(str(tmp_path / "stdlib")))
  data = tmp_path / "mine"
  data.mkdir()
  text = "def f(x):\n    return x + 1\n" * 30
  (data / "a.py").write_text(text)
  assert cli.main(["eval", "--model", "zoo:pycode-draft", "--data", str(data)]) == 0
  out, err = capsys.readouterr()
  rows = [line for line in out.splitlines() if line.startswith("| ") and "bits/byte" not in line]
  assert len(rows) == 1 and rows[0].startswith(f"| {data} ")
  model = jaxdec.load("zoo:pycode-draft")
  expected = bits_per_byte(model, jaxdec.load_tokenizer("zoo:pycode-draft"), [text],
                           seq_len=256)["bits_per_byte"]
  assert rows[0].rstrip(" |").endswith(f"{expected:,.2f}")
  assert f"{data}: 100%" in err  # The progress bar, on stderr.
  png = tmp_path / "bpb.png"
  assert cli.main(["eval", "--model", "zoo:pycode-draft", "--data", str(data), "--stdlib",
                   "--plot", str(png)]) == 0
  out = capsys.readouterr().out
  assert "| stdlib validation " in out and f"| {data} " in out and f"wrote {png}" in out
  assert imread(str(png)).shape == (220, 800, 4)  # Two bars.


@pytest.fixture
def small_corpus(monkeypatch):
  """`jaxdec train` on a few stdlib files: the tiny zoo tokenizer and streams, no 30 s encode."""
  from jaxdec import corpus
  from jaxdec.train import zoo as train_zoo
  from jaxdec.train.tokenizer import train_bpe

  files = corpus.stdlib_split("validation")[:30]
  texts, _ = corpus.read_texts(files)
  tok = train_bpe(texts, 512)
  monkeypatch.setattr(train_zoo, "zoo_tokenizer", lambda **_: tok)
  monkeypatch.setattr(corpus, "token_stream", lambda split, t, *_: corpus.encode_documents(texts, t))
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
  assert "unknown zoo config 'zoo:nope'; available: ['zoo:gsm-ar'" in capsys.readouterr().err


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


# ---- jaxdec generate: methods, prompt files, stats; help ----------------------------------------

def _parsers(parser):
  """Every parser under `parser` (sub-commands and their sub-commands), with its name."""
  yield parser.prog, parser
  for action in parser._actions:
    if isinstance(action, argparse._SubParsersAction):
      for sub in action.choices.values():
        yield from _parsers(sub)


def test_every_option_has_help_and_every_parser_shows_defaults():
  parsers = dict(_parsers(cli.build_parser()))
  assert {"jaxdec generate", "jaxdec demo", "jaxdec bench ar", "jaxdec bench diffusion"} <= set(parsers)
  for name, parser in parsers.items():
    assert issubclass(parser.formatter_class, argparse.ArgumentDefaultsHelpFormatter), name
    for action in parser._actions:
      if isinstance(action, argparse._HelpAction):
        continue
      if isinstance(action, argparse._SubParsersAction):
        for choice in action._choices_actions:
          assert choice.help, f"{name} {choice.dest} has no help"
        continue
      assert action.help and action.help.strip(), f"{name} {action.option_strings} has no help"
  text = parsers["jaxdec generate"].format_help()
  assert "(default: 8)" in text and "(default: None)" not in text and "(default: False)" not in text
  assert "(default: 128)" in parsers["jaxdec bench ar"].format_help()


@pytest.mark.parametrize("kind", plugins.KINDS)
def test_every_declared_plugin_is_built_from_the_command_line(kind, monkeypatch):
  """Each `@register_cli` plug-in: its name is a choice of its option, and `--KIND NAME` with
  every flag it declares builds its class with those values."""
  model = tiny_model()
  monkeypatch.setattr(jaxdec, "load", lambda path, **_: model)
  # A drafter read from a directory: the loader gives one of its class (built without fields).
  monkeypatch.setattr(jaxdec, "load_drafter", lambda path, **_: object.__new__(found.cls))
  declared = cli_plugins.registered(kind)
  assert declared and len({p.spec.name for p in declared}) == len(declared)
  parser = cli.build_parser()
  for found in declared:
    spec = found.spec
    name = spec.name if spec.source is None else f"{spec.name}:{spec.source.example}"
    values = {p.flag: (2 if p.type is int else 0.5) for p in spec.params}
    flags = [f for dest, v in values.items() for f in (cli.common.flag(dest), str(v))]
    argv = ["generate", "--model", "m", f"--{kind}", name, *flags]
    args = parser.parse_args(argv)
    built = {"drafter": cli_plugins.drafter, "verifier": cli_plugins.verifier,
             "scheduler": cli_plugins.scheduler, "cache": cli_plugins.cache}[kind](args)
    assert type(built) is found.cls, (argv, built)
    for p in spec.params:
      assert float(np.asarray(getattr(built, p.keyword))) == values[p.flag], (argv, p)


def test_plugin_declarations_refuse_bad_values():
  with pytest.raises(ValueError, match="CliSpec.kind must be one of"):
    plugins.register_cli("sampler", "x", help="h", order=0)
  with pytest.raises(TypeError, match="type must be int or float"):
    plugins.Param("steps", str, "h")
  with pytest.raises(ValueError, match="--scheduler threshold is already"):
    plugins.register_cli("scheduler", "threshold", help="h", order=0)(type("Other", (), {}))
  with pytest.raises(ValueError, match="kind must be one of"):
    plugins.registered("drafters")


def _ids(out: str) -> list[list[int]]:
  return [[int(t) for t in line.split()] for line in out.strip("\n").split("\n")]


def _expected(out, row=0):
  return out.tokens[row, : int(out.lengths[row])].tolist()


def test_method_greedy_equals_generate_and_reports_stats(model, tmp_path, capsys):
  path = jaxdec.save(model, str(tmp_path / "m"))
  argv = ["generate", "--model", path, "--prompt-ids", "5 6 7", "--max-new-tokens", "7", "--stats"]
  assert cli.main(argv + ["--method", "greedy"]) == 0
  captured = capsys.readouterr()
  expected = jaxdec.generate(model, [[5, 6, 7]], max_new_tokens=7)
  assert _ids(captured.out) == [_expected(expected)]
  n = int(expected.lengths[0])
  assert (f"greedy: 1 prompt, {n} tokens from {int(expected.stats['nfe'][0])} forwards (target "
          "forward passes, prefill included): 1.00 tokens/forward") in captured.err
  assert cli.main(argv) == 0  # Greedy is the default for an AR model.
  assert _ids(capsys.readouterr().out) == [_expected(expected)]


def test_method_sample_defaults_to_temperature_one(model, tmp_path, capsys):
  path = jaxdec.save(model, str(tmp_path / "m"))
  assert cli.main(["generate", "--model", path, "--prompt-ids", "5 6 7", "--max-new-tokens", "8",
                   "--method", "sample", "--seed", "4"]) == 0
  expected = jaxdec.generate(model, [[5, 6, 7]], max_new_tokens=8, key=jax.random.key(4),
                             sampling=jaxdec.Sampling.create(1.0))
  assert _ids(capsys.readouterr().out) == [_expected(expected)]


@pytest.mark.parametrize("flags", [
    pytest.param(["--method", "speculative"], marks=pytest.mark.slow),  # lookup, its defaults
    pytest.param(["--drafter", "lookup", "--num-tokens", "3", "--max-ngram", "2"],
                 marks=pytest.mark.slow),
    pytest.param(["--drafter", "adapld", "--branches", "2", "--num-tokens", "3", "--verifier",
                  "greedy"], marks=pytest.mark.slow),
    ["--drafter", "draft:DRAFT", "--num-tokens", "3"],
    ["--drafter", "heads:HEADS"],
])
def test_speculative_equals_greedy(model, tmp_path, capsys, flags):
  from jaxdec.convert.medusa import write_medusa
  from jaxdec.train.mtp import MedusaHeads

  path = jaxdec.save(model, str(tmp_path / "m"))
  draft = jaxdec.save(tiny_model(seed=1, std=0.2), str(tmp_path / "draft"))
  heads = write_medusa(MedusaHeads(num_heads=2).init(jax.random.key(0), model),
                       str(tmp_path / "heads"), choices=((0,), (1,), (0, 0)))
  flags = [f.replace("DRAFT", draft).replace("HEADS", heads) for f in flags]
  prompt = [5, 6, 7, 5, 6, 7, 5, 6]  # Repeats, so that lookup drafts something.
  assert cli.main(["generate", "--model", path, "--prompt-ids", " ".join(map(str, prompt)),
                   "--max-new-tokens", "12", "--stats", *flags]) == 0
  captured = capsys.readouterr()
  expected = jaxdec.generate(model, [prompt], max_new_tokens=12)
  assert _ids(captured.out) == [_expected(expected)]
  stats = re.search(r"speculative: 1 prompt, (\d+) tokens from (\d+) forwards .*: ([\d.]+) "
                    r"tokens/forward, acceptance length ([\d.]+)", captured.err)
  assert stats and int(stats[1]) == int(expected.lengths[0])
  assert 1 <= int(stats[2]) <= int(stats[1]) and stats[3] == stats[4]
  assert float(stats[3]) == pytest.approx(int(stats[1]) / int(stats[2]), abs=0.005)


def _dlm():
  return tiny_model(attention=Bidirectional(), architecture="llada", std=0.5, tokens=dict(mask=5))


@pytest.mark.parametrize("flags, scheduler, cache", [
    (["--scheduler", "threshold", "--threshold", "0.3", "--cache", "dual"],
     diffusion.Threshold(0.3), diffusion.DualCache()),
    # --factor alone picks its scheduler.
    pytest.param(["--factor", "2.0", "--cache", "prefix"], diffusion.Factor(2.0),
                 diffusion.PrefixCache(), marks=pytest.mark.slow),
    (["--scheduler", "rps", "--cache", "dual"], diffusion.RipplePivot(), diffusion.DualCache()),
    pytest.param(["--scheduler", "said"], diffusion.Scaffold(), None, marks=pytest.mark.slow),
    (["--threshold", "0.5", "--visible-suffix", "0"], diffusion.Threshold(0.5), None),
])
def test_diffusion_equals_the_api(tmp_path, capsys, flags, scheduler, cache):
  model = _dlm()
  path = jaxdec.save(model, str(tmp_path / "m"))
  assert cli.main(["generate", "--model", path, "--prompt-ids", "7 8 9", "--gen-length", "16",
                   "--block-length", "8", "--steps", "8", "--stats", *flags]) == 0
  captured = capsys.readouterr()
  suffix = int(flags[flags.index("--visible-suffix") + 1]) if "--visible-suffix" in flags else None
  expected = jaxdec.diffusion_generate(model, [[7, 8, 9]], gen_length=16, block_length=8,
                                       steps=8, scheduler=scheduler, cache=cache,
                                       visible_suffix=suffix)
  assert _ids(captured.out) == [_expected(expected)]
  nfe = int(expected.stats["nfe"][0])
  assert f"from {nfe} forwards (model passes over the canvas): {16 / nfe:.2f} tokens/forward" in captured.err


def test_diffusion_canvas_defaults_to_max_new_tokens(tmp_path, capsys):
  """And diffusion is the default method of a diffusion model, FixedSteps its scheduler."""
  model = _dlm()
  path = jaxdec.save(model, str(tmp_path / "m"))
  assert cli.main(["generate", "--model", path, "--prompt-ids", "7 8", "--max-new-tokens", "16",
                   "--jsonl"]) == 0
  expected = jaxdec.diffusion_generate(model, [[7, 8]], gen_length=16, block_length=16, steps=16)
  assert json.loads(capsys.readouterr().out) == {"prompt_ids": [7, 8],
                                                 "completion_ids": _expected(expected)}


PROMPTS = ["def f", "def f(x):\n    return", "x"]  # Ragged; the second holds a line break.


@pytest.fixture
def text_model(tmp_path):
  model = tiny_model(vocab_size=320)
  tok = _tokenizer(model.config.vocab_size, bos=True)
  return model, tok, jaxdec.save(model, str(tmp_path / "m"), tokenizer=tok)


@pytest.mark.parametrize("method", ["greedy", pytest.param("speculative", marks=pytest.mark.slow)])
def test_a_prompts_file_in_batches_gives_the_lines_of_one_by_one(text_model, tmp_path, capsys,
                                                                   method):
  model, tok, path = text_model
  common = ["--model", path, "--max-new-tokens", "6", "--method", method]
  singles = []
  for prompt in PROMPTS:
    assert cli.main(["generate", *common, "--prompt", prompt]) == 0
    singles.append(capsys.readouterr().out.removesuffix("\n"))
  assert singles[1].startswith("def f(x):\n    return")
  expected = [prompt + tok.decode(_expected(jaxdec.generate(model, [tok.encode(prompt)], 6)))
              for prompt in PROMPTS]
  assert singles == expected
  jsonl = tmp_path / "prompts.jsonl"
  jsonl.write_text("".join(json.dumps({"prompt": p}) + "\n" for p in PROMPTS))
  assert cli.main(["generate", *common, "--prompts-file", str(jsonl), "--batch-size", "2",
                   "--jsonl"]) == 0
  records = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
  assert [r["prompt"] + r["completion"] for r in records] == singles
  assert [r["completion_ids"] for r in records] == [
      _expected(jaxdec.generate(model, [tok.encode(p)], 6)) for p in PROMPTS]
  # A text file holds one prompt a line; its output lines are escaped to stay one a line.
  text = tmp_path / "prompts.txt"
  text.write_text("def f\nx\n")
  assert cli.main(["generate", *common, "--prompts-file", str(text), "--batch-size", "2"]) == 0
  lines = capsys.readouterr().out.split("\n")
  assert lines == [one_line(singles[0]), one_line(singles[2]), ""]


def test_a_jsonl_file_of_prompt_ids(model, tmp_path, capsys):
  path = jaxdec.save(model, str(tmp_path / "m"))
  prompts = [[5, 6, 7], [9], [10, 11, 12, 13, 14], [20, 21]]
  file = tmp_path / "ids.jsonl"
  file.write_text("\n".join(json.dumps({"prompt_ids": p}) for p in prompts) + "\n\n")
  assert cli.main(["generate", "--model", path, "--prompts-file", str(file), "--batch-size", "3",
                   "--max-new-tokens", "5", "--stats"]) == 0
  captured = capsys.readouterr()
  expected = [jaxdec.generate(model, [p], max_new_tokens=5) for p in prompts]
  assert _ids(captured.out) == [_expected(e) for e in expected]
  # The padding rows of the short last batch are not counted.
  assert f"greedy: 4 prompts, {sum(int(e.lengths[0]) for e in expected)} tokens" in captured.err


@pytest.mark.parametrize("lines, message", [
    (['{"prompt": "a", "prompt_ids": [1]}'], 'line 1: need an object with "prompt" \\(text\\) or'),
    (["", "not json"], "line 2 is not JSON"),
    (['{"prompt_ids": [1, "2"]}'], '"prompt_ids" must be a list of ints'),
    ([], "holds no prompt"),
])
def test_a_bad_jsonl_file_is_named_with_its_line(model, tmp_path, capsys, lines, message):
  path = jaxdec.save(model, str(tmp_path / "m"))
  file = tmp_path / "p.jsonl"
  file.write_text("\n".join(lines))
  assert cli.main(["generate", "--model", path, "--prompts-file", str(file)]) == 2
  assert re.search(message, capsys.readouterr().err)


@pytest.mark.parametrize("flags, message", [
    (["--method", "greedy", "--temperature", "0.7"],
     "--temperature 0.7 samples, but --method greedy decodes greedily"),
    (["--method", "sample", "--temperature", "0"], "--method sample needs --temperature > 0"),
    (["--method", "greedy", "--drafter", "lookup"], "--drafter only acts with --method speculative"),
    (["--method", "sample", "--cache", "dual"], "--cache only acts with --method diffusion"),
    (["--drafter", "lookup", "--steps", "4"], "--drafter is a speculative-decoding flag and --steps"),
    (["--method", "speculative", "--scheduler", "fixed"], "--scheduler only acts with --method diffusion"),
    (["--scheduler", "fixed"], "--scheduler needs a masked-diffusion model"),
    (["--method", "diffusion"], "--method diffusion needs a masked-diffusion model"),
    (["--drafter", "draft:"], "--drafter draft:... needs the draft model"),
    (["--drafter", "medusa"], "--drafter must be lookup, adapld, draft:MODEL"),
    (["--drafter", "heads:"], "--drafter heads:... needs the heads' directory"),
    (["--drafter", "kforcing:"], "--drafter kforcing:... needs the student's directory"),
    (["--drafter", "kforcing:zoo:gsm-mtp"], "holds a Heads drafter, not a K-Forcing student"),
    (["--drafter", "eagle:"], "--drafter eagle:... needs the drafter's directory"),
    (["--drafter", "eagle:zoo:gsm-mtp"], "holds a Heads drafter, not an EAGLE-3 drafter"),
    (["--drafter", "heads:zoo:gsm-mtp", "--num-tokens", "3"],
     "--num-tokens does not act on --drafter heads:zoo:gsm-mtp"),
    (["--drafter", "lookup", "--branches", "2"], "--branches does not act on --drafter lookup"),
])
def test_contradictory_flags_exit_2_naming_the_flag(model, tmp_path, capsys, flags, message):
  path = jaxdec.save(model, str(tmp_path / "m"))
  assert cli.main(["generate", "--model", path, "--prompt-ids", "5 6", *flags]) == 2
  assert message in capsys.readouterr().err


@pytest.mark.parametrize("flags, message", [
    (["--method", "greedy"], "--method greedy needs an autoregressive model"),
    (["--threshold", "0.9", "--scheduler", "factor"], "--threshold is the value of --scheduler "
                                                      "threshold, not of --scheduler factor"),
    (["--threshold", "0.9", "--delta", "0.2"], "--threshold and --delta are values of two schedulers"),
    (["--top-p", "0.9", "--temperature", "1"], "--top-k 0 / --top-p 0.9 act on autoregressive sampling"),
    (["--gen-length", "24", "--block-length", "16"], "--gen-length 24 (the canvas length) is not a multiple of --block-length 16"),
    (["--max-new-tokens", "40"], "--max-new-tokens 40 (the canvas length) is not a multiple of --block-length 32"),
    (["--gen-length", "32", "--block-length", "8", "--steps", "6"], "--steps 6 is not a multiple of the number of blocks"),
])
def test_contradictory_diffusion_flags_exit_2_naming_the_flag(tmp_path, capsys, flags, message):
  path = jaxdec.save(_dlm(), str(tmp_path / "m"))
  assert cli.main(["generate", "--model", path, "--prompt-ids", "7 8", *flags]) == 2
  assert message in capsys.readouterr().err


def test_prompt_sources_are_exclusive(model, tmp_path, capsys):
  with pytest.raises(SystemExit) as exit:
    cli.main(["generate", "--model", "m", "--prompt", "a", "--prompt-ids", "1"])
  assert exit.value.code == 2
  assert "argument --prompt-ids: not allowed with argument --prompt" in capsys.readouterr().err
  with pytest.raises(SystemExit):
    cli.main(["generate", "--model", "m", "--prompts-file", "f", "--batch-size", "0"])
  assert "argument --batch-size: must be a positive int, got '0'" in capsys.readouterr().err


# ---- jaxdec demo --------------------------------------------------------------------------------

def test_demo_reads_well_without_a_terminal(monkeypatch, capsys):
  """Before: "(completion in bold)" with nothing bold when piped, no legend, 1234 and 1,234 side
  by side."""
  from jaxdec import demo

  tok = jaxdec.load_tokenizer("zoo:pycode-ar")
  prompts = [tok.encode("import os\nx = 1\n", add_bos=False), tok.encode("y = 2\n", add_bos=False)]
  completion = tok.encode("print(x)\n", add_bos=False)

  def fake(models, prompts, new_tokens):
    tokens = np.array([completion] * len(prompts), np.int32)
    return tokens, np.full((len(prompts),), len(completion), np.int32), np.array([1234, 3])

  monkeypatch.setattr(demo, "held_out_prompts", lambda tok, n, prompt_tokens: prompts[:n])
  monkeypatch.setattr(demo, "methods", lambda: {"fake AR": fake})
  rows = demo.run(num_prompts=2, new_tokens=16, show=1, gsm=False)
  out = capsys.readouterr().out
  assert "\033[" not in out and "bold" not in out
  assert "--- held-out prompt 0, its last lines ---\nimport os\nx = 1\n--- its completion by fake AR ---\nprint(x)\n" in out
  assert "2 held-out prompts x 16 new tokens" in out
  assert "forwards: target-model forward passes, prefill included" in out
  assert "| 1,237    |" in out and "| 0.01           |" in out  # forwards, tokens/forward
  assert rows[0]["forwards"] == 1237 and rows[0]["tokens"] == 2 * len(completion)


# ---- controls: --stop, --min-new-tokens, --repetition-penalty, --logprobs, --stream -------------

def test_controls_equal_the_api(model, tmp_path, capsys):
  path = jaxdec.save(model, str(tmp_path / "m"))
  assert cli.main(["generate", "--model", path, "--prompt-ids", "5 6 7", "--max-new-tokens", "8",
                   "--min-new-tokens", "3", "--repetition-penalty", "1.3", "--logprobs",
                   "--jsonl"]) == 0
  record = json.loads(capsys.readouterr().out)
  expected = jaxdec.generate(model, [[5, 6, 7]], max_new_tokens=8, min_new_tokens=3,
                             repetition_penalty=1.3, logprobs=True)
  assert record["completion_ids"] == _expected(expected)
  np.testing.assert_allclose(record["logprobs"], expected.logprobs[0, : int(expected.lengths[0])],
                             rtol=1e-6)
  assert record["completion_ids"] != _expected(jaxdec.generate(model, [[5, 6, 7]], 8))


def test_stop_and_stream_on_text(text_model, capsys):
  model, tok, path = text_model
  argv = ["generate", "--model", path, "--prompt", "def f", "--max-new-tokens", "8"]
  assert cli.main(argv) == 0
  plain = capsys.readouterr().out
  assert cli.main(argv + ["--stream"]) == 0
  assert capsys.readouterr().out == plain  # Streamed piece by piece, the same text.
  stop = plain[len("def f") + 1: len("def f") + 3]  # Text the completion does contain.
  assert cli.main(argv + ["--stop", stop.replace("\n", "\\n")]) == 0
  expected = jaxdec.complete(model, tok, ["def f"], 8, stop_strings=[stop])[0]
  assert capsys.readouterr().out == "def f" + expected + "\n"
  assert expected.endswith(stop) and len(expected) < len(plain) - len("def f\n")


@pytest.mark.parametrize("flags, message", [
    (["--stop", "x"], "--stop matches text: it needs the model's tokenizer.json"),
    (["--logprobs"], '--logprobs adds a "logprobs" list to each --jsonl record: pass --jsonl'),
    (["--stream", "--jsonl"], "--stream prints one prompt's completion as it grows; it does not "
                              "combine with --jsonl"),
])
def test_controls_refuse_what_they_cannot_do(model, tmp_path, capsys, flags, message):
  path = jaxdec.save(model, str(tmp_path / "m"))
  assert cli.main(["generate", "--model", path, "--prompt-ids", "5 6", *flags]) == 2
  assert message in capsys.readouterr().err


def test_controls_refuse_diffusion(tmp_path, capsys):
  path = jaxdec.save(_dlm(), str(tmp_path / "m"))
  assert cli.main(["generate", "--model", path, "--prompt-ids", "7 8", "--min-new-tokens", "2"]) == 2
  assert "--min-new-tokens acts on autoregressive and speculative decoding" in capsys.readouterr().err


def test_python_m_jaxdec_is_the_console_script():
  """`python -m jaxdec` runs the CLI where the `jaxdec` script is not on PATH (a notebook's
  kernel, a bare interpreter)."""
  import subprocess
  import sys

  done = subprocess.run([sys.executable, "-m", "jaxdec", "--help"], capture_output=True, text=True,
                        check=False)
  assert done.returncode == 0, done.stderr
  assert "generate" in done.stdout and "bench" in done.stdout
