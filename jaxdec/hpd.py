"""Hyper-Parallel Decoding (HPD): many independent continuations of a shared context, decoded
side by side inside one row.

A row holds documents one after another, each its context and then its queries:

    [ctx_0 | q_00 | q_01 | ... | ctx_1 | q_10 | ... | padding]

A context's tokens take positions 0, 1, ... in a segment of their own; every query continues its
context's positions (query j after a context of C tokens sits at C, C + 1, ...: the positions
it would have if `context + query` were decoded alone) in a segment of its own that reads its
context and nothing else (`jaxdec.model.Segments`). Each decode step feeds one token per stream,
every stream of the row in one forward, each at its own next position and in its own segment:
the context's K/V are computed once and shared, the streams never see each other, and each
stops at its own stop token or budget. So a stream's greedy output is that of decoding
`context + query` alone, while a row does the work of one long sequence instead of a batch of
copies of the context (the paper: up to 13.8x on attribute-value extraction).

`pack` lays documents out on the host; `parallel_generate` is the pure, jittable loop over the
token loop's core, the streams as its rows (one prefill, one `lax.while_loop`, static shapes,
traced budget, every control). `jaxdec.parallel_generate` is the
validated entry point.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec import decoding
from jaxdec.controls import Controls
from jaxdec.decoding import (DecodeOutput, DecodeStats, Decoding, Job, LoopState, bucket,
                             check_ids, typed_key)
from jaxdec.model import KVCache, Model, ModelConfig, Segments, decode_hidden, embed, forward, unembed
from jaxdec.model.params import Params
from jaxdec.model.kv_cache import write_slots
from jaxdec.sampling import Sampling


@dataclasses.dataclass(frozen=True)
class Packed:
  """Documents laid out in rows (host numpy arrays; see the module docstring).

  tokens, positions, segments, reads: i32[B, W]; lengths: i32[B] real tokens per row;
  ends: i32[B, N] the index in its row of each stream's last query token (-1: no stream);
  order: (row, stream) of each query, documents' queries one after another.
  Stream n of a row has segment n; document d's context has segment N + d; padding -1."""

  tokens: np.ndarray
  positions: np.ndarray
  segments: np.ndarray
  reads: np.ndarray
  lengths: np.ndarray
  ends: np.ndarray
  order: tuple[tuple[int, int], ...]


def pack(documents, rows: int = 1, width: int | None = None, streams: int | None = None) -> Packed:
  """Lay out `documents`, a list of (context token ids, [query token ids, ...]), in `rows` rows,
  each document whole in one row (round robin), into static sizes `width` x `streams` (default:
  just enough). Queries must be non-empty; a context may be empty (then its queries are plain
  prompts packed side by side)."""
  per_row = [documents[r::rows] for r in range(rows)]
  need_width = max(sum(len(c) + sum(len(q) for q in qs) for c, qs in docs) for docs in per_row)
  need_streams = max(sum(len(qs) for _, qs in docs) for docs in per_row)
  width = need_width if width is None else width
  streams = need_streams if streams is None else streams
  if width < need_width or streams < need_streams:
    raise ValueError(f"pack: the documents need width {need_width} and {need_streams} streams "
                     f"per row, got width={width}, streams={streams}")
  shape = (rows, max(width, 1))
  tokens, positions = np.zeros(shape, np.int32), np.zeros(shape, np.int32)
  segments, reads = np.full(shape, -1, np.int32), np.full(shape, -1, np.int32)
  ends = np.full((rows, max(streams, 1)), -1, np.int32)
  lengths = np.zeros((rows,), np.int32)
  order = [None] * len(documents)
  for r, docs in enumerate(per_row):
    at, stream = 0, 0
    for d, (context, queries) in enumerate(docs):
      ctx_segment = streams + d
      span = slice(at, at + len(context))
      tokens[r, span], positions[r, span] = context, np.arange(len(context))
      segments[r, span], reads[r, span] = ctx_segment, ctx_segment
      at += len(context)
      placed = []
      for query in queries:
        span = slice(at, at + len(query))
        tokens[r, span] = query
        positions[r, span] = len(context) + np.arange(len(query))
        segments[r, span], reads[r, span] = stream, ctx_segment
        at += len(query)
        ends[r, stream] = at - 1
        placed.append((r, stream))
        stream += 1
      order[r + d * rows] = placed
    lengths[r] = at
  return Packed(tokens, positions, segments, reads, lengths, ends,
                tuple(p for placed in order for p in placed))


# ---- host side: the documents checked and laid out -------------------------------------------

