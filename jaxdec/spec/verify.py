"""Verifiers: given the drafts and the target's logits over [root, drafts], decide how many drafts
to accept (a root-to-node path of the draft tree) and the next token.

All verifiers implement `Verifier`: one call signature, and a `check(tree, sampling)` the API
runs on the host, so a bad combination fails when the call is made, not at trace time. They are
pytrees: their hyper-parameters (top-k, top-p, mixture weight, overshoot cap) are traced arrays,
so sweeping them does not recompile.

`Greedy` and `Exact` are lossless: greedy output equals greedy AR decoding token for token, and
`Exact` output equals AR sampling in distribution. `Truncation` and `Collaborative` are lossy:
opt-in rules from "Revisiting Lossy Verification in Speculative Decoding" that trade fidelity to
the target distribution for longer acceptances.
"""

from __future__ import annotations

import abc
from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec.plugins import register_cli
from jaxdec.sampling import Sampling, token_keys, warp_logits
from jaxdec.spec.tree import DynamicTree, Topology, Tree

# Tags that separate the random draws made for one (row, position); sibling s uses _ACCEPT + 8 s.
DRAFT_TAG, _ACCEPT, _RESIDUAL = 1, 2, 3


@struct.dataclass
class Draft:
  """Draft nodes 1..N of a tree: tokens i32[B, N], valid bool[B, N] (padding is never accepted),
  probs f32[B, N, V] = the drafter's distribution each token was drawn from, or None for
  deterministic drafters (then q is one-hot at the token); parents i32[B, N] = each row's tree
  (node i + 1's parent: 0, the root, or an earlier node 1..i) from a drafter whose tree is a
  `DynamicTree`, None from one with a static `Tree`."""

  tokens: jax.Array
  valid: jax.Array
  probs: jax.Array | None = None
  parents: jax.Array | None = None


@struct.dataclass
class Verdict:
  """num_accepted i32[B]; path i32[B, max_depth] (accepted nodes, by depth); next_token i32[B]."""

  num_accepted: jax.Array
  path: jax.Array
  next_token: jax.Array


@struct.dataclass
class VerifyInputs:
  """What a verifier decides from: the draft; the target's logits f32[B, N + 1, V] over [root,
  drafts] (after the controls' rules); this step's per-row `Topology` (the static tree's,
  broadcast, or the drafter's own); sampling (None = greedy) and its key; rows i32[B]; base
  i32[B]: the position of the root (the last committed token), which keys the random draws."""

  draft: Draft
  logits: jax.Array
  tree: Topology
  sampling: Sampling | None
  key: jax.Array | None
  rows: jax.Array
  base: jax.Array


class Verifier(Protocol):
  """Decides, from the drafts and the target's logits f32[B, N + 1, V] over [root, drafts], how
  many drafts to accept and the next token."""

  def check(self, tree: Tree | DynamicTree, sampling: Sampling | None) -> None:
    """Raise ValueError if this verifier cannot verify the drafter's `tree` under `sampling`
    (None = greedy)."""

  @abc.abstractmethod
  def __call__(self, inputs: VerifyInputs) -> Verdict:
    """The verdict on `inputs.draft` (see `VerifyInputs`)."""


def _in_range(name: str, value, low: float, high: float) -> None:
  array = np.asarray(value, np.float64)
  if not np.isfinite(array).all() or (array < low).any() or (array > high).any():
    raise ValueError(f"{name} must be in [{low}, {high}], got {array.tolist()}")


def target_probs(logits: jax.Array, sampling: Sampling | None) -> jax.Array:
  """logits f32[B, W, V] -> the distribution the target samples from: the warped softmax, or
  one-hot argmax for greedy rows (temperature 0, or sampling=None)."""
  greedy = jax.nn.one_hot(jnp.argmax(logits, -1), logits.shape[-1], dtype=jnp.float32)
  if sampling is None:
    return greedy
  batch, width, vocab = logits.shape
  per_position = jax.tree.map(lambda x: jnp.repeat(x, width), sampling)
  warped = warp_logits(logits.reshape(-1, vocab), per_position).reshape(logits.shape)
  return jnp.where((sampling.temperature > 0)[:, None, None], jax.nn.softmax(warped, -1), greedy)


