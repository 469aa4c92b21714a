import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest

from jaxdec.model import Bidirectional, Embeddings, Model, ModelConfig
from jaxdec.model.params import flatten
from jaxdec import corpus
from jaxdec.train.evaluate import bits_per_byte
from jaxdec.train.objectives import MaskedDiffusion, NextToken
from jaxdec.train.tokenizer import SPECIAL_TOKENS
from jaxdec.train.trainable import FullModel
from jaxdec.train.trainer import TrainConfig, Trainer
from tiny import flat_dict, updated

VOCAB = 512  # The conftest tokenizer's vocabulary.


def _config(objective=NextToken(), steps=40, **model_overrides):
  model = updated(ModelConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128,
                              num_layers=2, num_heads=2, num_kv_heads=1, head_dim=32,
                              max_position_embeddings=128, embeddings=Embeddings(tied=True)),
                  **model_overrides)
  return TrainConfig(name="tiny", model=model, objective=objective, steps=steps, batch_size=8,
                     seq_len=64, learning_rate=3e-3, warmup_steps=4, checkpoint_every=3,
                     eval_every=1000)


def test_split_is_deterministic_and_disjoint():
  train = corpus.stdlib_split("train")
  val = corpus.stdlib_split("validation")
  assert {f.relpath for f in train}.isdisjoint({f.relpath for f in val})
  assert [f.relpath for f in val] == sorted(f.relpath for f in val)
  assert all(corpus.is_validation(f.relpath) for f in val)
  assert 0.02 < len(val) / (len(train) + len(val)) < 0.09
  assert not any("site-packages" in f.relpath for f in train)


def test_tokenizer_round_trips_every_validation_file(tokenizer):
  texts, _ = corpus.read_texts(corpus.stdlib_split("validation"))
  for text in texts:
    assert tokenizer.decode(tokenizer.encode(text, add_bos=False), skip_special_tokens=False) == text
  for kind, token in SPECIAL_TOKENS.items():
    assert tokenizer.backend.id_to_token(getattr(tokenizer, f"{kind}_id")) == token


def test_training_loss_goes_down(tmp_path, stream):
  trainer = Trainer(_config(), str(tmp_path))
  records = trainer.run(stream, progress=False)
  first, last = records[0]["loss"], np.mean([r["loss"] for r in records[-5:]])
  assert last < first - 1.0, (first, last)


@pytest.mark.parametrize("objective", [NextToken(), MaskedDiffusion()])
def test_resume_continues_exactly(tmp_path, stream, objective):
  overrides = {} if isinstance(objective, NextToken) else dict(attention=Bidirectional(), tokens=dict(mask=3))
  cfg = _config(objective, steps=6, **overrides)
  straight = Trainer(cfg, str(tmp_path / "a"))
  losses_a = [r["loss"] for r in straight.run(stream, progress=False)]
  interrupted = Trainer(cfg, str(tmp_path / "b"))
  losses_b = [r["loss"] for r in interrupted.run(stream, stop_at=3, progress=False)]
  interrupted.close()
  resumed = Trainer(cfg, str(tmp_path / "b"))  # A new process would do exactly this.
  assert resumed.step == 3
  losses_b += [r["loss"] for r in resumed.run(stream, progress=False)]
  assert losses_a == losses_b
  a, b = flatten(straight.module.params()), flatten(resumed.module.params())
  for name in a:
    np.testing.assert_array_equal(a[name], b[name])


def test_masked_diffusion_objective_weights_by_inverse_ratio():
  cfg = _config(attention=Bidirectional(), tokens=dict(mask=3)).model
  objective = MaskedDiffusion()
  tokens = jnp.asarray(np.random.RandomState(0).randint(4, VOCAB, (64, 64)), jnp.int32)
  noisy, masked, p, _ = objective.corrupt(tokens, jax.random.key(0), 3, t=jnp.full((64,), 0.3))
  assert abs(float(masked.mean()) - 0.3) < 0.02
  assert bool(jnp.all(jnp.where(masked, noisy == 3, noisy == tokens)))
  params = Trainer(_config(MaskedDiffusion(), attention=Bidirectional(), tokens=dict(mask=3)), "/tmp/unused-md").module.params()
  per_seq, masked, _ = objective.weighted_nll(params, tokens, jax.random.key(1), cfg)
  loss, _ = objective.loss(params, tokens, jax.random.key(1), part=FullModel(cfg))
  np.testing.assert_allclose(loss, per_seq.sum() / tokens.size, rtol=1e-6)
  with pytest.raises(ValueError, match="bidirectional config with tokens.mask"):
    objective.loss(params, tokens, jax.random.key(1), part=FullModel(_config().model))


