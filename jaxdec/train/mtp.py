"""Training multi-token-prediction heads (Medusa-1: the target frozen) and AdaMTP's
boundary-aware loss; measuring the heads' per-rank accuracy, from which `spec.heads.sparse_tree`
builds the candidate trees.

The part is `MedusaHeads` (a `Trainable` over a frozen target), the objective `MultiToken`:
head k at position t learns token t + k + 1 from the target's final-normed hidden state there,
weighted decay^(k-1) (Medusa's 0.8^k up to a constant).
"""

from __future__ import annotations

import dataclasses
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxdec.decoding import positions
from jaxdec.model import Model, forward
from jaxdec.convert import export_hf
from jaxdec.convert.medusa import write_medusa
from jaxdec.spec.entmtp import bucket_of
from jaxdec.spec.heads import (Heads, HeadsParams, chain, expected_accepted, head_logits,
                               sparse_tree)


@dataclasses.dataclass(frozen=True)
class MedusaHeads:
  """`num_heads` heads of `num_layers` residual blocks over a frozen target (Medusa-1). The
  blocks start at zero (each block the identity) and each head's unembedding at the target's,
  so training starts from K copies of the target's own next-token prediction. With `joint`
  the backbone trains too, from the target's weights (Medusa-2 / MTP training: its own
  next-token loss plus the heads'): params are then {"heads": ..., "backbone": ...}, and the
  export writes the new backbone beside the heads."""

  num_heads: int = 4
  num_layers: int = 1
  sequential: bool = False  # Each head also reads the token before its target (`spec.heads`).
  joint: bool = False  # The backbone trains with the heads.
  tree_size: int = 16  # Nodes of the candidate tree exported with the heads (`export`).
  ranks: int = 8  # Ranks per head measured for the tree.
  entropy_buckets: int = 3  # EntMTP's profile, exported too: running-entropy buckets, its decay.
  entropy_decay: float = 0.8

  def init(self, key: jax.Array, target: Model | None) -> HeadsParams | dict:
    del key
    self.check(target)
    config = target.config
    head = target.params.embed.T if config.embeddings.tied else target.params.lm_head
    k, r, d = self.num_heads, self.num_layers, config.hidden_size
    params = HeadsParams(w=jnp.zeros((k, r, d, d), jnp.float32),
                         b=jnp.zeros((k, r, d), jnp.float32),
                         unembed=jnp.broadcast_to(head.astype(jnp.float32), (k,) + head.shape))
    if self.sequential:  # The target's input embedding; mixing starts at zero (Medusa's heads).
      params = params.replace(mix=jnp.zeros((k, d, d), jnp.float32),
                              embed=target.params.embed.astype(jnp.float32))
    if self.joint:
      return {"heads": params,
              "backbone": jax.tree.map(lambda x: x.astype(jnp.float32), target.params)}
    return params

  def describe(self) -> dict:
    return {"kind": "MedusaHeads", "num_heads": self.num_heads, "num_layers": self.num_layers,
            "sequential": self.sequential, "joint": self.joint}

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
    heads = params["heads"] if self.joint else params
    return Heads(heads, None if choices is None else tuple(map(tuple, choices)))

  def export(self, params: dict, target: Model, windows, out_dir: str | None, *,
             dtype: str = "float16", extra: dict | None = None, tokenizer=None) -> dict:
    """Measure the heads' per-rank accuracy on `windows` (a validation split), build the best
    `tree_size`-node tree from it and, with `out_dir`, write the heads there in Medusa's layout
    with that tree. Returns the evaluation (accuracy table, tree, expected tokens per step).
    Jointly trained heads are measured on their own backbone, written as an HF model in
    `out_dir/backbone`, whose next-token loss on `windows` is reported beside the target's.
    Heads use their target's tokenizer: `tokenizer` is not written."""
    evals = {}
    if self.joint:
      backbone = target.replace(params=params["backbone"])
      evals = {"target_nll": next_token_nll(target, windows),
               "backbone_nll": next_token_nll(backbone, windows)}
      if out_dir:
        export_hf(backbone.replace(params=jax.tree.map(lambda x: x.astype(dtype), backbone.params)),
                  None, os.path.join(out_dir, "backbone"))
      params, target = params["heads"], backbone
    accuracy = head_accuracy(params, target, windows, ranks=self.ranks)
    choices = sparse_tree(accuracy, self.tree_size)
    thresholds, by_bucket = entropy_profile(params, target, windows, self.entropy_buckets,
                                            self.ranks, self.entropy_decay)
    entropy = {"thresholds": thresholds, "accuracy": by_bucket, "decay": self.entropy_decay}
    evals |= {"head_accuracy": accuracy.round(4).tolist(), "choices": [list(p) for p in choices],
             "expected_tau": round(1.0 + expected_accepted(accuracy, choices), 3),
             "expected_tau_chain": round(1.0 + expected_accepted(accuracy, chain(self.num_heads)), 3),
             "entropy_thresholds": thresholds.round(4).tolist(),
             "expected_tau_by_entropy_bucket": [
                 round(1.0 + expected_accepted(a, sparse_tree(a, self.tree_size)), 3) for a in by_bucket]}
    if out_dir:
      write_medusa(params, out_dir, choices=choices, accuracy=accuracy, entropy=entropy,
                   extra=extra, dtype=dtype)
    return evals


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
  ntp_weight: float = struct.field(pytree_node=False, default=1.0)  # Joint: the backbone's own loss.

  def loss(self, params, tokens, key, *, part, target=None, scored=None, step=None):
    del key, part
    joint = isinstance(params, dict)
    model = target.replace(params=params["backbone"]) if joint else target
    heads = params["heads"] if joint else params
    logits, labels, valid, model_logits = self._predictions(heads, tokens, model, scored,
                                                            backbone_grad=joint)
    ce = optax.softmax_cross_entropy_with_integer_labels(logits, labels)  # [B, L, K]
    count = jnp.maximum(jnp.sum(valid, axis=(0, 1)), 1).astype(jnp.float32)
    per_head = jnp.sum(jnp.where(valid, ce, 0.0), axis=(0, 1)) / count
    right = jnp.sum(valid & (jnp.argmax(logits, -1) == labels), axis=(0, 1)).astype(jnp.float32) / count
    weights = self.decay ** jnp.arange(per_head.shape[0], dtype=jnp.float32)
    metrics = {f"head{k + 1}_nll": per_head[k] for k in range(per_head.shape[0])}
    metrics.update({f"head{k + 1}_acc": right[k] for k in range(per_head.shape[0])})
    metrics["kept_frac"] = jnp.mean(valid.astype(jnp.float32))
    loss = jnp.sum(weights * per_head)
    if joint:
      ntp = _next_token_nll(model_logits, tokens, scored)
      metrics["backbone_nll"] = ntp
      loss = loss + self.ntp_weight * ntp
    return loss, metrics

  def _predictions(self, params, tokens, target: Model, scored, backbone_grad: bool = False):
    """(heads' logits f32[B, L, K, V], labels i32[B, L, K], valid bool[B, L, K], the backbone's
    logits f32[B, L, V]). The heads' gradient reaches the backbone only with `backbone_grad`."""
    config = target.config
    logits, hidden, _ = forward(target.params, tokens, positions(*tokens.shape), config=config,
                                hidden_layers=(config.num_layers,))
    num_heads = params.w.shape[0]
    shift = lambda x, n, fill: jnp.pad(x[:, n:], ((0, 0), (0, n)), constant_values=fill)
    previous = jnp.stack([shift(tokens, k + 1, 0) for k in range(num_heads)], axis=-1)
    hidden = hidden[0] if backbone_grad else jax.lax.stop_gradient(hidden[0])
    heads = head_logits(params, hidden, previous)
    scored = jnp.ones(tokens.shape, bool) if scored is None else scored
    labels = jnp.stack([shift(tokens, k + 2, 0) for k in range(num_heads)], axis=-1)
    valid = jnp.stack([shift(scored, k + 2, False) for k in range(num_heads)], axis=-1)
    if self.boundaries is not None:
      valid &= self.boundaries.within(jax.lax.stop_gradient(logits), num_heads)
    return heads, labels, valid, logits


