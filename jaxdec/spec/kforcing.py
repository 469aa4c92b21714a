"""K-Forcing: a push-forward student that samples the next k tokens jointly in one forward.

The student is the AR target's own decoder (trained further, `jaxdec.train.kforcing`) plus a
noise embedding. Our reading of "the prefix and k independent uniform noises map to a joint
sample of the next k tokens": token i is drawn from the student's distribution q_i by inverse
CDF, x_i = F^-1(q_i, u_i), over the vocabulary sorted by q_i (u = 0 picks the argmax), and the
unknown token x_i is fed at its own position as `noise_embed(u_i)`. Since x_i is a function of
the prefix and u_1..u_i, slot i + 1 can compute q_{i+1} = p(x_{i+1} | prefix, x_1..x_i) without
seeing x_i: one forward over [last real tokens, u_1 .. u_{k-1}] yields q_1 .. q_k.

Each forward re-feeds the committed tokens that were fed as noise (the drafter: the last k + 1,
all a verification step can commit; standalone: the last k) as real tokens, so they get their
exact K/V before anything later reads them and the student's cache always holds exactly the
committed sequence below the block. Greedy use feeds u = 0 everywhere: every token is its
slot's argmax, and the next slot reads u = 0 as "the previous slot took its top token".

Two uses: `push_forward_generate` (standalone, k tokens per forward, no verification: lossy,
its samples follow the student's joint law, which only approximates the teacher's), and the
`KForcing` drafter, verified by the target (lossless with `Greedy` and `Exact`: the drafts come
with the q_i they were drawn from).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec import decoding
from jaxdec.controls import Controls
from jaxdec.decoding import (DecodeOutput, Decoding, Job, LoopState, clamp_budget, prefill,
                             typed_key)
from jaxdec.model import KVCache, Model, ModelConfig, decode_hidden, embed, unembed
from jaxdec.model.params import pytree_dataclass
from jaxdec.plugins import Source, register_cli
from jaxdec.sampling import token_keys
from jaxdec.spec.drafter import Context, Drafter, check_positive, gather
from jaxdec.spec.tree import Tree
from jaxdec.spec.verify import DRAFT_TAG, Draft

# A saved student: an HF model directory plus these two files (`jaxdec.load_push_forward`).
NOISE_FILE, CONFIG_FILE = "push_forward.safetensors", "push_forward.json"


def noise_features(u: jax.Array, count: int) -> jax.Array:
  """f32[..., count]: a soft thermometer code of u in [0, 1] (tanh steps at `count` evenly spaced
  thresholds), so "did u pass the previous slot's cumulative probability p" is nearly linear."""
  centers = (jnp.arange(count, dtype=jnp.float32) + 0.5) / count
  return jnp.tanh((u[..., None].astype(jnp.float32) - centers.reshape((1,) * u.ndim + (count,))) * count)


@pytree_dataclass
class NoiseParams:
  """The noise embedding: w f32[F, D] over F thresholds, base f32[D]. Saved as the tensors "w"
  and "base" of `NOISE_FILE`."""

  w: Any
  base: Any


def noise_embed(noise: NoiseParams, u: jax.Array) -> jax.Array:
  """The input embedding of a token drawn with uniform u: base + features(u) @ w, f32[..., D]."""
  features = noise_features(u, noise.w.shape[0])
  return jnp.expand_dims(noise.base, tuple(range(features.ndim - 1))) + features @ noise.w


def inverse_cdf(logits: jax.Array, u: jax.Array) -> jax.Array:
  """i32[...]: the token F^-1(softmax(logits), u) over the vocabulary sorted by probability,
  most likely first (u = 0: the argmax; u ~ U(0, 1): a sample of softmax(logits))."""
  order = jnp.argsort(-logits, axis=-1)
  probs = jnp.take_along_axis(jax.nn.softmax(logits.astype(jnp.float32), axis=-1), order, -1)
  rank = jnp.sum(jnp.cumsum(probs, axis=-1) <= u[..., None], axis=-1)
  rank = jnp.minimum(rank, logits.shape[-1] - 1)
  return jnp.take_along_axis(order, rank[..., None], -1)[..., 0].astype(jnp.int32)


@struct.dataclass
class PushForward:
  """A K-Forcing student: `model` (a causal decoder), `noise` (`NoiseParams`),
  `num_tokens` k drafted per forward and the `temperature` of the teacher law it was distilled
  from (its samples approximate the teacher at that temperature)."""

  model: Model
  noise: NoiseParams
  num_tokens: int = struct.field(pytree_node=False, default=4)
  temperature: float = struct.field(pytree_node=False, default=1.0)

  def __post_init__(self):
    check_positive("num_tokens", self.num_tokens)
    if not isinstance(self.model, Model):
      raise TypeError(f"PushForward.model must be a jaxdec Model, got {type(self.model).__name__}")
    if not self.model.config.is_causal:
      raise ValueError(f"a push-forward student must be causal, got attention "
                       f"{self.model.config.attention}")
    if not isinstance(self.noise, NoiseParams):
      raise TypeError(f"PushForward.noise must be a NoiseParams, got {type(self.noise).__name__}")
    shapes = {k: getattr(getattr(self.noise, k), "shape", None) for k in ("w", "base")}
    d = self.model.config.hidden_size
    if shapes["base"] != (d,) or len(shapes["w"] or ()) != 2 or shapes["w"][1] != d:
      raise ValueError(f"PushForward.noise must be w [F, {d}], base [{d}], got {shapes}")

  @property
  def window(self) -> int:
    """Real tokens re-fed per forward: every token a drafter's step can commit (k + 1)."""
    return self.num_tokens + 1

  def init_cache(self, prompt: jax.Array, prompt_lengths: jax.Array, capacity: int) -> KVCache:
    """The student's cache after the prompts, with room for `capacity` committed tokens."""
    params, config = self.model.params, self.model.config
    # A forward writes up to slot max(total, window) + k - 1 (`step`).
    cache = KVCache.init(config, prompt.shape[0], max(capacity, self.window) + self.num_tokens,
                         dtype=params.embed.dtype)
    return prefill(params, prompt, prompt_lengths, cache, config=config)[1]

  def step(self, seq: jax.Array, total: jax.Array, cache: KVCache, u: jax.Array,
           window: int | None = None):
    """One forward: committed tokens seq i32[B, S] (the first total i32[B]), uniforms
    u f32[B, k] -> (logits f32[B, k, V] of q_1 .. q_k, the cache). u_k is not read (x_k feeds
    nothing in this forward). The last `window` (static, default `self.window`) committed
    tokens are re-fed; the cache must hold the ones below them."""
    params, config = self.model.params, self.model.config
    k, batch = self.num_tokens, seq.shape[0]
    window = self.window if window is None else window
    start = jnp.maximum(total - window, 0)
    real = start[:, None] + jnp.arange(window, dtype=jnp.int32)[None, :]
    slots = total[:, None] + jnp.arange(k - 1, dtype=jnp.int32)[None, :]
    pos = jnp.concatenate([real, slots], axis=1)
    # Rows shorter than the window re-feed garbage past `total`: hidden as keys. Everything else
    # is causal by position (noise slots sit at total, total + 1, ...).
    key_ok = jnp.concatenate([real < total[:, None], jnp.ones((batch, k - 1), bool)], axis=1)
    visible = key_ok[:, None, :] & (pos[:, None, :] <= pos[:, :, None])
    x_real = embed(params, gather(seq, real))
    x = jnp.concatenate([x_real, noise_embed(self.noise, u[:, :k - 1]).astype(x_real.dtype)], 1)
    hidden, _, cache = decode_hidden(params, x, pos, cache.with_length(start), config=config,
                                     tree=visible)
    last = jnp.take_along_axis(hidden, (total - 1 - start)[:, None, None], axis=1)
    out = jnp.concatenate([last, hidden[:, window:]], axis=1)
    return unembed(params, out, config), cache

  def uniforms(self, key: jax.Array | None, rows: jax.Array, positions: jax.Array) -> jax.Array:
    """f32[B, k]: the noise for tokens at `positions` i32[B, k] (zeros when key is None:
    greedy), keyed by (row, position) like every sampler here."""
    if key is None:
      return jnp.zeros(positions.shape, jnp.float32)
    keys = token_keys(key, rows[:, None], positions)
    return jax.vmap(jax.random.uniform)(keys.reshape(-1)).reshape(positions.shape)