def test_a_shifted_dream_config_scores_token_i_with_output_i_minus_1():
  """Dream's layout: masked token i is predicted by the output at i - 1, and position 0 (no output
  before it) is never masked."""
  from jaxdec.model import forward, init_params

  cfg = _config(attention=Bidirectional(), tokens=dict(mask=3),
                embeddings=dict(shifted_logits=True)).model
  params = init_params(cfg, jax.random.key(0), std=0.3)
  tokens = jnp.asarray(np.random.RandomState(4).randint(4, VOCAB, (4, 32)), jnp.int32)
  objective, ones = MaskedDiffusion(), jnp.ones((4,))
  per_seq, masked, _ = objective.weighted_nll(params, tokens, jax.random.key(2), cfg, t=ones)
  assert not bool(masked[:, 0].any()) and bool(masked[:, 1:].all())
  noisy = jnp.where(masked, 3, tokens)
  logits = forward(params, noisy, jnp.broadcast_to(jnp.arange(32), (4, 32)), config=cfg)[0]
  p_mask = (1 - objective.eps) + objective.eps
  expected = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], tokens[:, 1:])
  np.testing.assert_allclose(per_seq, expected.sum(1) / p_mask, rtol=1e-5)


def test_prefix_fraction_keeps_a_clean_prompt_shaped_prefix():
  """With prefix_fraction=1 and t=1 each row is a clean prefix of random length followed by masks
  only (the canvas the samplers see); without it every position is masked."""
  tokens = jnp.asarray(np.random.RandomState(1).randint(4, VOCAB, (64, 32)), jnp.int32)
  ones = jnp.ones((64,))
  _, masked, _, _ = MaskedDiffusion().corrupt(tokens, jax.random.key(0), 3, t=ones)
  assert bool(masked.all())
  _, masked, _, _ = MaskedDiffusion(prefix_fraction=1.0).corrupt(tokens, jax.random.key(0), 3, t=ones)
  masked = np.asarray(masked)
  prefix = (~masked).sum(1)
  np.testing.assert_array_equal(masked, np.arange(32)[None, :] >= prefix[:, None])
  assert len(set(prefix.tolist())) > 10


def test_block_lays_out_the_semi_autoregressive_canvas():
  """block=4: after each row's clean prefix, 4 positions masked at ratio t and scored, then
  everything masked and unscored (what a sampler decoding one block sees)."""
  tokens = jnp.asarray(np.random.RandomState(1).randint(4, VOCAB, (64, 32)), jnp.int32)
  objective = MaskedDiffusion(prefix_fraction=1.0, block=4)
  noisy, masked, _, visible = objective.corrupt(tokens, jax.random.key(0), 3, t=jnp.ones((64,)))
  noisy, masked = np.asarray(noisy), np.asarray(masked)
  prefix = (noisy != 3).sum(1)
  where = np.arange(32)[None, :]
  np.testing.assert_array_equal(noisy == 3, where >= prefix[:, None])
  np.testing.assert_array_equal(masked, (where >= prefix[:, None]) & (where < prefix[:, None] + 4))
  noisy, masked, _, _ = objective.corrupt(tokens, jax.random.key(0), 3, t=jnp.full((64,), 0.5))
  noisy, masked = np.asarray(noisy), np.asarray(masked)
  inside = (where >= prefix[:, None]) & (where < prefix[:, None] + 4)
  assert not masked[~inside].any() and 0.3 < masked[inside].mean() < 0.7
  np.testing.assert_array_equal(noisy[~inside] == 3, (where >= prefix[:, None] + 4)[~inside])
  assert (np.asarray(visible) == 32).all()
  hidden = MaskedDiffusion(prefix_fraction=1.0, block=4, visible_suffix=2)
  _, _, _, visible = hidden.corrupt(tokens, jax.random.key(0), 3, t=jnp.ones((64,)))
  np.testing.assert_array_equal(visible, np.minimum(prefix + 6, 32))
  with pytest.raises(ValueError, match="set prefix_fraction > 0"):
    MaskedDiffusion(block=4)
  with pytest.raises(ValueError, match="visible_suffix must be None or an int >= 0 with a block"):
    MaskedDiffusion(prefix_fraction=0.5, visible_suffix=0)