def documents(context, queries) -> list[tuple[np.ndarray, list[np.ndarray]]]:
  """(context, queries) of one document, or lists of both for several, as int arrays."""
  def ids(value, what):
    row = np.asarray(value)
    if row.ndim != 1 or not (row.size == 0 or np.issubdtype(row.dtype, np.integer)):
      raise TypeError(f"{what} must be a flat sequence of int token ids, got {row.dtype} with "
                      f"shape {row.shape}")
    return row.astype(np.int64)

  if not isinstance(context, (list, tuple, np.ndarray)):
    raise TypeError(f"context must be a token-id list (or a list of them, one per document), got "
                    f"{type(context).__name__}")
  several = len(context) > 0 and not isinstance(context[0], (int, np.integer))
  contexts, groups = (context, queries) if several else ([context], [queries])
  if several and (not isinstance(queries, (list, tuple)) or len(queries) != len(contexts)):
    raise ValueError(f"with {len(contexts)} documents, queries must be a list of {len(contexts)} "
                     f"query lists (one per document), got {type(queries).__name__} of length "
                     f"{len(queries) if isinstance(queries, (list, tuple)) else '-'}")
  documents = []
  for d, (ctx, qs) in enumerate(zip(contexts, groups)):
    where = f" of document {d}" if several else ""
    if not isinstance(qs, (list, tuple)) or not qs:
      raise ValueError(f"queries{where} must be a non-empty list of token-id lists, got "
                       f"{qs!r}"[:200])
    if all(isinstance(q, (int, np.integer)) for q in qs):
      raise TypeError(f"queries{where} must be a list of queries (token-id lists), got one flat "
                      f"list of ints; for a single query wrap it in a list: [ids]")
    rows = [ids(q, f"query {j}{where}") for j, q in enumerate(qs)]
    for j, q in enumerate(rows):
      if q.size == 0:
        raise ValueError(f"query {j}{where} is empty: every query needs at least one token (the "
                         f"context's own continuation is jaxdec.generate's job)")
    documents.append((ids(ctx, f"context{where}"), rows))
  return documents


def check_documents(documents, config, budget: int) -> None:
  """Every context, query and the budget fit the model's positions and vocabulary (ValueError
  naming the document and query otherwise)."""
  limit = config.max_position_embeddings
  for d, (ctx, qs) in enumerate(documents):
    where = f" of document {d}" if len(documents) > 1 else ""
    if len(ctx) >= limit:
      raise ValueError(f"context{where} has {len(ctx)} tokens, which leaves no room in the "
                       f"model's maximum of {limit} positions")
    check_ids(ctx, config.vocab_size, f"context{where}")
    for j, q in enumerate(qs):
      check_ids(q, config.vocab_size, f"query {j}{where}")
    longest = int(np.argmax([len(q) for q in qs]))
    if len(ctx) + len(qs[longest]) + budget > limit:
      raise ValueError(f"query {longest}{where} has {len(qs[longest])} tokens: with the context's "
                       f"{len(ctx)} and max_new_tokens={budget} it needs "
                       f"{len(ctx) + len(qs[longest]) + budget} positions, more than the model's "
                       f"maximum of {limit}")