def _keys(key, rows, positions, tag):
  """Keys for (row, position, tag); positions i32[B, ...]."""
  base = token_keys(key, jnp.broadcast_to(rows.reshape((-1,) + (1,) * (positions.ndim - 1)),
                                          positions.shape), positions)
  return jax.vmap(lambda k: jax.random.fold_in(k, tag))(base.reshape(-1)).reshape(positions.shape)


def _uniform(key, rows, positions, tag):
  if key is None:  # Greedy decoding: no randomness; one-hot targets make u = 0 exact.
    return jnp.zeros(positions.shape, jnp.float32)
  keys = _keys(key, rows, positions, tag)
  return jax.vmap(jax.random.uniform)(keys.reshape(-1)).reshape(positions.shape)


def _categorical(key, rows, positions, weights):
  """One draw per row from unnormalised weights f32[B, V] (zero rows fall back to argmax; without
  a key, greedy decoding, the argmax)."""
  if key is None:
    return jnp.argmax(weights, -1).astype(jnp.int32)
  keys = _keys(key, rows, positions, _RESIDUAL)
  logits = jnp.where(weights > 0, jnp.log(jnp.maximum(weights, 1e-38)), -jnp.inf)
  drawn = jax.vmap(jax.random.categorical)(keys, logits).astype(jnp.int32)
  return jnp.where(jnp.sum(weights, -1) > 0, drawn, jnp.argmax(weights, -1).astype(jnp.int32))


def _at(values: jax.Array, index: jax.Array) -> jax.Array:
  """values[b, index[b, ...]] for values [B, M, ...] and index i32[B, ...]: per-row node lookup."""
  return jax.vmap(lambda v, i: v[i])(values, index)


def _deepest(ok: jax.Array, tree: Topology, next_from) -> Verdict:
  """Accept the deepest node whose whole path is ok (ties: lowest index). ok bool[B, N]."""
  ancestors = tree.ancestor_mask[:, 1:, 1:]  # [B, N, N] over draft nodes.
  path_ok = ~jnp.any(ancestors & ~ok[:, None, :], axis=-1)
  score = jnp.where(path_ok, tree.depths[:, 1:], 0)
  best = jnp.where(jnp.any(path_ok, -1), jnp.argmax(score, -1) + 1, 0).astype(jnp.int32)
  return Verdict(num_accepted=_at(tree.depths, best), path=_at(tree.paths, best),
                 next_token=next_from(best))


def _parent_values(values: jax.Array, tree: Topology) -> jax.Array:
  """values[B, N + 1, ...] at each draft node's parent -> [B, N, ...]."""
  return _at(values, tree.parents)


@register_cli("verifier", "greedy", order=10, help="lossless, greedy decoding only")
@struct.dataclass
class Greedy:
  """Accept a draft iff it is the target's argmax after its parent; next = argmax at the end.
  Greedy decoding only: with sampling settings it would emit argmax tokens the user did not ask
  for, so `check` refuses them (use `Exact()`)."""

  def check(self, tree: Tree | DynamicTree, sampling) -> None:
    if sampling is not None:
      raise ValueError("Greedy() verification decodes greedily but sampling settings were given; "
                       "use Exact() (lossless in distribution) or drop sampling=")

  def __call__(self, inputs: VerifyInputs) -> Verdict:
    draft, logits, tree = inputs.draft, inputs.logits, inputs.tree
    best_tokens = jnp.argmax(logits, -1).astype(jnp.int32)  # [B, N + 1]
    ok = draft.valid & (draft.tokens == _parent_values(best_tokens, tree))
    return _deepest(ok, tree, lambda best: jnp.take_along_axis(best_tokens, best[:, None], 1)[:, 0])