def test_bits_per_byte_scores_each_token_once(tokenizer):
  """Windows overlapping by one token score every token after BOS exactly once, each with the
  context inside its window: equal to one forward per window computed by hand."""
  from jaxdec.model import forward, init_params

  config = _config().model
  model = Model(config, init_params(config, jax.random.key(0), std=0.1))
  text = "def add(a, b):\n    return a + b\n" * 6
  ids = np.asarray([tokenizer.bos_id] + tokenizer.encode(text, add_bos=False), np.int32)
  assert 60 < len(ids) < 128

  def nll(window):
    positions = jnp.arange(len(window) - 1, dtype=jnp.int32)[None]
    logits, _, _ = forward(model.params, jnp.asarray(window[None, :-1]), positions, config=config)
    logp = jax.nn.log_softmax(logits[0], axis=-1)
    return -float(jnp.sum(jnp.take_along_axis(logp, jnp.asarray(window[1:, None]), axis=1)))

  expected = sum(nll(ids[s: s + 32]) for s in range(0, len(ids) - 1, 31))
  result = bits_per_byte(model, tokenizer, [text], seq_len=32)
  np.testing.assert_allclose(result["nats_per_token"] * result["tokens"], expected, rtol=1e-4)
  assert result["tokens"] == len(ids) - 1 and result["bytes"] == len(text)
  whole = bits_per_byte(model, tokenizer, [text], seq_len=128)  # One window: the plain NLL.
  np.testing.assert_allclose(whole["nats_per_token"] * whole["tokens"], nll(ids), rtol=1e-4)


def test_distillation_moves_the_student_towards_the_teacher(tmp_path, stream):
  """Distill: KL(teacher || student) falls during training, and the student's predictions agree
  with the teacher's more often than at the start."""
  import jaxdec
  from jaxdec.model import forward
  from jaxdec.train.objectives import Distill

  teacher_run = Trainer(dataclasses.replace(_config(), name="teacher"), str(tmp_path / "teacher_run"))
  teacher_run.run(stream, progress=False)  # A teacher with real structure to imitate.
  teacher = teacher_run.to_model()
  teacher_cfg = teacher.config
  path = jaxdec.save(teacher, str(tmp_path / "teacher"))
  cfg = dataclasses.replace(_config(objective=Distill(), steps=30), name="student", seed=1,
                            target=path)
  trainer = Trainer(cfg, str(tmp_path / "run"))
  tokens = jnp.asarray(stream[:64 * 8].reshape(8, 64))
  positions = jnp.broadcast_to(jnp.arange(64, dtype=jnp.int32), (8, 64))
  agree = lambda params: float(jnp.mean(
      jnp.argmax(forward(params, tokens, positions, config=cfg.model)[0], -1)
      == jnp.argmax(forward(teacher.params, tokens, positions, config=teacher_cfg)[0], -1)))
  before = agree(trainer.module.params())
  records = trainer.run(stream, progress=False)
  after = agree(trainer.module.params())
  assert np.mean([r["loss"] for r in records[-5:]]) < 0.5 * records[0]["loss"]
  assert after > before + 0.1


def test_staged_runs_record_their_lineage_and_total_cost(tmp_path):
  from jaxdec.train.zoo import lineage
  from jaxdec.zoo import METADATA_FILE

  (tmp_path / METADATA_FILE).write_text('{"name": "stage1", "tokens_seen": 100, "train_seconds": 10.0}')
  record = lineage(str(tmp_path), {"tokens_seen": 50, "train_seconds": 5.0})
  assert record["init_from"]["metadata"]["name"] == "stage1"
  assert (record["total_tokens_seen"], record["total_train_seconds"]) == (150, 15.0)
  assert lineage(None, {}) == {}