@register_cli("drafter", "kforcing", order=60,
              help="a K-Forcing student drafting k tokens in one forward",
              source=Source("STUDENT", "drafter", "the student's directory", "zoo:gsm-kforcing",
                            noun="a K-Forcing student"))
@struct.dataclass
class KForcing(Drafter):
  """The push-forward student drafts a chain of k tokens in one forward. With sampling, rows at
  temperature > 0 draw u ~ U(0, 1) (the drafts come with the q_i they were drawn from, so
  `Exact` stays lossless at any target temperature); greedy rows feed u = 0."""

  student: PushForward

  @property
  def tree(self) -> Tree:
    return Tree.chain(self.student.num_tokens)

  @property
  def forwards(self) -> int:
    return 1

  def check(self, target: ModelConfig) -> None:
    vocab = self.student.model.config.vocab_size
    if vocab != target.vocab_size:
      raise ValueError(f"student vocabulary {vocab} != target vocabulary {target.vocab_size}: "
                       f"drafter and target must share a tokenizer")

  def init(self, prompt, prompt_lengths, capacity, hidden):
    return self.student.init_cache(prompt, prompt_lengths, capacity)

  def propose(self, state: KVCache, ctx: Context):
    k = self.student.num_tokens
    positions = ctx.total[:, None] + jnp.arange(k, dtype=jnp.int32)[None, :]
    key = None if ctx.sampling is None else jax.random.fold_in(ctx.key, DRAFT_TAG)
    u = self.student.uniforms(key, ctx.rows, positions)
    if ctx.sampling is not None:
      u = jnp.where(ctx.sampling.temperature[:, None] > 0, u, 0.0)
    logits, cache = self.student.step(ctx.seq, ctx.total, state, u)
    tokens = inverse_cdf(logits, u)
    probs = None if ctx.sampling is None else jax.nn.softmax(logits, axis=-1)
    return Draft(tokens=tokens, valid=jnp.ones(tokens.shape, bool), probs=probs), cache


