"""Commit rules: which masked positions of the current block take their candidate token this step.

A scheduler sees one block's confidences, already ranked, and returns bool[B, N]. Schedulers are
flax struct dataclasses: the kind and the confidence measure are static, thresholds are traced
leaves, so sweeping tau / f / delta reuses one compiled program. Each rule is a copy of its
reference (research/dllm.md §1-4); ties go to the lower position (upstream PyTorch leaves the
order of equal confidences unspecified).
"""

from __future__ import annotations

from typing import Protocol

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

_LOWEST = float(jnp.finfo(jnp.float32).min)


@struct.dataclass
class StepInfo:
  """Where each row stands in its current block."""

  step: jax.Array  # i32[B]: forwards already run on this block.
  steps: jax.Array  # i32[]: steps per block (total steps // number of blocks).
  block_masks: jax.Array  # i32[B]: masked positions of the block when it started.
  masked: jax.Array  # i32[B]: masked positions of the block now (the candidates).


@struct.dataclass
class Ranked:
  """One block's confidences, ranked. Candidates (masked positions) come first, by confidence
  then position; a NaN confidence ranks last among candidates, so every step can commit."""

  confidence: jax.Array  # f32[B, N]; -inf off the candidates.
  rank: jax.Array  # i32[B, N]: 0 = most confident candidate.
  ordered: jax.Array  # f32[B, N]: confidences in rank order (-inf after the candidates).


def rank_confidence(confidence: jax.Array, candidates: jax.Array) -> Ranked:
  """confidence f32[B, N], candidates bool[B, N] -> Ranked (a stable descending sort)."""
  key = jnp.where(candidates, jnp.nan_to_num(confidence, nan=_LOWEST), -jnp.inf)
  order = jnp.argsort(-key, axis=-1, stable=True)
  rank = jnp.argsort(order, axis=-1).astype(jnp.int32)
  return Ranked(confidence=key, rank=rank, ordered=jnp.take_along_axis(key, order, axis=-1))


def top(ranked: Ranked, count: jax.Array) -> jax.Array:
  """bool[B, N]: the `count` i32[B] best-ranked positions of each row."""
  return ranked.rank < count[:, None]


class Scheduler(Protocol):
  """A commit rule. `confidence` names what the sampler ranks by ("probability" = p(x0),
  "random", "margin" = p1 - p2, "neg_entropy"); `tempered` says whether probabilities are taken
  after temperature scaling (Dream) or before (LLaDA); `fills_block` says whether a block ends
  when it has no mask left (True) or after exactly `steps` forwards (False)."""

  confidence: str
  tempered: bool
  fills_block: bool

  def select(self, ranked: Ranked, info: StepInfo) -> jax.Array:
    """bool[B, N]: positions to commit (the sampler keeps only masked ones)."""

  def check(self) -> None:
    """Raise ValueError on bad concrete hyper-parameters (called by the API on the host)."""


def transfer_count(block_masks: jax.Array, steps: jax.Array, step: jax.Array) -> jax.Array:
  """LLaDA's `get_num_transfer_tokens`, column `step`: m // steps, plus 1 in the first m % steps
  steps. Steps past the masks get 0 and still cost a forward."""
  return block_masks // steps + (step < block_masks % steps).astype(jnp.int32)


@struct.dataclass
class FixedSteps:
  """LLaDA's sampler: every block runs exactly `steps` forwards and step i commits
  `transfer_count(...)` of the block's masks, the highest ranked first. `remasking`
  "low_confidence" ranks by p(x0) under the untempered logits, "random" by a uniform draw."""

  remasking: str = struct.field(pytree_node=False, default="low_confidence")

  tempered = False
  fills_block = False

  @property
  def confidence(self) -> str:
    self.check()
    return {"low_confidence": "probability", "random": "random"}[self.remasking]

  def select(self, ranked: Ranked, info: StepInfo) -> jax.Array:
    return top(ranked, transfer_count(info.block_masks, info.steps, info.step))

  def check(self) -> None:
    if self.remasking not in ("low_confidence", "random"):
      raise ValueError(f"FixedSteps.remasking must be 'low_confidence' or 'random', got "
                       f"{self.remasking!r}")


