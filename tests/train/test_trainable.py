"""A user's own trainable part through the same Trainer: a head over a frozen target."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
import orbax.checkpoint as ocp
import pytest
from flax import struct

from jaxdec.model import Model, ModelConfig, forward, init_params
from jaxdec.train.trainable import Trainable
from jaxdec.train.trainer import TrainConfig, Trainer, _frozen

VOCAB = 512  # The conftest tokenizer's vocabulary.


@dataclasses.dataclass(frozen=True)
class SkipHead:
  """Predicts token t + 2 from the target's final hidden state at t: logits = h @ w + b."""

  hidden_size: int
  vocab_size: int

  def init(self, key, target):
    del target
    return {"w": 0.02 * jax.random.normal(key, (self.hidden_size, self.vocab_size)),
            "b": jnp.zeros((self.vocab_size,))}

  def describe(self):
    return {"kind": "SkipHead", "hidden_size": self.hidden_size, "vocab_size": self.vocab_size}

  def check(self, target):
    if target is None or target.config.hidden_size != self.hidden_size:
      raise ValueError(f"SkipHead needs a target with hidden size {self.hidden_size}")


@struct.dataclass
class SkipLoss:
  """Cross-entropy of the head's prediction of token t + 2."""

  def loss(self, params, tokens, key, *, part, target, scored=None, step=None):
    del key, part, scored
    config = target.config
    positions = jnp.broadcast_to(jnp.arange(tokens.shape[1], dtype=jnp.int32), tokens.shape)
    _, hidden, _ = forward(target.params, tokens, positions, config=config,
                           hidden_layers=(config.num_layers,))
    logits = hidden[0][:, :-2] @ params["w"] + params["b"][None, None, :]
    nll = jnp.mean(optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 2:]))
    return nll, {"nll": nll}


@pytest.fixture(scope="module")
def target():
  config = ModelConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_layers=2,
                       num_heads=2, num_kv_heads=1, head_dim=16, max_position_embeddings=64)
  return Model(config, init_params(config, jax.random.key(7), std=0.2))


def _config(steps=48):
  return TrainConfig(name="skip-head", part=SkipHead(32, VOCAB), objective=SkipLoss(), steps=steps,
                     batch_size=8, seq_len=32, learning_rate=3e-2, warmup_steps=4,
                     checkpoint_every=5, eval_every=1000)


def test_a_head_trains_over_a_frozen_target(tmp_path, stream, target):
  assert isinstance(SkipHead(32, VOCAB), Trainable)
  before = jax.tree.map(np.array, target.params)
  trainer = Trainer(_config(), str(tmp_path), target=target)
  records = trainer.run(stream, progress=False)
  first, last = records[0]["loss"], np.mean([r["loss"] for r in records[-5:]])
  assert last < first - 0.5, (first, last)  # ln 512 = 6.24 -> about the unigram entropy.
  for a, b in zip(jax.tree.leaves(before), jax.tree.leaves(target.params)):
    np.testing.assert_array_equal(a, b)  # Bit for bit.
  trainer.close()
  # The checkpoint holds the head's params (and their optimizer state), no target weights.
  manager = ocp.CheckpointManager(str(tmp_path / "checkpoints"),
                                  item_handlers={"state": ocp.StandardCheckpointHandler()})
  stored = manager.item_metadata(manager.latest_step())["state"]
  assert set(stored["model"]["weights"]) == {"w", "b"}
  sizes = sum(int(np.prod(leaf.shape)) for leaf in jax.tree.leaves(stored))
  assert sizes < 3 * (32 + 1) * VOCAB + 10


def test_no_gradient_reaches_the_target(stream, target):
  part, objective = SkipHead(32, VOCAB), SkipLoss()
  params = part.init(jax.random.key(0), target)
  tokens = jnp.asarray(stream[:8 * 32].reshape(8, 32))
  loss = lambda p: objective.loss(params, tokens, None, part=part,
                                  target=_frozen(Model(target.config, p)))[0]
  grads = jax.grad(loss)(target.params)
  assert all(not np.any(np.asarray(g)) for g in jax.tree.leaves(grads))


def test_a_head_run_resumes_exactly_and_checks_its_target(tmp_path, stream, target):
  cfg = _config(steps=6)
  straight = Trainer(cfg, str(tmp_path / "a"), target=target)
  losses_a = [r["loss"] for r in straight.run(stream, progress=False)]
  interrupted = Trainer(cfg, str(tmp_path / "b"), target=target)
  losses_b = [r["loss"] for r in interrupted.run(stream, stop_at=3, progress=False)]
  interrupted.close()
  resumed = Trainer(cfg, str(tmp_path / "b"), target=target)
  assert resumed.step == 3
  losses_b += [r["loss"] for r in resumed.run(stream, progress=False)]
  assert losses_a == losses_b
  with pytest.raises(ValueError, match="needs a target with hidden size 32"):
    Trainer(cfg, str(tmp_path / "c"))
  other = Model(dataclasses.replace(target.config, num_layers=1),
                jax.tree.map(lambda x: x, target.params))
  other = other.replace(params=init_params(other.config, jax.random.key(1)))
  with pytest.raises(ValueError, match="holds another model's run"):
    Trainer(cfg, str(tmp_path / "b"), target=other)  # Same head, another target.


def test_full_model_from_a_qwen2_export_drops_its_zero_biases(tmp_path, target):
  """A bias-free model exported as Qwen2 (whose files always hold q/k/v biases) gets zero ones;
  training it from that directory drops them again: the same Params as the model's."""
  from jaxdec.convert import export_hf
  from jaxdec.train.trainable import FullModel

  config = dataclasses.replace(target.config, architecture="qwen2")
  export_hf(Model(config, target.params), None, str(tmp_path / "qwen2"))
  params = FullModel(config, init_from=str(tmp_path / "qwen2")).init(jax.random.key(0), None)
  assert params.layers.bq is None
  assert jax.tree.structure(params) == jax.tree.structure(target.params)
  for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(target.params)):
    np.testing.assert_array_equal(a, b)
