"""The drafter protocol: what a drafter provides and what the speculative loop hands it.

A drafter is a pytree (a draft model's weights are leaves; sizes are static fields). Each step
the loop calls `propose(state, ctx)` for the drafts, runs the target over them, verifies, and
calls `update(state, feedback)` with what was accepted. Its state rides in the loop carry, so a
drafter may keep a KV cache, features, statistics, whatever fits in static shapes.

Subclass `Drafter` to inherit the defaults (no state, no hidden states, no feedback, one tree;
`propose` is the one method without a default); any object with the same members works too
(checked by name when the API is called).

A drafter that switches topology from step to step (EntMTP) declares it by subclassing
`Switching`: `variants()` lists drafters that share its state, each with its own static tree, and
`pick(state)` says which runs this step; the loop compiles one step per branch and selects with
`lax.switch`, so every branch keeps static shapes.
A drafter whose tree differs per row and step (EAGLE-2) declares a `DynamicTree` (static bounds)
and returns each row's parents in `Draft.parents`.
"""

from __future__ import annotations

import abc
from typing import Any, Protocol

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.model import KVCache, ModelConfig
from jaxdec.sampling import Sampling
from jaxdec.spec.tree import DynamicTree, Tree
from jaxdec.spec.verify import Draft, Verdict


@struct.dataclass
class Context:
  """What a drafter may read before proposing.

  seq i32[B, S]: committed tokens (prompt + generated) in slots [0, total); total i32[B];
  hidden [len(layers), B, S, D] or None: the target's hidden states at the layers the drafter
  named in `hidden_layers` (HF `hidden_states` convention: i < num_layers the residual stream
  entering layer i, num_layers the final-normed state), at positions < total - 1;
  cache: the target's KV cache (read only), holding the first total - 1 tokens;
  sampling, key: the decoding settings (None when greedy); rows i32[B].
  """

  seq: jax.Array
  total: jax.Array
  hidden: jax.Array | None
  cache: KVCache
  sampling: Sampling | None
  key: jax.Array | None
  rows: jax.Array


@struct.dataclass
class Feedback:
  """What verification decided this step, for `Drafter.update`: the proposed draft, the verdict,
  count i32[B] tokens committed (accepted drafts + the next token, cut at a stop token or the
  budget), total i32[B] the committed length after the step, active bool[B] rows that ran it,
  logits f32[B, D + 1, V] the target's (after the logits rules) at the root and the accepted
  path: committed token j was chosen from logits[:, j]."""

  draft: Draft
  verdict: Verdict
  count: jax.Array
  total: jax.Array
  active: jax.Array
  logits: jax.Array


class Drafter(Protocol):
  """tree: the static `Tree` topology of each step's drafts (`Tree.chain(k)` for one sequence),
  or a `DynamicTree` bounding the per-row trees that `propose` returns in `Draft.parents`;
  forwards: draft-model forward passes per step (for the stats)."""

  tree: Tree | DynamicTree
  forwards: int

  def check(self, target: ModelConfig) -> None:
    """Raise ValueError if this drafter cannot serve `target` (called by the API on the host)."""

  def hidden_layers(self, target: ModelConfig) -> tuple[int, ...]:
    """Static indices of the target hidden states the drafter reads from `Context.hidden`."""
    return ()

  def init(self, prompt: jax.Array, prompt_lengths: jax.Array, capacity: int,
           hidden: jax.Array | None) -> Any:
    """The initial state for right-padded prompts i32[B, P]; `capacity` is the static length of
    `Context.seq`; `hidden` [len(layers), B, P, D] the target's hidden states over the prompts at
    the `hidden_layers` (stale past each row's length), None when the drafter names no layers, so
    a drafter reading them can prefill its own cache (default: no state)."""
    return ()

  @abc.abstractmethod
  def propose(self, state: Any, ctx: Context) -> tuple[Draft, Any]:
    """Draft tokens for the nodes of `tree` (padding marked invalid) and the next state; with a
    `DynamicTree`, also each row's parents, within its size, depth and fan-out bounds."""

  def update(self, state: Any, feedback: Feedback) -> Any:
    """The state after verification (default: unchanged)."""
    return state


class Switching(Drafter):
  """A drafter that switches between topologies step by step (EntMTP's entropy buckets)."""

  @abc.abstractmethod
  def variants(self) -> tuple[Drafter, ...]:
    """Drafters sharing this one's state, one per topology it may switch between. The loop sizes
    its buffers for the largest tree among them."""

  @abc.abstractmethod
  def pick(self, state: Any) -> jax.Array:
    """i32[]: which of `variants()` drafts this step, one choice for the whole batch."""


def variants(drafter: Drafter) -> tuple[Drafter, ...]:
  """The drafters the loop compiles a step for: a `Switching` drafter's variants, else itself."""
  return drafter.variants() if isinstance(drafter, Switching) else (drafter,)


def check_positive(name: str, value) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < 1:
    raise ValueError(f"{name} must be an int >= 1, got {value!r}")


def gather(seq: jax.Array, index: jax.Array) -> jax.Array:
  """seq[b, index[b, ...]] with out-of-range indices clipped (callers mask them)."""
  flat = jnp.clip(index, 0, seq.shape[1] - 1).reshape(index.shape[0], -1)
  return jnp.take_along_axis(seq, flat, 1).reshape(index.shape)
