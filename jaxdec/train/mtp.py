"""Training multi-token-prediction heads (Medusa-1: the target frozen) and AdaMTP's
boundary-aware loss; measuring the heads' per-rank accuracy, from which `spec.heads.sparse_tree`
builds the candidate trees.

The part is `MedusaHeads` (a `Trainable` over a frozen target), the objective `MultiToken`:
head k at position t learns token t + k + 1 from the target's final-normed hidden state there,
weighted decay^(k-1) (Medusa's 0.8^k up to a constant).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxdec.decoding import positions
from jaxdec.model import Model, forward
from jaxdec.spec.heads import Heads, head_logits


@dataclasses.dataclass(frozen=True)
class MedusaHeads:
  """`num_heads` heads of `num_layers` residual blocks over a frozen target. The blocks start
  at zero (each block the identity) and each head's unembedding at the target's, so training
  starts from K copies of the target's own next-token prediction."""

  num_heads: int = 4
  num_layers: int = 1

  def init(self, key: jax.Array, target: Model | None) -> dict:
    del key
    self.check(target)
    config = target.config
    head = target.params["embed"].T if config.tie_word_embeddings else target.params["lm_head"]
    k, r, d = self.num_heads, self.num_layers, config.hidden_size
    return {"w": jnp.zeros((k, r, d, d), jnp.float32), "b": jnp.zeros((k, r, d), jnp.float32),
            "unembed": jnp.broadcast_to(head.astype(jnp.float32), (k,) + head.shape)}

  def describe(self) -> dict:
    return {"kind": "MedusaHeads", "num_heads": self.num_heads, "num_layers": self.num_layers}

  def check(self, target: Model | None) -> None:
    for name in ("num_heads", "num_layers"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"MedusaHeads.{name} must be an int >= 1, got {value!r}")
    if not isinstance(target, Model):
      raise ValueError("MedusaHeads train over a frozen target: set TrainConfig.target")
    if not target.config.is_causal:
      raise ValueError(f"MedusaHeads need an autoregressive target, got attention "
                       f"{target.config.attention}")

  def to_drafter(self, params: dict, choices=None) -> Heads:
    return Heads(params, None if choices is None else tuple(map(tuple, choices)))


@struct.dataclass
class EntropyBoundaries:
  """AdaMTP's segmentation, our reading of "a sudden surge in the base model's entropy marks a
  semantic boundary": token j opens a segment when the target's entropy predicting it exceeds
  the running mean of the entropies before it (an EMA with `decay`) by `surge` nats."""

  surge: float = struct.field(pytree_node=False, default=1.0)
  decay: float = struct.field(pytree_node=False, default=0.9)

  def opens(self, logits: jax.Array) -> jax.Array:
    """Target logits f32[B, L, V] (position i predicts token i + 1) -> bool[B, L]: token j opens
    a segment (never token 0)."""
    entropy = -jnp.sum(jax.nn.softmax(logits) * jax.nn.log_softmax(logits), axis=-1)  # [B, L]

    def step(mean, h):
      return self.decay * mean + (1.0 - self.decay) * h, h > mean + self.surge

    _, surged = jax.lax.scan(step, entropy[:, 0], entropy.T)  # surged[i]: entropy at i surged.
    return jnp.concatenate([jnp.zeros_like(surged[:1]), surged[:-1]], axis=0).T

  def within(self, logits: jax.Array, num_heads: int) -> jax.Array:
    """bool[B, L, K]: head k's prediction at t (token t + k + 1) stays inside one segment: none of
    tokens t + 2 .. t + k + 1 opens one. Past the end counts as inside (the label is invalid
    there anyway)."""
    opened = jnp.cumsum(self.opens(logits), axis=1)
    last = opened[:, -1:]
    at = lambda n: jnp.concatenate([opened[:, n:], jnp.broadcast_to(last, (opened.shape[0], n))], 1)
    return jnp.stack([at(k + 2) == at(1) for k in range(num_heads)], axis=-1)