def test_clean_prefix_is_never_masked():
  tokens = jnp.asarray(np.random.RandomState(2).randint(4, VOCAB, (16, 32)), jnp.int32)
  _, masked, _, _ = MaskedDiffusion(clean_prefix=12).corrupt(tokens, jax.random.key(0), 3, t=jnp.ones((16,)))
  np.testing.assert_array_equal(np.asarray(masked), np.broadcast_to(np.arange(32) >= 12, (16, 32)))


def test_rows_of_ready_made_sequences_are_sampled_whole():
  rows = np.arange(5 * 8, dtype=np.int32).reshape(5, 8)
  batch = corpus.sample_windows(rows, 6, 8, seed=0, step=3)
  assert all(any((b == r).all() for r in rows) for b in batch)
  np.testing.assert_array_equal(batch, corpus.sample_windows(rows, 6, 8, seed=0, step=3))
  with pytest.raises(ValueError, match="training rows have 8 tokens but seq_len is 16"):
    corpus.sample_windows(rows, 6, 16, seed=0, step=3)


def test_teacher_samples_are_the_teachers_continuations(tmp_path, monkeypatch, stream):
  """Rows are [corpus window | what `generate` samples from the teacher with the recorded key],
  built once and then read from the cache."""
  import jaxdec
  from jaxdec.model import init_params
  from jaxdec.train.distill import TeacherSamples

  monkeypatch.setenv("JAXDEC_DATA_DIR", str(tmp_path / "cache"))
  config = _config().model
  teacher = Model(config, init_params(config, jax.random.key(0), std=0.1))
  path = jaxdec.save(teacher, str(tmp_path / "teacher"))
  spec = TeacherSamples(teacher=path, count=5, prompt_len=6, gen_len=4, temperature=0.8,
                        seed=3, batch_size=4)
  rows = spec.build(stream, progress=False)
  assert rows.shape == (5, 10) and rows.dtype == np.int32
  prompts = corpus.sample_windows(stream, 4, 6, seed=3, step=1)
  expected = jaxdec.generate(teacher, prompts, max_new_tokens=4,
                             sampling=jaxdec.Sampling.create(temperature=0.8),
                             key=jax.random.fold_in(jax.random.key(3), 1), stop_tokens=(),
                             lengths=np.full(4, 6)).tokens
  np.testing.assert_array_equal(rows[4], np.concatenate([prompts[0], np.asarray(expected)[0]]))
  assert len(list((tmp_path / "cache").glob("teacher-samples-*.npy"))) == 1
  np.testing.assert_array_equal(spec.build(stream, progress=False), rows)
  with pytest.raises(ValueError, match="exceeds the teacher's 128 positions"):
    TeacherSamples(teacher=path, prompt_len=100, gen_len=100).build(stream, progress=False)


def test_certainty_forcing_adds_the_entropy_of_correct_predictions():
  """loss = ELBO term + w * mean entropy over masked positions whose argmax is the target."""
  from jaxdec.model import forward, init_params

  cfg = _config(attention=Bidirectional(), tokens=dict(mask=3)).model
  params = init_params(cfg, jax.random.key(0), std=0.3)
  tokens = jnp.asarray(np.random.RandomState(3).randint(4, VOCAB, (4, 32)), jnp.int32)
  plain = MaskedDiffusion()
  noisy, masked, _, _ = plain.corrupt(tokens, jax.random.key(1), 3)
  logits = forward(params, noisy, jnp.broadcast_to(jnp.arange(32), (4, 32)), config=cfg)[0]
  # Make some masked predictions right, so the term has positions to average over.
  tokens = jnp.where(masked & (jnp.arange(32)[None, :] % 2 == 0), jnp.argmax(logits, -1), tokens)
  p = np.asarray(jax.nn.softmax(logits, -1), np.float64)
  entropy = -(p * np.log(p)).sum(-1)
  correct = np.asarray(masked & (jnp.argmax(logits, -1) == tokens))
  assert correct.sum() > 5
  base, _ = plain.loss(params, tokens, jax.random.key(1), part=FullModel(cfg))
  forced, metrics = MaskedDiffusion(certainty_weight=0.5).loss(params, tokens, jax.random.key(1),
                                                               part=FullModel(cfg))
  np.testing.assert_allclose(metrics["correct_entropy"], entropy[correct].mean(), rtol=1e-4)
  np.testing.assert_allclose(forced, base + 0.5 * entropy[correct].mean(), rtol=1e-5)


