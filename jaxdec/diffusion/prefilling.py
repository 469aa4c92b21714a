"""Prefilling-dLLM (arXiv 2606.10537): decode after a long prompt while attending to a few chunks
of it, chosen once.

A prompt splits into a *context* (all but its last `query_tokens` tokens) and a *query* (those
tokens, always kept whole). Before the first step (`prepare`, once per prompt):

1. the context is cut into chunks of `chunk_size` tokens, each encoded alone as [BOS, chunk] at
   positions 0..chunk_size (BOS: every chunk gets its own attention anchor, which the paper finds
   removes lost-in-the-middle);
2. every chunk is scored against the query (`score`) and the `top_k` best are kept (ties: the
   earlier chunk), in document order;
3. optionally only the `token_capacity` tokens of each kept chunk that the query's keys point at
   most are kept (BOS always);
4. the kept chunks' keys and values become a fixed cache prefix, placed by the `positions` rule,
   and the query + generation canvas decodes over it as under `DualCache`: a refresh at each
   block start recomputes the query and the generation, never the context.

A step then attends over at most top_k * (chunk_size + 1) context keys instead of the prompt, and
the prompt is never encoded as a whole: its cost grows linearly with its length.

Readings where the paper's release leaves a choice (each a parameter):
- score "draft" (the release's default): a short draft (`draft_tokens`) is decoded from the query
  alone, and a chunk scores the mean log-probability of that draft given [BOS, chunk] + query.
  The release scores the question and draft tokens as they stand; a masked-diffusion model is
  trained only on masked positions, so here the draft is scored masked (query visible). Score
  "keys" (ours, no forward per chunk): cosine between the query's mean key and the chunk's mean
  key, averaged over layers and KV heads.
- positions "continuous" (the release's headline): kept chunks numbered one after another (each
  chunk's BOS included), the query after the last; the kept chunks are re-encoded at those
  positions (exact under any RoPE variant; the release never re-rotates). "reuse": every kept chunk
  stays at 0..chunk_size and the query follows at chunk_size + 1.
- token capacity scores tokens by the query's *keys* against the chunk's keys (the release uses
  query->chunk attention; the denoiser gives keys, not queries), max over query tokens, summed over
  heads, mean over layers, max-pooled over `pool` neighbours. Off by default, as in the release.
- The release drops the last context token of every full chunk (BOS prepended, then truncated);
  here a chunk holds all its tokens.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.decoding import positions
from jaxdec.diffusion.caches import DualCache
from jaxdec.model import KVCache
from jaxdec.plugins import register_cli

SCORES = ("draft", "keys")
POSITION_RULES = ("continuous", "reuse")


@struct.dataclass
class _Offset:
  """A Denoiser whose positions are shifted by offsets i32[B] (the context's model positions)."""

  inner: Any
  offsets: jax.Array

  @property
  def mask_token_id(self) -> int:
    return self.inner.mask_token_id

  @property
  def shifted_logits(self) -> bool:
    return self.inner.shifted_logits

  def hidden(self, tokens, positions, cache, valid_lengths):
    return self.inner.hidden(tokens, positions + self.offsets[:, None], cache, valid_lengths)

  def logits(self, hidden, index):
    return self.inner.logits(hidden, index)

  @property
  def block_size(self) -> int | None:
    return self.inner.block_size

  def init_cache(self, batch, length):
    return self.inner.init_cache(batch, length)


def _check_int(name: str, value, low: int) -> None:
  if isinstance(value, bool) or not isinstance(value, int) or value < low:
    raise ValueError(f"PrefillingCache {name} must be an int >= {low}, got {value!r}")


@register_cli("cache", "prefilling", order=30,
              help="long prompts: the dual cache over the 4 most relevant 256-token chunks of the "
                   "prompt and its last 64 tokens")
@struct.dataclass
class PrefillingCache(DualCache):
  """Chunk-sparse long-prompt decoding (module docstring); a `DualCache` over a fixed context.

  Settings (static): chunk_size, top_k, query_tokens, score ("draft" | "keys"), draft_tokens,
  positions ("continuous" | "reuse"), token_capacity (None: whole chunks), pool, bos_id (None:
  the prompt's first token). `prepare` fills the leaves: the kept context's keys and values
  (`context`, slots in front, `context_length` real per row) and the chunks picked (`chosen`
  i32[B, top_k], -1 where a row had fewer chunks; `scores` f32[B, chunks])."""

  chunk_size: int = struct.field(pytree_node=False, default=256)
  top_k: int = struct.field(pytree_node=False, default=4)
  query_tokens: int = struct.field(pytree_node=False, default=64)
  score: str = struct.field(pytree_node=False, default="draft")
  draft_tokens: int = struct.field(pytree_node=False, default=8)
  positions: str = struct.field(pytree_node=False, default="continuous")
  token_capacity: int | None = struct.field(pytree_node=False, default=None)
  pool: int = struct.field(pytree_node=False, default=7)
  bos_id: int | None = struct.field(pytree_node=False, default=None)
  context: KVCache | None = None
  context_length: jax.Array | None = None
  chosen: jax.Array | None = None
  scores: jax.Array | None = None

  def check(self, guided: bool) -> None:
    super().check(guided)
    for name, low in (("chunk_size", 1), ("top_k", 1), ("query_tokens", 1), ("draft_tokens", 1),
                      ("pool", 1)):
      _check_int(name, getattr(self, name), low)
    if self.token_capacity is not None:
      _check_int("token_capacity", self.token_capacity, 1)
    if self.score not in SCORES:
      raise ValueError(f"PrefillingCache score must be one of {SCORES}, got {self.score!r}")
    if self.positions not in POSITION_RULES:
      raise ValueError(f"PrefillingCache positions must be one of {POSITION_RULES}, got "
                       f"{self.positions!r}")

  def prepare(self, denoiser, prompt: jax.Array, prompt_lengths: jax.Array):
    """(denoiser, query prompt i32[B, query_tokens], its lengths, this cache with its context):
    what the sampler decodes instead of the long prompt."""
    if denoiser.block_size is not None:
      raise ValueError("PrefillingCache serves bidirectional dLLMs; a block-causal model's "
                       "prompt cache is exact already (DualCache)")
    batch, width = prompt.shape
    split = jnp.maximum(prompt_lengths - self.query_tokens, 0)  # i32[B]: context tokens.
    query, query_lengths = _take(prompt, split, self.query_tokens), prompt_lengths - split
    num_chunks = -(-max(width - self.query_tokens, 1) // self.chunk_size)
    bos = prompt[:, :1] if self.bos_id is None else jnp.full((batch, 1), self.bos_id, jnp.int32)
    chunks, real = _chunks(prompt, split, bos, num_chunks, self.chunk_size)
    encoded = _encode(denoiser, chunks, real, positions(batch * num_chunks, self.chunk_size + 1))
    scorer = _draft_scores if self.score == "draft" else _key_scores
    scores = scorer(self, denoiser, encoded, real, query, query_lengths)
    scores = jnp.where(jnp.any(real[..., 1:], axis=-1), scores, -jnp.inf)  # Empty chunks: never.
    kept = min(self.top_k, num_chunks)
    top, chosen = jax.lax.top_k(scores, kept)  # Ties: the lower index first.
    chosen = jnp.sort(jnp.where(jnp.isfinite(top), chosen, num_chunks), axis=1)
    live = chosen < num_chunks
    chosen = jnp.where(live, chosen, -1)
    pick = lambda a: jnp.take_along_axis(a, jnp.maximum(chosen, 0)[..., None], axis=1)
    tokens, keep = pick(chunks), pick(real) & live[..., None]  # [B, kept, C + 1]
    if self.positions == "continuous":
      sizes = jnp.sum(keep, axis=-1, dtype=jnp.int32)
      starts = jnp.cumsum(sizes, axis=1) - sizes
      at = starts[..., None] + jnp.arange(self.chunk_size + 1, dtype=jnp.int32)[None, None]
      cache = _encode(denoiser, tokens, keep, at.reshape(batch * kept, -1))
      offsets = jnp.sum(sizes, axis=1)
    else:
      cache = _rows(encoded, jnp.maximum(chosen, 0), num_chunks)
      offsets = jnp.full((batch,), self.chunk_size + 1, jnp.int32)
    if self.token_capacity is not None and self.token_capacity < self.chunk_size:
      keep = keep & _capacity(self, denoiser, cache, keep, query, query_lengths)
    context, length = _compact(cache, keep, batch)
    prepared = self.replace(context=context, context_length=length, chosen=chosen, scores=scores)
    return _Offset(denoiser, offsets), query, query_lengths, prepared

  def init(self, denoiser, batch, width):
    if self.context is None:
      raise ValueError("PrefillingCache.init before prepare: the sampler prepares it")
    cache = denoiser.init_cache(batch, self.context.max_len + width)
    size = self.context.max_len
    return cache.replace(k=cache.k.at[:, :, :size].set(self.context.k.astype(cache.k.dtype)),
                         v=cache.v.at[:, :, :size].set(self.context.v.astype(cache.v.dtype)),
                         positions=cache.positions.at[:, :size].set(self.context.positions),
                         length=self.context_length)

  def refresh_base(self, state, denoiser, batch, width):
    return state.with_length(self.context_length), self.context_length


def _take(a: jax.Array, start: jax.Array, size: int) -> jax.Array:
  """a[b, start[b] : start[b] + size] (clamped at the end; the caller tracks real lengths)."""
  index = jnp.minimum(positions(a.shape[0], size, start), a.shape[1] - 1)
  return jnp.take_along_axis(a, index, axis=1)


def _chunks(prompt, split, bos, num_chunks: int, size: int):
  """(tokens i32[B, M, C + 1], real bool[B, M, C + 1]): chunk m is [BOS, context tokens
  m*C .. m*C + C - 1]; a slot is real if it is the BOS of a chunk or a context token."""
  batch = prompt.shape[0]
  index = jnp.arange(num_chunks * size, dtype=jnp.int32).reshape(num_chunks, size)
  body = jnp.take(prompt, jnp.minimum(index, prompt.shape[1] - 1), axis=1)  # [B, M, C]
  tokens = jnp.concatenate([jnp.broadcast_to(bos[:, None], (batch, num_chunks, 1)), body], -1)
  real = jnp.concatenate([jnp.ones((batch, num_chunks, 1), bool),
                          index[None] < split[:, None, None]], axis=-1)
  return tokens, real


def _encode(denoiser, tokens, real, at):
  """Each chunk alone ([B, M, C + 1] -> B*M rows) at positions `at` i32[B*M, C + 1]: a KVCache of
  B*M rows. Real slots come first in every row (BOS, then the chunk's tokens)."""
  rows = tokens.reshape(-1, tokens.shape[-1])
  lengths = jnp.maximum(jnp.sum(real.reshape(rows.shape), axis=-1, dtype=jnp.int32), 1)
  _, cache = denoiser.hidden(rows, at, denoiser.init_cache(*rows.shape), lengths)
  return cache.with_length(lengths)  # A forward advances the length by all its tokens.


def _rows(cache: KVCache, chosen: jax.Array, num_chunks: int) -> KVCache:
  """The encoded chunks chosen i32[B, N] of a B*M-row cache, as B*N rows."""
  flat = (jnp.arange(chosen.shape[0], dtype=jnp.int32)[:, None] * num_chunks + chosen).reshape(-1)
  return KVCache(k=cache.k[:, flat], v=cache.v[:, flat], positions=cache.positions[flat],
                 length=cache.length[flat])


def _grow(cache: KVCache, extra: int) -> KVCache:
  """The same cache with `extra` more (empty) slots per row, for a forward to write into."""
  pad = lambda a, axis: jnp.pad(a, [(0, extra if i == axis else 0) for i in range(a.ndim)])
  return cache.replace(k=pad(cache.k, 2), v=pad(cache.v, 2), positions=pad(cache.positions, 1))


def _compact(cache: KVCache, keep: jax.Array, batch: int) -> tuple[KVCache, jax.Array]:
  """B*N rows of C + 1 slots -> B rows of N*(C + 1) slots with the kept ones first."""
  layers, _, size, heads, dim = cache.k.shape
  keep = keep.reshape(batch, -1)
  order = jnp.argsort(~keep, axis=1, stable=True)
  gather = lambda a: jnp.take_along_axis(a.reshape(layers, batch, -1, heads, dim),
                                         order[None, :, :, None, None], axis=2)
  length = jnp.sum(keep, axis=1, dtype=jnp.int32)
  return KVCache(k=gather(cache.k), v=gather(cache.v),
                 positions=jnp.take_along_axis(cache.positions.reshape(batch, -1), order, 1),
                 length=length), length


def _query_keys(denoiser, query, query_lengths):
  """The query's keys alone: f32[L, B, Q, K, hd] and real bool[B, Q]."""
  batch, size = query.shape
  _, cache = denoiser.hidden(query, positions(batch, size), denoiser.init_cache(batch, size),
                             query_lengths)
  return cache.k.astype(jnp.float32), jnp.arange(size)[None, :] < query_lengths[:, None]


def _mean_key(k, real):
  """Mean over real slots: k [L, R, S, K, hd], real bool[R, S] -> [L, R, K, hd]."""
  w = real.astype(jnp.float32)[None, :, :, None, None]
  return jnp.sum(k * w, axis=2) / jnp.maximum(jnp.sum(w, axis=2), 1.0)


def _key_scores(self: PrefillingCache, denoiser, encoded, real, query, query_lengths):
  """f32[B, M]: cosine of the query's and each chunk's mean key (BOS left out), averaged over
  layers and KV heads."""
  batch, num_chunks = real.shape[:2]
  kq, q_real = _query_keys(denoiser, query, query_lengths)
  mq = _mean_key(kq, q_real)  # [L, B, K, hd]
  body = real.reshape(batch * num_chunks, -1).at[:, 0].set(False)
  mc = _mean_key(encoded.k.astype(jnp.float32), body).reshape(
      (mq.shape[0], batch, num_chunks) + mq.shape[2:])
  unit = lambda a: a / jnp.maximum(jnp.linalg.norm(a, axis=-1, keepdims=True), 1e-6)
  return jnp.mean(jnp.sum(unit(mq)[:, :, None] * unit(mc), axis=-1), axis=(0, 3))


def _then_masks(query, query_lengths, size: int, mask_id: int) -> jax.Array:
  """i32[B, Q + size]: each row's query, then `size` masks right after its real tokens."""
  slot = jnp.arange(query.shape[1] + size, dtype=jnp.int32)[None, :]
  return jnp.where(slot < query_lengths[:, None], jnp.pad(query, ((0, 0), (0, size))),
                   mask_id).astype(jnp.int32)


def draft(denoiser, query, query_lengths, size: int) -> jax.Array:
  """i32[B, size]: `size` tokens after each query, decoded from the query alone (no context), one
  per forward, the most confident masked position first."""
  batch, width = query.shape
  x = _then_masks(query, query_lengths, size, denoiser.mask_token_id)
  at = positions(batch, size, query_lengths)  # The draft's slots.
  shift = int(denoiser.shifted_logits)

  def step(_, x):
    h, _ = denoiser.hidden(x, positions(batch, width + size), None, query_lengths + size)
    logits = denoiser.logits(h, at - shift).astype(jnp.float32)
    open_ = jnp.take_along_axis(x, at, axis=1) == denoiser.mask_token_id
    confidence = jnp.where(open_, jnp.max(jax.nn.log_softmax(logits), axis=-1), -jnp.inf)
    pick = jax.nn.one_hot(jnp.argmax(confidence, axis=1), size, dtype=bool)
    new = jnp.where(pick, jnp.argmax(logits, axis=-1), jnp.take_along_axis(x, at, axis=1))
    return jax.vmap(lambda row, i, n: row.at[i].set(n))(x, at, new)

  x = jax.lax.fori_loop(0, size, step, x)
  return jnp.take_along_axis(x, at, axis=1)


def _draft_scores(self: PrefillingCache, denoiser, encoded, real, query, query_lengths):
  """f32[B, M]: mean log-probability of the query's draft, masked, given [BOS, chunk] + query."""
  batch, num_chunks = real.shape[:2]
  size = self.draft_tokens
  drafted = draft(denoiser, query, query_lengths, size)
  width = query.shape[1] + size
  x = _then_masks(query, query_lengths, size, denoiser.mask_token_id)
  repeat = lambda a: jnp.repeat(a, num_chunks, axis=0)
  at = positions(batch, size, query_lengths)
  shift = int(denoiser.shifted_logits)
  h, _ = denoiser.hidden(repeat(x), positions(batch * num_chunks, width, encoded.length),
                         _grow(encoded, width), repeat(query_lengths + size))
  logits = denoiser.logits(h, repeat(at - shift)).astype(jnp.float32)
  logp = jnp.take_along_axis(jax.nn.log_softmax(logits), repeat(drafted)[..., None], axis=-1)
  return jnp.mean(logp[..., 0], axis=-1).reshape(batch, num_chunks)


def _capacity(self: PrefillingCache, denoiser, cache: KVCache, keep, query, query_lengths):
  """bool[B, N, C + 1]: each kept chunk's BOS and its `token_capacity` tokens the query's keys
  point at most (max over query tokens of the dot product, summed over heads, mean over layers,
  max-pooled over `pool` neighbours)."""
  batch, kept, slots = keep.shape
  kq, q_real = _query_keys(denoiser, query, query_lengths)  # [L, B, Q, K, hd]
  kc = cache.k.astype(jnp.float32).reshape((kq.shape[0], batch, kept * slots) + kq.shape[3:])
  dots = jnp.einsum("lbqkd,lbskd->lbqs", kq, kc)
  dots = jnp.where(q_real[None, :, :, None], dots, -jnp.inf)
  score = jnp.mean(jnp.max(dots, axis=2), axis=0).reshape(batch, kept, slots)
  score = jax.lax.reduce_window(score, -jnp.inf, jax.lax.max, (1, 1, self.pool), (1, 1, 1),
                                "SAME")
  score = jnp.where(keep, score, -jnp.inf).at[..., 0].set(-jnp.inf)  # BOS: kept apart.
  rank = jnp.argsort(jnp.argsort(-score, axis=-1, stable=True), axis=-1, stable=True)
  return (rank < self.token_capacity) | (jnp.arange(slots) == 0)[None, None]