def layout(documents, rows: int) -> Packed:
  """`pack` at the static sizes the API compiles for: width in steps of 64 (not a power of two:
  every step attends over all of a row's slots, so rounding 278 up to 512 would nearly double
  each step's attention), streams a bucketed count."""
  widest = max(sum(len(c) + sum(len(q) for q in qs) for c, qs in documents[r::rows])
               for r in range(rows))
  most = max(sum(len(qs) for _, qs in documents[r::rows]) for r in range(rows))
  return pack(documents, rows=rows, width=-(-widest // 64) * 64, streams=bucket(most, minimum=4))


def per_slot(tree, index: np.ndarray, size: int):
  """Per-query values (each leaf [Q]) at their (row, stream) slots `index` of `size`; slots
  without a stream repeat the first value."""
  return jax.tree.map(lambda v: _scatter(np.asarray(v), index, size), tree)


def _scatter(values: np.ndarray, index: np.ndarray, size: int) -> np.ndarray:
  out = np.full((size,), values.reshape(-1)[0], values.dtype)
  out[index] = values
  return out


def by_query(out: DecodeOutput, index: np.ndarray, budget: int) -> DecodeOutput:
  """`parallel_generate`'s output (per packed row and stream) as one host row per query, in
  the order of `index` (each query's (row, stream) slot), cut to the budget; the stats keep the
  packed rows' `nfe` / `tokens_per_forward` and add `forwards_per_query`."""
  per_query = lambda x: np.asarray(x).reshape(-1, *np.shape(x)[2:])[index]
  tokens = per_query(out.tokens)[:, :budget]
  logprobs = None if out.logprobs is None else per_query(out.logprobs)[:, :budget]
  stats = jax.tree.map(np.asarray, out.stats)
  stats = stats.replace(extra={"forwards_per_query": per_query(stats["stream_forwards"])})
  return DecodeOutput(tokens=tokens, lengths=per_query(out.lengths), logprobs=logprobs,
                      stats=stats)


def prepare(model: Model, context, queries, max_new_tokens, sampling=None, key=None, *,
            stop_tokens=None, rows: int = 1) -> Job:
  """`jaxdec.parallel_generate`'s arguments validated and laid out, as a `Job` whose rows are
  the queries: per-query values (sampling, the controls' rules) go to each query's (row,
  stream) slot, the stream delivers the queries in order and the output has a row per query."""
  model = decoding.ar_view(model)
  docs = documents(context, queries)
  rows = decoding.positive_int("rows", rows)
  budget = decoding.positive_int("max_new_tokens", max_new_tokens)
  if rows > len(docs):
    raise ValueError(f"rows={rows} exceeds the {len(docs)} documents to spread over them")
  check_documents(docs, model.config, budget)
  queries = sum(len(qs) for _, qs in docs)
  sampling = decoding.check_sampling(sampling, queries)
  key = decoding.check_key(
      key, needed=sampling is not None, what="sampling",
      unused="sampling is None, which decodes greedily (no randomness); pass "
             "sampling=jaxdec.Sampling.create(temperature=...)")
  packed = layout(docs, rows)
  streams = packed.ends.shape[1]
  index = np.asarray([r * streams + n for r, n in packed.order])
  to_slots = lambda tree: None if tree is None else per_slot(tree, index, rows * streams)
  return Job(model, run, (packed.tokens, packed.positions, packed.segments, packed.reads,
                          packed.lengths, packed.ends),
             (np.int32(budget), key, decoding.stop_tokens(model.config, stop_tokens),
              to_slots(sampling)),
             static=(("buffer_len", bucket(budget)),), to_loop=to_slots, order=index,
             finish=lambda out: by_query(out, index, budget))


# ---- device side -------------------------------------------------------------------------------

@struct.dataclass
class _Carry:
  """HPD's part of the loop carry: the KV cache of the packed rows and each slot's segment."""

  cache: KVCache
  kv_segments: jax.Array  # i32[B, S]


def stream_prompts(tokens: jax.Array, positions: jax.Array, segments: jax.Array,
                   reads: jax.Array, ends: jax.Array):
  """Each stream's own prompt (its context then its query, as `generate` would see it) cut out
  of packed rows: (prompts i32[B * N, W], lengths i32[B * N]; 1 for slots without a stream)."""
  batch, width = tokens.shape
  streams = ends.shape[1]
  at_end = jnp.maximum(ends, 0)
  stream_reads = jnp.take_along_axis(reads, at_end, axis=1)  # [B, N]: each stream's context.
  mine = ((segments[:, None, :] == jnp.arange(streams)[None, :, None])
          | (segments[:, None, :] == stream_reads[:, :, None])) & (ends >= 0)[:, :, None]
  rows = jnp.arange(batch)[:, None, None]
  slot = jnp.where(mine, positions[:, None, :], width)  # [B, N, W]
  prompts = jnp.zeros((batch, streams, width), jnp.int32).at[
      rows, jnp.arange(streams)[None, :, None], slot].set(
          jnp.broadcast_to(tokens[:, None, :], slot.shape), mode="drop")
  lengths = jnp.where(ends >= 0, jnp.take_along_axis(positions, at_end, axis=1) + 1, 1)
  return prompts.reshape(batch * streams, width), lengths.reshape(-1).astype(jnp.int32)


def parallel_generate(params: Params, tokens: jax.Array, positions: jax.Array, segments: jax.Array,
                      reads: jax.Array, lengths: jax.Array, ends: jax.Array,
                      max_new_tokens: jax.Array, key: jax.Array | None, stop_tokens: jax.Array, *,
                      config: ModelConfig, buffer_len: int, sampling: Sampling | None = None,
                      pad_id: int = 0, controls: Controls = Controls()) -> DecodeOutput:
  """Decode every stream of packed rows (`pack`'s arrays) up to `max_new_tokens` (a traced
  scalar, at most the static `buffer_len` T) tokens each, or to its first stop token or string.
  The streams are the token loop's rows (`jaxdec.decoding`), so every control (`controls`, as
  `jaxdec.ar.generate`) applies to each stream as to a row decoded alone; `sampling` has one
  value per (row, stream) slot, or scalars.

  Returns DecodeOutput with tokens i32[B, N, T] and lengths i32[B, N] per stream (0 for slots
  without a stream), logprobs f32[B, N, T] or None, stats `nfe` i32[B] (forwards per packed row,
  the prefill included), `steps`, `tokens_per_forward` (tokens per forward of each packed row)
  and `stream_forwards` i32[B, N]. Sampled tokens are keyed by (row * N + stream, position),
  so a stream's draw does not depend on its neighbours.
  """
  batch, width = tokens.shape
  streams = ends.shape[1]
  d = Decoding(sampling=sampling, key=typed_key(key), stop_tokens=stop_tokens, controls=controls,
               pad_id=pad_id)
  live = (ends >= 0).reshape(-1)
  budget = jnp.where(live, jnp.minimum(jnp.asarray(max_new_tokens, jnp.int32), buffer_len), 0)
  capacity = width + streams * buffer_len
  stream_ids = jnp.broadcast_to(jnp.arange(streams, dtype=jnp.int32), (batch, streams))
  at_end = jnp.maximum(ends, 0)
  stream_reads = jnp.take_along_axis(reads, at_end, axis=1)

  kv_segments = jnp.full((batch, capacity), -1, jnp.int32).at[:, :width].set(segments)
  cache = KVCache.init(config, batch, capacity, dtype=params.embed.dtype)
  hidden, _, cache = decode_hidden(
      params, embed(params, tokens), positions, cache, config=config, valid_lengths=lengths,
      segments=Segments(q=segments, reads=reads, kv=kv_segments))
  # Generated tokens start at slot `width` in every row (the padding before it is hidden by its
  # segment, -1), so step t's stream n sits at slot width + t * N + n: the interleaved layout
  # that lets attention score each stream against its own tokens only.
  cache = cache.with_length(jnp.full((batch,), width, jnp.int32))
  last_hidden = jnp.take_along_axis(hidden, at_end[:, :, None], axis=1)
  first_logits = unembed(params, last_hidden, config).reshape(batch * streams, -1)
  prompts, prompt_lengths = stream_prompts(tokens, positions, segments, reads, ends)
  s = decoding.init(d, prompts, prompt_lengths, budget, width + buffer_len, config.vocab_size,
                    _Carry(cache=cache, kv_segments=kv_segments))
  s = decoding.first_token(d, s, first_logits)

  def step(s: LoopState) -> LoopState:
    at = (s.total - 1).reshape(batch, streams)  # Position of each stream's latest token, fed now.
    last = jnp.take_along_axis(s.seq, (s.total - 1)[:, None], axis=1).reshape(batch, streams)
    m: _Carry = s.method
    kv = write_slots(m.kv_segments, stream_ids, m.cache.length)
    logits, _, cache = forward(params, last, at, m.cache, config=config,
                               segments=Segments(q=stream_ids, reads=stream_reads, kv=kv,
                                                 interleaved_from=width))
    flat = logits.reshape(batch * streams, -1)
    active = s.active
    s, _ = decoding.commit(d, s, decoding.choose(d, s, flat)[:, None], jnp.ones_like(s.total),
                           flat[:, None])
    return s.replace(method=_Carry(cache=cache, kv_segments=kv),
                     forwards=s.forwards + active.astype(jnp.int32))

  out = decoding.output(d, decoding.run(step, s), buffer_len)
  per_stream = lambda x: None if x is None else x.reshape(batch, streams, *x.shape[1:])
  nfe = jnp.broadcast_to(out.stats["steps"] + 1, (batch,))
  made = jnp.sum(per_stream(out.lengths), axis=1)
  per_forward = made.astype(jnp.float32) / nfe.astype(jnp.float32)
  stats = DecodeStats.create(nfe, out.stats["steps"], per_forward,
                             stream_forwards=per_stream(out.stats["nfe"]))
  return DecodeOutput(tokens=per_stream(out.tokens), lengths=per_stream(out.lengths),
                      stats=stats, logprobs=per_stream(out.logprobs))


def run(model: Model, tokens, positions, segments, reads, lengths, ends, max_new_tokens, key,
        stop_tokens, sampling, *, controls: Controls, buffer_len: int) -> DecodeOutput:
  """`parallel_generate` for a loaded model (the `Job.run` of `prepare`)."""
  return parallel_generate(model.params, tokens, positions, segments, reads, lengths, ends,
                           max_new_tokens, key, stop_tokens, config=model.config,
                           buffer_len=buffer_len, sampling=sampling,
                           pad_id=decoding.pad_id(model.config), controls=controls)