@pytest.mark.parametrize("field, value, message", [
    ("warmup_steps", 40, "warmup_steps must be in \\[0, steps\\), got warmup_steps=40 with steps=40"),
    ("warmup_steps", -1, "warmup_steps=-1"),
    ("steps", 0, "steps must be an int >= 1, got 0"),
    ("batch_size", 0, "batch_size must be an int >= 1, got 0"),
    ("seq_len", 1, "seq_len must be an int >= 2, got 1"),
    ("seq_len", 256, "seq_len=256 exceeds the model's max_position_embeddings=128"),
    ("eval_seq_len", 1, "eval_seq_len must be None or an int >= 2, got 1"),
    ("learning_rate", 0.0, "learning_rate must be positive, got 0.0"),
    ("learning_rate", -1e-3, "learning_rate must be positive"),
])
def test_train_config_rejects_bad_values_up_front(field, value, message):
  """Before: warmup_steps >= steps surfaced as optax's 'decay_steps=-40' after the corpus loaded."""
  with pytest.raises(ValueError, match=message):
    dataclasses.replace(_config(), **{field: value})
  with pytest.raises(ValueError, match="exactly one of model"):
    TrainConfig(name="neither")


def _save_without_fingerprint(trainer: Trainer) -> None:
  """A checkpoint as runs wrote them before fingerprints were stored."""
  import orbax.checkpoint as ocp

  trainer.manager.save(trainer.step, args=ocp.args.Composite(
      state=ocp.args.StandardSave(trainer._state()),
      meta=ocp.args.JsonSave({"step": trainer.step, "name": trainer.cfg.name})), force=True)
  trainer.manager.wait_until_finished()


def test_a_workdir_of_another_model_is_refused(tmp_path, stream):
  """Before: orbax's 'set strict=False in ArrayRestoreArgs' and an event-loop traceback."""
  first = Trainer(_config(steps=6), str(tmp_path / "new"))
  first.run(stream, stop_at=3, progress=False)
  first.close()
  wider = dataclasses.replace(_config(steps=6), model=dataclasses.replace(_config().model,
                                                                          hidden_size=96))
  with pytest.raises(ValueError, match="holds another model's run.*use a new --workdir"):
    Trainer(wider, str(tmp_path / "new"))
  bidirectional = _config(steps=6, attention=Bidirectional())  # Same shapes, another model.
  with pytest.raises(ValueError, match="holds another model's run"):
    Trainer(bidirectional, str(tmp_path / "new"))
  old = Trainer(_config(steps=6), str(tmp_path / "old"))
  old.step = 3
  _save_without_fingerprint(old)
  old.close()
  with pytest.raises(ValueError, match="holds another model's run.*other parameter shapes"):
    Trainer(wider, str(tmp_path / "old"))
  assert Trainer(_config(steps=6), str(tmp_path / "old")).step == 3  # Old runs still resume.


def _save_with_flat_fingerprint(trainer: Trainer, **changes) -> None:
  """A checkpoint as runs wrote them before ModelConfig's groups: the config's fields flat."""
  import orbax.checkpoint as ocp

  fingerprint = trainer.fingerprint()
  fingerprint["part"]["config"] = dict(flat_dict(fingerprint["part"]["config"]), **changes)
  meta = {"step": trainer.step, "name": trainer.cfg.name, "fingerprint": fingerprint}
  trainer.manager.save(trainer.step, args=ocp.args.Composite(
      state=ocp.args.StandardSave(trainer._state()), meta=ocp.args.JsonSave(meta)), force=True)
  trainer.manager.wait_until_finished()