@register_cli("verifier", "exact", order=20, help="lossless in distribution")
@struct.dataclass
class Exact:
  """Speculative sampling, lossless in distribution.

  Chains with drafter probabilities q: accept d with probability min(1, p(d) / q(d)); at the
  first rejection sample from max(p - q, 0); after a full acceptance sample the bonus from p.
  Deterministic drafts (q one-hot; chains or trees): at each depth try the children in order,
  accepting child c with probability r(c) / sum(r) where r starts as p and each rejected
  sibling is zeroed; with no child accepted, sample from r.
  """

  def check(self, tree: Tree | DynamicTree, sampling) -> None:
    pass

  def __call__(self, inputs: VerifyInputs) -> Verdict:
    draft, tree, key, rows, base = (inputs.draft, inputs.tree, inputs.key, inputs.rows,
                                    inputs.base)
    p = target_probs(inputs.logits, inputs.sampling)  # [B, N + 1, V]
    if draft.probs is None:
      return _sibling_rule(draft, p, tree, key, rows, base)
    if not tree.is_chain:
      raise ValueError("Exact verification with drafter probabilities needs a chain topology")
    return _chain_rule(draft, p, draft.probs, key, rows, base)


def _chain_rule(draft: Draft, p, q, key, rows, base) -> Verdict:
  """Leviathan / Chen speculative sampling on a chain; p f32[B, K + 1, V], q f32[B, K, V]."""
  k = draft.tokens.shape[1]
  tok = draft.tokens[..., None]
  p_tok = jnp.take_along_axis(p[:, :k], tok, -1)[..., 0]
  q_tok = jnp.take_along_axis(q, tok, -1)[..., 0]
  depth = jnp.arange(1, k + 1, dtype=jnp.int32)[None, :]
  u = _uniform(key, rows, base[:, None] + depth, _ACCEPT)
  accept = draft.valid & (u * q_tok < p_tok)
  num = jnp.sum(jnp.cumprod(accept.astype(jnp.int32), axis=1), axis=1).astype(jnp.int32)
  p_at = jnp.take_along_axis(p, num[:, None, None], 1)[:, 0]
  q_pad = jnp.concatenate([q, jnp.zeros_like(q[:, :1])], axis=1)  # After a full acceptance: p.
  q_at = jnp.take_along_axis(q_pad, num[:, None, None], 1)[:, 0]
  y = _categorical(key, rows, base + num + 1, jnp.maximum(p_at - q_at, 0.0))
  path = jnp.broadcast_to(jnp.arange(1, k + 1, dtype=jnp.int32), draft.tokens.shape)
  return Verdict(num_accepted=num, path=path, next_token=y)


def _sibling_rule(draft: Draft, p, tree: Topology, key, rows, base) -> Verdict:
  """Exact verification of deterministic drafts on any tree (EAGLE's sampling rule)."""
  batch = p.shape[0]
  node = jnp.zeros((batch,), jnp.int32)
  residual = p[:, 0]
  going = jnp.ones((batch,), bool)
  path = jnp.zeros((batch, max(tree.max_depth, 1)), jnp.int32)
  for depth in range(1, tree.max_depth + 1):
    accepted = jnp.full((batch,), -1, jnp.int32)
    kids = _at(tree.children, node)  # [B, max_children]
    for slot in range(kids.shape[1]):
      child = kids[:, slot]
      index = jnp.maximum(child - 1, 0)
      token = jnp.take_along_axis(draft.tokens, index[:, None], 1)[:, 0]
      valid = jnp.take_along_axis(draft.valid, index[:, None], 1)[:, 0]
      live = going & (accepted < 0) & (child >= 0) & valid
      mass = jnp.take_along_axis(residual, token[:, None], 1)[:, 0]
      total = jnp.sum(residual, -1)
      u = _uniform(key, rows, base + depth, _ACCEPT + 8 * slot)  # Slot 0 = the chain rule's draw.
      take = live & (u * total < mass)
      accepted = jnp.where(take, child, accepted)
      rejected = live & ~take
      residual = jnp.where(rejected[:, None] & (jnp.arange(p.shape[-1])[None, :] == token[:, None]),
                           0.0, residual)
    moved = accepted >= 0
    node = jnp.where(moved, accepted, node)
    residual = jnp.where(moved[:, None], jnp.take_along_axis(p, node[:, None, None], 1)[:, 0], residual)
    path = path.at[:, depth - 1].set(jnp.where(moved, node, 0))
    going = going & moved
  num = _at(tree.depths, node)
  y = _categorical(key, rows, base + num + 1, residual)
  return Verdict(num_accepted=num, path=path, next_token=y)