def _choose(d: Decoding, s: LoopState, logits: jax.Array, u: jax.Array) -> jax.Array:
  """i32[B, k]: each slot's token F^-1(q_i, u_i), under the controls' rules when there are any.
  Our reading for the rules: slot i sees the tokens slots < i drew in the same forward as
  already generated (repetition penalty, `min_new_tokens`), chosen slot by slot; the student's
  later slots were still conditioned on the unruled draws (the noise stands for F^-1(q_i, u_i)),
  so a rule that changes a draw makes the rest of that forward's block approximate."""
  if d.controls.rules is None:
    return inverse_cdf(logits, u)
  pending = jnp.zeros((logits.shape[0], 1, logits.shape[-1]), bool)
  tokens = []
  for i in range(logits.shape[1]):
    generated = (s.generated + i)[:, None]
    ruled = d.controls.process(logits[:, i: i + 1], s.controls, generated, d.stop_tokens, pending)
    token = inverse_cdf(ruled[:, 0], u[:, i])
    pending = pending | (jax.nn.one_hot(token, logits.shape[-1], dtype=jnp.int32) > 0)[:, None]
    tokens.append(token)
  return jnp.stack(tokens, axis=1)


def push_forward_generate(student: PushForward, prompt: jax.Array, prompt_lengths: jax.Array,
                          max_new_tokens: jax.Array, key: jax.Array | None,
                          stop_tokens: jax.Array, *, buffer_len: int, pad_id: int = 0,
                          controls: Controls = Controls()) -> DecodeOutput:
  """Standalone K-Forcing over the token loop's core: k tokens per forward, no verification
  (lossy). Greedy (u = 0) when `key` is None, else samples of the student's joint law. A row
  stops at its budget, after a stop token or a stop string; tokens a forward drew past either
  are dropped. `controls` as `jaxdec.ar.generate` (log-probabilities under the student's own
  distribution). stats: nfe (forwards per row, the prompt's prefill included), steps,
  tokens_per_forward."""
  batch, width = prompt.shape
  k = student.num_tokens
  d = Decoding(sampling=None, key=typed_key(key), stop_tokens=stop_tokens, controls=controls,
               pad_id=pad_id)
  rows = jnp.arange(batch, dtype=jnp.int32)
  budget = clamp_budget(max_new_tokens, batch, buffer_len)
  capacity = width + buffer_len + k
  cache = student.init_cache(prompt, prompt_lengths, capacity)
  s = decoding.init(d, prompt, prompt_lengths, budget, capacity,
                    student.model.config.vocab_size, cache)
  s = s.replace(forwards=s.forwards + 1)  # The prefill.

  def step(s: LoopState) -> LoopState:
    positions = s.total[:, None] + jnp.arange(k, dtype=jnp.int32)[None, :]
    u = student.uniforms(d.key, rows, positions)
    # Only the k tokens the last forward emitted were fed as noise: re-feed exactly those.
    logits, cache = student.step(s.seq, s.total, s.method, u, window=k)
    active = s.active
    s, _ = decoding.commit(d, s, _choose(d, s, logits, u), jnp.full((batch,), k, jnp.int32),
                           logits)
    return s.replace(method=cache, forwards=s.forwards + active.astype(jnp.int32))

  return decoding.output(d, decoding.run(step, s), buffer_len)


def run(student: PushForward, prompt, prompt_lengths, max_new_tokens, key, stop_tokens, *,
        controls: Controls, buffer_len: int) -> DecodeOutput:
  """`push_forward_generate` with the model's pad id (the `Job.run` of `prepare`)."""
  return push_forward_generate(student, prompt, prompt_lengths, max_new_tokens, key, stop_tokens,
                               buffer_len=buffer_len,
                               pad_id=decoding.pad_id(student.model.config), controls=controls)


def prepare(student: PushForward, prompts, max_new_tokens, key=None, *, lengths=None,
            stop_tokens=None) -> Job:
  """`jaxdec.push_forward_generate`'s arguments validated on the host, as a `Job`."""
  if not isinstance(student, PushForward):
    raise TypeError(f"student must be a jaxdec.spec.kforcing.PushForward (jaxdec.load_push_forward"
                    f"(path)), got {type(student).__name__}")
  model = student.model
  decoding.check_model(model, causal=True)
  prompt, prompt_lengths = decoding.prepare_prompts(prompts, lengths, model.config.vocab_size)
  budget = decoding.check_budget("max_new_tokens", max_new_tokens, prompt_lengths,
                                 model.config.max_position_embeddings)
  key = decoding.check_key(key, needed=False, what="sampling")
  stops = decoding.stop_tokens(model.config, stop_tokens)
  return Job(model, run, (prompt, prompt_lengths), (np.int32(budget), key, stops),
             static=(("buffer_len", decoding.bucket(budget)),), first=student, budget=budget)