def test_checkpoints_with_a_flat_config_fingerprint_resume(tmp_path):
  """Fingerprints saved before ModelConfig's groups spell the config flat: the same config
  resumes, and another one (same shapes) is still refused, naming the regrouped field."""
  for name, changes in (("same", {}), ("other", {"rms_norm_eps": 1e-5})):
    old = Trainer(_config(steps=6), str(tmp_path / name))
    old.step = 3
    _save_with_flat_fingerprint(old, **changes)
    old.close()
  assert Trainer(_config(steps=6), str(tmp_path / "same")).step == 3
  with pytest.raises(ValueError, match=r"part.config.layer.norm_eps: 1e-05 -> 1e-06"):
    Trainer(_config(steps=6), str(tmp_path / "other"))


def _interrupt_at(monkeypatch, call: int, how: str) -> None:
  """Patch train_step so that its `call`-th call (0-based) interrupts the run: 'raise' raises
  KeyboardInterrupt before the step, 'signal' sends this process SIGINT (Ctrl-C) during it,
  'crash' raises RuntimeError before it (a crash: nothing is saved)."""
  import os
  import signal

  from jaxdec.train import trainer as trainer_module

  real, calls = trainer_module.train_step, []

  def step(*args):
    calls.append(None)
    if len(calls) == call + 1:
      if how == "signal":
        os.kill(os.getpid(), signal.SIGINT)
      else:
        raise KeyboardInterrupt if how == "raise" else RuntimeError("crash")
    return real(*args)

  monkeypatch.setattr(trainer_module, "train_step", step)


def _logged(workdir) -> list[dict]:
  import json

  with open(workdir / "metrics.jsonl") as f:
    return [json.loads(line) for line in f]


@pytest.fixture(scope="module")
def straight_losses(tmp_path_factory, stream):
  """The losses of an uninterrupted run of `_config(steps=6)`."""
  with jax.numpy_dtype_promotion("standard"):
    trainer = Trainer(_config(steps=6), str(tmp_path_factory.mktemp("straight")))
    return [r["loss"] for r in trainer.run(stream, progress=False)]


@pytest.mark.parametrize("how, call, saved", [("raise", 4, 4), ("signal", 3, 4), ("crash", 4, 3)])
def test_an_interrupted_run_resumes_exactly_with_one_metrics_row_per_step(
    tmp_path, stream, monkeypatch, straight_losses, how, call, saved):
  """Ctrl-C (a SIGINT, or a KeyboardInterrupt raised in the loop) saves a checkpoint of the last
  finished step and raises TrainingInterrupted; after a crash the run resumes from the last
  checkpoint (step 3) instead. Either way the resumed run ends with the straight run's losses,
  and metrics.jsonl holds each step once (rows logged past the checkpoint are dropped)."""
  import signal

  from jaxdec.train.trainer import TrainingInterrupted

  cfg = _config(steps=6)  # Checkpoints every 3 steps.
  run = Trainer(cfg, str(tmp_path / "b"))
  _interrupt_at(monkeypatch, call, how)
  with pytest.raises(TrainingInterrupted if how != "crash" else RuntimeError) as info:
    run.run(stream, progress=False)
  assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # Restored.
  if how != "crash":
    assert (info.value.step, info.value.directory) == (saved, str(tmp_path / "b" / "checkpoints"))
  assert run.manager.latest_step() == saved
  assert [r["step"] for r in _logged(tmp_path / "b")] == list(range(1, call + 1 + (how == "signal")))
  run.close()
  monkeypatch.undo()
  resumed = Trainer(cfg, str(tmp_path / "b"))
  assert resumed.step == saved
  resumed.run(stream, progress=False)
  rows = _logged(tmp_path / "b")
  assert [r["step"] for r in rows] == [1, 2, 3, 4, 5, 6]
  assert [r["loss"] for r in rows] == straight_losses


def test_jaxdec_train_reports_where_ctrl_c_saved_and_returns_130(tmp_path, stream, monkeypatch,
                                                                  capsys):
  import jaxdec.cli
  import jaxdec.configs
  import jaxdec.train.zoo

  monkeypatch.setattr(jaxdec.configs, "load_config", lambda path: _config(steps=6))
  monkeypatch.setattr(jaxdec.train.zoo, "train_and_export",
                      lambda cfg, workdir, export, **_: Trainer(cfg, workdir).run(stream, progress=False))
  _interrupt_at(monkeypatch, 2, "raise")
  code = jaxdec.cli.main(["train", "--config", "tiny.py", "--workdir", str(tmp_path), "--no-export"])
  assert code == 130
  assert (f"jaxdec train: interrupted at step 2; checkpoint saved in {tmp_path / 'checkpoints'}"
          in capsys.readouterr().err)