def _next_token_nll(logits: jax.Array, tokens: jax.Array, scored) -> jax.Array:
  """Mean next-token cross-entropy over the scored targets (all when `scored` is None)."""
  ce = optax.softmax_cross_entropy_with_integer_labels(logits[:, :-1], tokens[:, 1:])
  keep = jnp.ones(ce.shape, bool) if scored is None else scored[:, 1:]
  return jnp.sum(jnp.where(keep, ce, 0.0)) / jnp.maximum(jnp.sum(keep), 1).astype(jnp.float32)


def next_token_nll(model: Model, windows) -> float:
  """A model's mean next-token loss (nats) over the scored tokens of `windows`."""
  tokens = np.asarray(getattr(windows, "tokens", windows))
  scored = getattr(windows, "scored", None)
  run = jax.jit(lambda t, s: _next_token_nll(forward(model.params, t, positions(*t.shape),
                                                     config=model.config)[0], t, s))
  losses = [float(run(jnp.asarray(tokens[i: i + 1]),
                      None if scored is None else jnp.asarray(scored[i: i + 1])))
            for i in range(len(tokens))]
  return float(np.mean(losses))


def head_accuracy(heads_params: HeadsParams, target: Model, windows, ranks: int = 8) -> np.ndarray:
  """f64[K, ranks]: how often head k's rank-r token is the right one, over the scored positions
  of `windows` (i32[N, L], or `corpus.Rows` with a `scored` mask). `spec.heads.sparse_tree`'s
  input."""
  rank, valid, _ = _head_ranks(heads_params, target, windows)
  return _table(rank, valid, ranks)