@struct.dataclass
class MultiToken:
  """The MTP loss of `MedusaHeads`: sum over heads of decay^(k-1) x head k's mean cross-entropy
  over the positions whose target token t + k + 1 exists and is scored. With `boundaries`
  (AdaMTP) a prediction is dropped when a token it skips over or predicts (t + 2 .. t + k + 1)
  opens a segment: each token's prediction depth ends at its segment's end. Without them it is
  the plain MTP loss, AdaMTP's ablation."""

  decay: float = struct.field(pytree_node=False, default=0.8)
  boundaries: EntropyBoundaries | None = struct.field(pytree_node=False, default=None)

  def loss(self, params, tokens, key, *, part, target=None, scored=None):
    del key
    logits, labels, valid = self._predictions(params, tokens, target, scored)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)  # [B, L, K]
    count = jnp.maximum(jnp.sum(valid, axis=(0, 1)), 1).astype(jnp.float32)
    per_head = jnp.sum(jnp.where(valid, ce, 0.0), axis=(0, 1)) / count
    right = jnp.sum(valid & (jnp.argmax(logits, -1) == labels), axis=(0, 1)).astype(jnp.float32) / count
    weights = self.decay ** jnp.arange(per_head.shape[0], dtype=jnp.float32)
    metrics = {f"head{k + 1}_nll": per_head[k] for k in range(per_head.shape[0])}
    metrics.update({f"head{k + 1}_acc": right[k] for k in range(per_head.shape[0])})
    metrics["kept_frac"] = jnp.mean(valid.astype(jnp.float32))
    return jnp.sum(weights * per_head), metrics

  def _predictions(self, params, tokens, target: Model, scored):
    """(heads' logits f32[B, L, K, V], labels i32[B, L, K], valid bool[B, L, K])."""
    config = target.config
    logits, hidden, _ = forward(target.params, tokens, positions(*tokens.shape), config=config,
                                hidden_layers=(config.num_layers,))
    heads = head_logits(params, jax.lax.stop_gradient(hidden[0]))
    num_heads = heads.shape[2]
    scored = jnp.ones(tokens.shape, bool) if scored is None else scored
    shift = lambda x, n, fill: jnp.pad(x[:, n:], ((0, 0), (0, n)), constant_values=fill)
    labels = jnp.stack([shift(tokens, k + 2, 0) for k in range(num_heads)], axis=-1)
    valid = jnp.stack([shift(scored, k + 2, False) for k in range(num_heads)], axis=-1)
    if self.boundaries is not None:
      valid &= self.boundaries.within(jax.lax.stop_gradient(logits), num_heads)
    return heads, labels, valid


def head_accuracy(heads_params: dict, target: Model, windows, ranks: int = 8) -> np.ndarray:
  """f64[K, ranks]: how often head k's rank-r token is the right one, over the scored positions
  of `windows` (i32[N, L], or `corpus.Rows` with a `scored` mask). `spec.heads.sparse_tree`'s
  input."""
  tokens = np.asarray(getattr(windows, "tokens", windows))
  scored = getattr(windows, "scored", None)
  run = jax.jit(lambda t, s: MultiToken()._predictions(heads_params, t, target, s))
  counts = np.zeros((heads_params["w"].shape[0], ranks))
  total = np.zeros(heads_params["w"].shape[0])
  for i in range(len(tokens)):
    s = None if scored is None else jnp.asarray(scored[i: i + 1])
    logits, labels, valid = run(jnp.asarray(tokens[i: i + 1]), s)
    rank = np.asarray(jnp.sum(logits > jnp.take_along_axis(logits, labels[..., None], -1), -1))
    valid = np.asarray(valid)
    for r in range(ranks):
      counts[:, r] += np.sum(valid & (rank == r), axis=(0, 1))
    total += np.sum(valid, axis=(0, 1))
  return counts / np.maximum(total, 1)[:, None]