def test_training_on_a_mesh_equals_one_device(tmp_path, stream):
  """Data parallel over 4 devices with the params tensor parallel over 2: the same losses as
  without a mesh, and the params really sharded."""
  import warnings

  from jaxdec import sharding

  if jax.device_count() < 8:
    pytest.skip("needs 8 devices")
  cfg = _config(steps=6)
  plain = [r["loss"] for r in Trainer(cfg, str(tmp_path / "a")).run(stream, stop_at=3, progress=False)]
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # The one KV head does not divide 2: replicated.
    sharded = Trainer(cfg, str(tmp_path / "b"), mesh=sharding.make_mesh(data=4, model=2))
  losses = [r["loss"] for r in sharded.run(stream, stop_at=3, progress=False)]
  np.testing.assert_allclose(losses, plain, rtol=1e-5)
  wq = sharded.module.params().layers.wq  # [L, D, heads, head_dim]: heads split over 2.
  assert wq.sharding.mesh.shape == {"data": 4, "model": 2} and tuple(wq.sharding.spec)[2] == "model"
  assert wq.addressable_shards[0].data.shape == (2, 64, 1, 32)
  with pytest.raises(ValueError, match="batch_size=8 is not divisible by the mesh's data axis of size 3"):
    Trainer(cfg, str(tmp_path / "c"), mesh=sharding.make_mesh(data=3, model=1))


def test_packing_keeps_documents_whole_and_scores_completions_only():
  rng = np.random.RandomState(3)
  documents = [(list(rng.randint(4, VOCAB, size=n)), k) for n, k in
               [(5, 2), (9, 3), (3, 1), (16, 4), (7, 0), (11, 5), (2, 1)]]
  rows = corpus.pack(documents, 16, pad_id=0, seed=1)
  assert rows.tokens.shape[1] == 16 and len(rows.tokens) < len(documents)
  found = []
  for tokens, scored in zip(rows.tokens, rows.scored):
    start = 0
    while start < 16 and tokens[start] != 0:  # Each row: whole documents, then PAD only.
      ids, unscored = next((d for d in documents if list(tokens[start:start + len(d[0])]) == d[0]))
      np.testing.assert_array_equal(scored[start:start + len(ids)],
                                    np.arange(len(ids)) >= unscored)
      found.append(ids)
      start += len(ids)
    assert not tokens[start:].any() and not scored[start:].any()
  assert sorted(map(tuple, found)) == sorted(tuple(d[0]) for d in documents)
  np.testing.assert_array_equal(rows.tokens, corpus.pack(documents, 16, 0, seed=1).tokens)
  with pytest.raises(ValueError, match="a document of 17 tokens does not fit rows of 16"):
    corpus.pack([(list(range(17)), 0)], 16, pad_id=0)


def test_sample_batch_picks_whole_rows_with_their_scored_masks():
  tokens = np.arange(5 * 8, dtype=np.int32).reshape(5, 8)
  rows = corpus.Rows(tokens, tokens % 3 == 0)
  picked, scored = corpus.sample_batch(rows, 6, 8, seed=0, step=3)
  for t, s in zip(picked, scored):
    np.testing.assert_array_equal(s, t % 3 == 0)
  np.testing.assert_array_equal(picked, corpus.sample_batch(rows, 6, 8, seed=0, step=3)[0])
  assert corpus.sample_batch(tokens, 2, 8, seed=0, step=3)[1] is None
  with pytest.raises(ValueError, match="training rows have 8 tokens but seq_len is 16"):
    corpus.sample_batch(rows, 6, 16, seed=0, step=3)