_DREAM_ALGS = {"maskgit_plus": "probability", "topk_margin": "margin", "entropy": "neg_entropy"}


def _split(a: jax.Array) -> tuple[jax.Array, jax.Array]:
  """a = hi + lo exactly, hi with 12 significant bits (bit masking: immune to FMA contraction)."""
  bits = jax.lax.bitcast_convert_type(a, jnp.uint32) & jnp.uint32(0xFFFFF000)
  hi = jax.lax.bitcast_convert_type(bits, jnp.float32)
  return hi, a - hi


def fma32(a: jax.Array, b: jax.Array, c: jax.Array) -> jax.Array:
  """a * b + c in float32 with one rounding (Dekker two-product + two-sum), because PyTorch's
  CPU linspace is compiled with fused multiply-adds and Dream's schedule truncates with int()."""
  p = a * b
  ah, al = _split(a)
  bh, bl = _split(b)
  err = al * bl - (((p - ah * bh) - al * bh) - ah * bl)  # a * b == p + err exactly.
  s = p + c
  v = s - p
  t = (p - (s - v)) + (c - v)  # p + c == s + t exactly.
  return s + (t + err)


def dream_timesteps(i: jax.Array, steps: jax.Array, eps: float) -> jax.Array:
  """f32: element i of torch.linspace(1, eps, steps + 1) (float32, CPU kernel): start + step * i
  in the first half, end - step * (steps - i) in the second, each one fused multiply-add."""
  start, end = jnp.float32(1.0), jnp.float32(eps)
  delta = (end - start) / steps.astype(jnp.float32)
  first = i < (steps + 1) // 2
  ahead = fma32(delta, i.astype(jnp.float32), start)
  behind = fma32(-delta, (steps - i).astype(jnp.float32), end)
  return jnp.where(first, ahead, behind)


def dream_count(masked: jax.Array, steps: jax.Array, step: jax.Array, eps: float) -> jax.Array:
  """Dream `_sample`: int(n * (1 - t[i+1] / t[i])) in float32, and every mask at the last step."""
  t, s = dream_timesteps(step, steps, eps), dream_timesteps(step + 1, steps, eps)
  count = jnp.floor(masked.astype(jnp.float32) * (1.0 - s / t)).astype(jnp.int32)
  return jnp.where(step < steps - 1, count, masked)


@struct.dataclass
class Dream:
  """Dream's sampler (`DreamGenerationMixin._sample`, alg != 'origin'): step i of `steps` commits
  int(n * (1 - t[i+1]/t[i])) of the n current masks on a float32 linspace(1, eps) schedule (the
  last step commits the rest). `alg` picks the confidence: "maskgit_plus" p(x0), "topk_margin"
  p1 - p2, "entropy" sum p log p; probabilities are taken after temperature scaling."""

  alg: str = struct.field(pytree_node=False, default="entropy")
  eps: float = struct.field(pytree_node=False, default=1e-3)

  tempered = True
  fills_block = False

  @property
  def confidence(self) -> str:
    if self.alg not in _DREAM_ALGS:
      raise ValueError(f"Dream.alg must be one of {sorted(_DREAM_ALGS)}, got {self.alg!r}")
    return _DREAM_ALGS[self.alg]

  def select(self, ranked: Ranked, info: StepInfo) -> jax.Array:
    return top(ranked, dream_count(info.masked, info.steps, info.step, self.eps))

  def check(self) -> None:
    if self.alg not in _DREAM_ALGS:
      raise ValueError(f"Dream.alg must be one of {sorted(_DREAM_ALGS)}, got {self.alg!r}")
    if not 0 < self.eps < 1:
      raise ValueError(f"Dream.eps must be in (0, 1), got {self.eps!r}")