@register_cli("verifier", "truncation", order=30,
              help="lossy, its default settings: accepts more drafts")
@struct.dataclass
class Truncation:
  """Lossy: accept a draft iff it lies in the target's truncated support after its parent (its
  top-k, then top-p set; 0 / 1 turn a filter off); the next token is sampled from the target's
  own (warped) distribution at the end of the accepted path. Changes the output distribution."""

  top_k: jax.Array = struct.field(default_factory=lambda: jnp.asarray(0, jnp.int32))
  top_p: jax.Array = struct.field(default_factory=lambda: jnp.asarray(1.0, jnp.float32))

  def check(self, tree: Tree | DynamicTree, sampling) -> None:
    _in_range("Truncation.top_k", self.top_k, 0, np.inf)
    _in_range("Truncation.top_p", self.top_p, 1e-30, 1.0)

  def __call__(self, inputs: VerifyInputs) -> Verdict:
    draft, logits, tree, key, rows, base = (inputs.draft, inputs.logits, inputs.tree, inputs.key,
                                            inputs.rows, inputs.base)
    batch, width, vocab = logits.shape
    support = Sampling(temperature=jnp.ones((batch * width,), jnp.float32),
                       top_k=jnp.broadcast_to(self.top_k, (batch * width,)).astype(jnp.int32),
                       top_p=jnp.broadcast_to(self.top_p, (batch * width,)).astype(jnp.float32))
    allowed = jnp.isfinite(warp_logits(logits.reshape(-1, vocab), support)).reshape(logits.shape)
    allowed_at_parent = _parent_values(allowed, tree)  # [B, N, V]
    ok = draft.valid & jnp.take_along_axis(allowed_at_parent, draft.tokens[..., None], -1)[..., 0]
    p = target_probs(logits, inputs.sampling)

    def next_from(best):
      at = jnp.take_along_axis(p, best[:, None, None], 1)[:, 0]
      num = _at(tree.depths, best)
      return _categorical(key, rows, base + num + 1, at)

    return _deepest(ok, tree, next_from)


@register_cli("verifier", "collaborative", order=40,
              help="lossy, its default settings: accepts more drafts")
@struct.dataclass
class Collaborative:
  """Lossy: speculative sampling against the mixture m = (1 - weight) p + weight q, capped at
  `max_overshoot` * p (overshoot control: no token may get more than that multiple of its target
  probability) and renormalised. weight = 0 is `Exact`; a larger weight accepts more drafts.
  Chains only; deterministic drafts use a one-hot q."""

  weight: jax.Array = struct.field(default_factory=lambda: jnp.asarray(0.5, jnp.float32))
  max_overshoot: jax.Array = struct.field(default_factory=lambda: jnp.asarray(2.0, jnp.float32))

  def check(self, tree: Tree | DynamicTree, sampling) -> None:
    if not tree.is_chain:
      raise ValueError(f"Collaborative verification needs a chain drafter, got a tree of "
                       f"{tree.size} nodes")
    _in_range("Collaborative.weight", self.weight, 0.0, 1.0)
    _in_range("Collaborative.max_overshoot", self.max_overshoot, 1.0, np.inf)

  def __call__(self, inputs: VerifyInputs) -> Verdict:
    draft = inputs.draft
    p = target_probs(inputs.logits, inputs.sampling)
    q = draft.probs
    if q is None:
      q = jax.nn.one_hot(draft.tokens, p.shape[-1], dtype=jnp.float32)
    q_full = jnp.concatenate([q, p[:, -1:]], axis=1)  # The bonus position keeps p.
    mixed = jnp.minimum((1.0 - self.weight) * p + self.weight * q_full, self.max_overshoot * p)
    mixed = mixed / jnp.maximum(jnp.sum(mixed, -1, keepdims=True), 1e-30)
    return _chain_rule(draft, mixed, q, inputs.key, inputs.rows, inputs.base)