def test_scored_positions_are_the_only_ones_the_losses_count():
  """NextToken averages the NLL of scored targets only; MaskedDiffusion never masks an unscored
  token and divides by the number of scored ones; all-scored equals no mask."""
  from jaxdec.model import forward

  tokens = jnp.asarray(np.random.RandomState(4).randint(4, VOCAB, (4, 24)), jnp.int32)
  scored = jnp.asarray(np.random.RandomState(5).rand(4, 24) < 0.5)
  cfg = _config().model
  params = Trainer(_config(), "/tmp/unused-nt").module.params()
  loss, _ = NextToken().loss(params, tokens, None, part=FullModel(cfg), scored=scored)
  logits, _, _ = forward(params, tokens[:, :-1], jnp.broadcast_to(jnp.arange(23), (4, 23)),
                         config=cfg)
  nll = -jnp.take_along_axis(jax.nn.log_softmax(logits), tokens[:, 1:, None], -1)[..., 0]
  np.testing.assert_allclose(loss, nll[scored[:, 1:]].mean(), rtol=1e-5)
  full, _ = NextToken().loss(params, tokens, None, part=FullModel(cfg))
  same, _ = NextToken().loss(params, tokens, None, part=FullModel(cfg),
                             scored=jnp.ones_like(scored))
  np.testing.assert_allclose(full, same, rtol=1e-6)
  np.testing.assert_allclose(full, nll.mean(), rtol=1e-5)

  dlm = _config(MaskedDiffusion(), attention=Bidirectional(), tokens=dict(mask=3))
  objective = MaskedDiffusion()
  _, masked, _, _ = objective.corrupt(tokens, jax.random.key(0), 3, t=jnp.ones((4,)), scored=scored)
  np.testing.assert_array_equal(masked, scored)
  params = Trainer(dlm, "/tmp/unused-md2").module.params()
  per_seq, _, _ = objective.weighted_nll(params, tokens, jax.random.key(1), dlm.model,
                                         scored=scored)
  loss, _ = objective.loss(params, tokens, jax.random.key(1), part=FullModel(dlm.model),
                           scored=scored)
  np.testing.assert_allclose(loss, per_seq.sum() / scored.sum(), rtol=1e-6)


def test_evaluate_on_rows_scores_only_their_scored_tokens(tmp_path):
  tokens = np.random.RandomState(6).randint(4, VOCAB, (8, 64)).astype(np.int32)
  trainer = Trainer(_config(), str(tmp_path))
  everything = trainer.evaluate(tokens)
  assert trainer.evaluate(corpus.Rows(tokens, np.ones_like(tokens, bool))) == pytest.approx(everything)
  half = np.zeros_like(tokens, bool)
  half[:, 32:] = True
  assert trainer.evaluate(corpus.Rows(tokens, half)) != pytest.approx(everything, rel=1e-4)


def test_a_recipe_that_cannot_export_fails_before_training(tmp_path):
  from jaxdec.train.zoo import train_and_export

  cfg = _config(architecture="dream")  # The HF model_type is "Dream".
  with pytest.raises(ValueError, match="would train and then fail to export: cannot export "
                                       "architecture 'dream'"):
    train_and_export(cfg, str(tmp_path / "run"), str(tmp_path / "export"))
  assert not (tmp_path / "run").exists()


def test_weight_decay_spares_norms_and_biases():
  """One AdamW step on zero gradients moves only what decays: the trainer's optimizer shrinks
  matrices and embeddings and leaves norm weights and q/k/v biases where they are (its mask reads
  each param's name through the nnx.Param around it)."""
  from flax import nnx

  from jaxdec.model import init_params
  from jaxdec.train.trainer import TrainedParams, make_optimizer

  config = updated(_config().model, layer=dict(qkv_bias=True))
  params = jax.tree.map(lambda x: x + 1.0, init_params(config, jax.random.key(0)))  # Nonzero biases.
  module = TrainedParams(None, params)
  optimizer = nnx.Optimizer(module, make_optimizer(dataclasses.replace(
      _config(), weight_decay=0.5, warmup_steps=0, steps=2)), wrt=nnx.Param)
  optimizer.update(module, jax.tree.map(jnp.zeros_like, nnx.state(module, nnx.Param)))
  before, after = flatten(params), flatten(module.params())
  moved = {name for name in before if not np.array_equal(before[name], after[name])}
  spared = {n for n in before if n.endswith("norm") or n.split("/")[-1] in ("bq", "bk", "bv")}
  assert spared and moved == set(before) - spared, sorted(moved ^ (set(before) - spared))