def entropy_profile(heads_params: HeadsParams, target: Model, windows, buckets: int = 3,
                    ranks: int = 8, decay: float = 0.8) -> tuple[np.ndarray, np.ndarray]:
  """EntMTP's offline profile: (thresholds f64[buckets - 1], accuracy f64[buckets, K, ranks]).
  The running entropy at a prediction from position t is the EMA (`decay`) of the target's
  entropies at positions 0..t, as `spec.entmtp.EntropyTrees` keeps it while decoding (every
  committed token's); the thresholds are its quantiles over the scored positions (equal-count
  buckets), and each bucket gets its own per-rank accuracy table."""
  rank, valid, entropy = _head_ranks(heads_params, target, windows, decay)
  scored = valid[:, 0]
  thresholds = np.quantile(entropy[scored], np.arange(1, buckets) / buckets)
  bucket = bucket_of(entropy, thresholds)
  return thresholds, np.stack([_table(rank, valid & (bucket == b)[:, None], ranks)
                               for b in range(buckets)])


def _table(rank: np.ndarray, valid: np.ndarray, ranks: int) -> np.ndarray:
  counts = np.stack([np.sum(valid & (rank == r), axis=0) for r in range(ranks)], axis=1)
  return counts / np.maximum(np.sum(valid, axis=0), 1)[:, None]


def _head_ranks(heads_params: HeadsParams, target: Model, windows, decay: float = 0.8):
  """Every scored position of `windows`: (the rank of the right token under each head i32[N, K],
  whether that prediction counts bool[N, K], the running entropy of the target there f32[N])."""
  tokens = np.asarray(getattr(windows, "tokens", windows))
  scored = getattr(windows, "scored", None)

  @jax.jit
  def run(t, s):
    logits, labels, valid, target_logits = MultiToken()._predictions(heads_params, t, target, s)
    rank = jnp.sum(logits > jnp.take_along_axis(logits, labels[..., None], -1), -1)
    h = -jnp.sum(jax.nn.softmax(target_logits) * jax.nn.log_softmax(target_logits), -1)[0]
    step = lambda m, x: (decay * m + (1.0 - decay) * x,) * 2
    _, running = jax.lax.scan(step, jnp.zeros((), jnp.float32), h)
    return rank[0], valid[0], running

  out = [run(jnp.asarray(tokens[i: i + 1]), None if scored is None else jnp.asarray(scored[i: i + 1]))
         for i in range(len(tokens))]
  rank, valid, entropy = (np.concatenate([np.asarray(o[j]) for o in out]) for j in range(3))
  return rank, valid, entropy