def _check_finite(name: str, value) -> np.ndarray:
  """A scalar or per-row (1-D) real value, all finite."""
  try:
    array = np.asarray(value, np.float64)
  except (TypeError, ValueError):
    raise TypeError(f"{name} must be a real number or a 1-D array of them, got "
                    f"{type(value).__name__}") from None
  if array.ndim > 1 or not np.isfinite(array).all():
    raise ValueError(f"{name} must be finite, scalar or per row (1-D), got {value!r}")
  return array


def _column(value) -> jax.Array:
  """A traced hyper-parameter, scalar or per row [B], shaped to broadcast against [B, N]."""
  value = jnp.asarray(value, jnp.float32)
  return value[:, None] if value.ndim == 1 else value


@struct.dataclass
class Threshold:
  """Fast-dLLM's threshold rule: commit every candidate with p(x0) >= tau, and always the most
  confident one. A block runs until it has no mask left. tau: scalar or per row [B] (as the
  other rules' values), so one batch can sweep it."""

  tau: jax.Array | float = 0.9

  confidence = "probability"
  tempered = False
  fills_block = True

  def select(self, ranked: Ranked, info: StepInfo) -> jax.Array:
    return (ranked.confidence >= _column(self.tau)) | (ranked.rank == 0)

  def check(self) -> None:
    _check_finite("Threshold.tau", self.tau)


@struct.dataclass
class Factor:
  """Fast-dLLM's factor rule (`get_transfer_index_dynamic`): scan the sorted confidences c_(i)
  (0-based) against 1 - f / (i + 2), the first always passing; commit up to the first failure b,
  or all n when none fails, and, as upstream, all n when b == n - 1 (its off-by-one)."""

  factor: jax.Array | float = 1.0

  confidence = "probability"
  tempered = False
  fills_block = True

  def select(self, ranked: Ranked, info: StepInfo) -> jax.Array:
    n = ranked.ordered.shape[-1]
    i = jnp.arange(n, dtype=jnp.int32)[None, :]
    bound = jnp.where(i == 0, -1.0, 1.0 - _column(self.factor) / (i + 2).astype(jnp.float32))
    fail = (ranked.ordered < bound) & (i < info.masked[:, None])
    stop = jnp.where(jnp.any(fail, axis=-1), jnp.argmax(fail, axis=-1).astype(jnp.int32),
                     info.masked - 1)
    count = jnp.where((stop == 0) | (stop == info.masked - 1), stop + 1, stop)
    return top(ranked, count)

  def check(self) -> None:
    if (_check_finite("Factor.factor", self.factor) <= 0).any():
      raise ValueError(f"Factor.factor must be positive, got {self.factor!r}")


@struct.dataclass
class Frechet:
  """Fast-dLLM++'s Frechet profile rule: with sorted confidences c_(1) >= ... >= c_(n), score
  G_n = (sum_{j<=n} c_(j) - (n - 1)) - (1 - c_(n)), G_1 = +inf; commit the top
  count(G_n > delta) (at least one)."""

  delta: jax.Array | float = 0.25

  confidence = "probability"
  tempered = False
  fills_block = True

  def select(self, ranked: Ranked, info: StepInfo) -> jax.Array:
    n = ranked.ordered.shape[-1]
    i = jnp.arange(n, dtype=jnp.int32)[None, :]
    valid = i < info.masked[:, None]
    # G_n rewritten as sum_{j<=n} (c_(j) - 1) + c_(n): the same value without the cancellation of
    # sum(c) - (n - 1) in float32, which flipped knife-edge comparisons against the float64
    # reference when confidences saturate near 1.
    deficit = jnp.cumsum(jnp.where(valid, ranked.ordered - 1.0, 0.0), axis=-1)
    score = jnp.where(valid, deficit + ranked.ordered, -jnp.inf)
    score = jnp.where(i == 0, jnp.inf, score)
    count = jnp.maximum(jnp.sum(score > _column(self.delta), axis=-1, dtype=jnp.int32), 1)
    return top(ranked, count)

  def check(self) -> None:
    _check_finite("Frechet.delta", self.delta)


SCHEDULERS = (FixedSteps, Dream, Threshold, Factor, Frechet)
