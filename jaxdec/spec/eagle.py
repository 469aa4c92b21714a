"""EAGLE-3 feature drafter (Li et al. 2025) with EAGLE-2 dynamic draft trees, and the KVShot
variants that read the target's KV cache instead of (or beside) its hidden states.

One decoder layer runs over *pairs*: pair t is (feature g_t, token x_{t+1}) at the token's
position t + 1. The layer's input is [RMSNorm(embed(x_{t+1})), RMSNorm(g_t)] (width 2D; the
target's frozen embedding), its residual stream is g_t, and its output h_t, through a final norm
and the LM head, predicts x_{t+2}. For committed tokens g_t = fc(the target's hidden states at
`layers`, concatenated) (EAGLE-3 fuses a low, a middle and a high layer); a drafted node's g is
its parent's output h, so the drafter runs on its own features, as it is trained to
(training-time test, `jaxdec.train.eagle`).

`reuse` (KVShot): "hidden" is EAGLE-3. "kv" reads no hidden states: committed pairs are not
fed at all, and the layer attends to the target's cached K/V of `kv_layer` for the context (the
root pair gets g = 0). "hybrid" feeds fused features and attends to the target's K/V of
`kv_layer` beside its own.

Trees (EAGLE-2): the root's top_k tokens; then depth - 1 times, the top_k frontier nodes by
cumulative log-probability are expanded in one forward (each attends to the context, its
expanded ancestors and itself) and each proposes its top_k children; finally the `size` best
of all generated nodes by cumulative log-probability form the tree. A child never scores above
its parent and ties go to the earlier node, so the chosen nodes form a connected subtree. top_k
= 1 is a chain of `depth`, verified as a static chain; `choices` gives a static tree instead
(EAGLE-1). Drafts are ranks of the drafter's
logits (deterministic), so `Exact` verification is lossless on every tree.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec.model import KVCache, MaskSpec, Model, ModelConfig, project_qkv
from jaxdec.model.kv_cache import write_layer, write_slots
from jaxdec.model.layers import gated_mlp, rms_norm, rope_cos_sin
from jaxdec.model.params import pytree_dataclass
from jaxdec.plugins import Source, register_cli
from jaxdec.spec.drafter import Context, Drafter, check_positive, gather
from jaxdec.spec.heads import check_choices, choices_tree
from jaxdec.spec.tree import DynamicTree, Tree
from jaxdec.spec.verify import Draft

REUSE = ("hidden", "kv", "hybrid")


@pytree_dataclass
class EagleLayer:
  """The draft layer: a decoder block (one, unstacked) whose q/k/v read [embedding, feature]
  (wq f[2D, H, hd], wk, wv f[2D, K, hd]), each half with its own norm instead of `attn_norm`.
  Biases and q/k norms as the layer's config says (None without)."""

  input_norm: Any
  hidden_norm: Any
  wq: Any
  wk: Any
  wv: Any
  wo: Any
  mlp_norm: Any
  w_gate: Any
  w_up: Any
  w_down: Any
  bq: Any = None
  bk: Any = None
  bv: Any = None
  q_norm: Any = None
  k_norm: Any = None


@pytree_dataclass
class VerifyHead:
  """VAT's acceptance classifier on the drafter's normed output: w f[D], b f[] (training only)."""

  w: Any
  b: Any


@pytree_dataclass
class Eagle3Params:
  """The drafter's weights: `layer`, the final `norm` f[D], `fc` f[n D, D] fusing the target's n
  hidden states (None for reuse "kv", which fuses none) and, while training with VAT, `verify`."""

  layer: EagleLayer
  norm: Any
  fc: Any = None
  verify: VerifyHead | None = None



def default_layers(num_layers: int) -> tuple[int, ...]:
  """EAGLE-3's low / middle / high features: the inputs of layers 2, L // 2 and L - 3; where
  those collide (a shallow target) the inputs of layers 1, L // 2 and L - 1."""
  eagle = (2, num_layers // 2, num_layers - 3)
  if len(set(eagle)) == 3 and min(eagle) >= 1:
    return eagle
  return tuple(sorted({min(1, num_layers - 1), num_layers // 2, num_layers - 1}))


def draft_config(target: ModelConfig) -> ModelConfig:
  """The draft layer's config: the target's, with one layer and every layer alike. Here, not in
  training, because reading a saved drafter (`convert.eagle3`) needs it too."""
  sliding = None if target.sliding is None else dataclasses.replace(target.sliding, layers=None)
  return dataclasses.replace(target, num_layers=1, sliding=sliding,
                             rope=dataclasses.replace(target.rope, local_theta=None))


def target_head(target: Model) -> jax.Array:
  """The target's LM head f[D, V] (its embedding, transposed, when tied)."""
  p = target.params
  return p.embed.T if target.config.embeddings.tied else p.lm_head


def _norm(x, weight, config: ModelConfig):
  return rms_norm(x, weight, config.layer.norm_eps, config.layer.norm_unit_offset)


def fuse(params: Eagle3Params, hidden: jax.Array) -> jax.Array:
  """The target's hidden states [n, B, T, D] at the drafter's layers -> features g [B, T, D]."""
  stacked = jnp.concatenate(list(hidden), axis=-1)
  return jnp.einsum("btf,fd->btd", stacked.astype(params.fc.dtype), params.fc)


def pair_qkv(params: Eagle3Params, config: ModelConfig, embedded, feats, positions):
  """q, k, v of pairs: token embeddings [B, T, D], features [B, T, D], positions i32[B, T]."""
  p = params.layer
  x = jnp.concatenate([_norm(embedded.astype(feats.dtype), p.input_norm, config),
                       _norm(feats, p.hidden_norm, config)], axis=-1)
  cos, sin = rope_cos_sin(positions, config)
  return project_qkv(x, p, cos, sin, config)


def pair_output(params: Eagle3Params, config: ModelConfig, feats, attended) -> jax.Array:
  """The layer's output h [B, T, D] from its residual stream (the features) and attention."""
  p = params.layer
  x = feats + jnp.einsum("bthk,hkd->btd", attended, p.wo)
  return x + gated_mlp(_norm(x, p.mlp_norm, config), p.w_gate, p.w_up, p.w_down,
                       config.layer.activation)


def attend(q, shared, diagonal=()) -> jax.Array:
  """Attention of q[B, T, H, hd] over several key sets, one softmax: `shared` is a list of
  (k, v [B, S, K, hd], visible bool[B or 1, T, S]) seen by every query under its mask;
  `diagonal` a list of (k, v [B, T, K, hd]) where query t sees only entry t (training-time
  test: a position's own keys from earlier unrolled steps)."""
  batch, steps, heads, head_dim = q.shape
  kv_heads = shared[0][0].shape[2]
  q = q.reshape(batch, steps, kv_heads, heads // kv_heads, head_dim) * head_dim ** -0.5
  low = jnp.finfo(jnp.float32).min
  scores = [jnp.where(vis[:, None, None], jnp.einsum("btkgd,bskd->bkgts", q, k).astype(jnp.float32), low)
            for k, _, vis in shared]
  scores += [jnp.einsum("btkgd,btkd->bkgt", q, k).astype(jnp.float32)[..., None] for k, _ in diagonal]
  sizes = [s.shape[-1] for s in scores]
  probs = jax.nn.softmax(jnp.concatenate(scores, axis=-1), axis=-1)
  parts = jnp.split(probs, np.cumsum(sizes)[:-1].tolist(), axis=-1)
  out = sum(jnp.einsum("bkgts,bskd->btkgd", w.astype(v.dtype), v) for w, (_, v, _) in zip(parts, shared))
  for w, (_, v) in zip(parts[len(shared):], diagonal):
    out = out + jnp.einsum("bkgt,btkd->btkgd", w[..., 0].astype(v.dtype), v)
  return out.reshape(batch, steps, heads, head_dim)


def draft_logp(params: Eagle3Params, config: ModelConfig, head: jax.Array,
               h: jax.Array) -> jax.Array:
  """Log-probabilities f32[..., Vd] over the draft vocabulary from layer outputs h[..., D]."""
  logits = jnp.einsum("...d,dv->...v", _norm(h, params.norm, config), head.astype(h.dtype))
  return jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)


# Tree growth (EAGLE-2), pure functions of the log-probabilities so they can be tested alone.
@struct.dataclass
class Growth:
  """Every node generated so far (candidates, in generation order: parents first) and the
  frontier to expand next. tokens/scores/parents [B, C] (parents: candidate index, -1 = root),
  frontier i32[B, top_k] candidate indices."""

  tokens: jax.Array
  scores: jax.Array
  parents: jax.Array
  frontier: jax.Array


def first_level(logp: jax.Array, top_k: int) -> Growth:
  """The root's top_k children from its log-probabilities f32[B, V]; all are the frontier."""
  scores, tokens = jax.lax.top_k(logp, top_k)
  batch = logp.shape[0]
  index = jnp.broadcast_to(jnp.arange(top_k, dtype=jnp.int32)[None, :], (batch, top_k))
  return Growth(tokens=tokens.astype(jnp.int32), scores=scores,
                parents=jnp.full((batch, top_k), -1, jnp.int32), frontier=index)


def next_level(g: Growth, logp: jax.Array, top_k: int) -> tuple[Growth, jax.Array]:
  """Expand the frontier: logp f32[B, top_k, V] after each frontier node. Each proposes its
  top_k children (score = its score + log p); the top_k children overall are the next frontier.
  Returns the growth and, per new frontier node, which frontier slot its parent held."""
  batch = logp.shape[0]
  child_logp, child_tokens = jax.lax.top_k(logp, top_k)  # [B, k, k]
  parent_scores = jnp.take_along_axis(g.scores, g.frontier, 1)
  scores = (parent_scores[:, :, None] + child_logp).reshape(batch, -1)
  parents = jnp.broadcast_to(g.frontier[:, :, None], child_tokens.shape).reshape(batch, -1)
  _, chosen = jax.lax.top_k(scores, top_k)
  offset = g.tokens.shape[1]
  grown = Growth(tokens=jnp.concatenate([g.tokens, child_tokens.reshape(batch, -1).astype(jnp.int32)], 1),
                 scores=jnp.concatenate([g.scores, scores], 1),
                 parents=jnp.concatenate([g.parents, parents], 1),
                 frontier=(offset + chosen).astype(jnp.int32))
  return grown, (chosen // top_k).astype(jnp.int32)


def rerank(g: Growth, size: int) -> tuple[jax.Array, jax.Array]:
  """The `size` best candidates by score, in generation order: (candidate indices i32[B, N],
  parents i32[B, N] as tree nodes: 0 the root, i + 1 the i-th chosen node)."""
  _, best = jax.lax.top_k(g.scores, size)
  chosen = jnp.sort(best, axis=1).astype(jnp.int32)
  batch, count = g.scores.shape
  rows = jnp.arange(batch)[:, None]
  node_of = jnp.zeros((batch, count), jnp.int32).at[rows, chosen].set(
      jnp.arange(1, size + 1, dtype=jnp.int32)[None, :])
  parent = jnp.take_along_axis(g.parents, chosen, 1)
  nodes = jnp.where(parent < 0, 0, jnp.take_along_axis(node_of, jnp.maximum(parent, 0), 1))
  return chosen, nodes


@register_cli("drafter", "eagle", order=70, help="an EAGLE-3 feature drafter growing dynamic trees",
              source=Source("DRAFTER", "drafter", "the drafter's directory", "zoo:pycode-eagle3",
                            noun="an EAGLE-3 drafter"))
@struct.dataclass
class Eagle3(Drafter):
  """An EAGLE-3 drafter: `params` (`Eagle3Params`: the draft layer, its final norm, fc; no
  `verify`); `embed` f[V, D] the target's input embedding; `head` f[D, Vd] the LM head over the
  draft vocabulary, whose ids map to the target's through `draft_ids` i32[Vd] (None: the full
  vocabulary).
  `config` is the draft layer's (the target's with one layer). Load a trained one with
  `jaxdec.load_drafter`; train one with `jaxdec.train.eagle`."""

  params: Eagle3Params
  embed: jax.Array
  head: jax.Array
  draft_ids: jax.Array | None = None
  config: ModelConfig = struct.field(pytree_node=False, default=None)
  layers: tuple = struct.field(pytree_node=False, default=())
  reuse: str = struct.field(pytree_node=False, default="hidden")
  kv_layer: int | None = struct.field(pytree_node=False, default=None)
  top_k: int = struct.field(pytree_node=False, default=4)
  depth: int = struct.field(pytree_node=False, default=5)
  size: int = struct.field(pytree_node=False, default=16)
  choices: tuple | None = struct.field(pytree_node=False, default=None)

  def __post_init__(self):
    if not isinstance(self.params, Eagle3Params):
      raise TypeError(f"Eagle3.params must be an Eagle3Params, got {type(self.params).__name__}")
    if self.reuse not in REUSE:
      raise ValueError(f"Eagle3.reuse must be one of {REUSE}, got {self.reuse!r}")
    if not isinstance(self.config, ModelConfig):
      raise TypeError(f"Eagle3.config must be the draft layer's ModelConfig, got {self.config!r}")
    for name in ("top_k", "depth", "size"):
      check_positive(f"Eagle3.{name}", getattr(self, name))
    if self.top_k == 1 and self.size != self.depth:
      object.__setattr__(self, "size", self.depth)  # A chain: every node is kept.
    most = self.top_k + (self.depth - 1) * self.top_k ** 2
    if self.size > most:
      raise ValueError(f"Eagle3.size={self.size} exceeds the {most} nodes that top_k={self.top_k} "
                       f"and depth={self.depth} generate")
    if self.choices is not None:
      object.__setattr__(self, "choices", check_choices(self.choices))
    if self.reuse != "kv" and not self.layers:
      raise ValueError("Eagle3.layers (the target hidden states it fuses) is empty")
    vocab = self.head.shape[1]
    if self.draft_ids is not None and tuple(self.draft_ids.shape) != (vocab,):
      raise ValueError(f"draft_ids must map each of the head's {vocab} draft ids to a target id, "
                       f"got shape {tuple(self.draft_ids.shape)}")
    if self.draft_ids is None and vocab != self.embed.shape[0]:
      raise ValueError(f"the head emits {vocab} ids but the embedding has {self.embed.shape[0]}: "
                       f"a reduced draft vocabulary needs draft_ids")

  @property
  def tree(self):
    if self.choices is not None:
      return choices_tree(self.choices)
    if self.top_k == 1:
      return Tree.chain(self.depth)
    return DynamicTree(self.size, min(self.depth, self.size), self.top_k)

  @property
  def forwards(self) -> int:
    """The root pair's forward, then one per expanded level."""
    return self.depth if self.choices is None else self.tree.max_depth

  def with_tree(self, top_k: int | None = None, depth: int | None = None,
                size: int | None = None, choices=None) -> "Eagle3":
    """The same drafter growing other trees: dynamic (top_k = 1: a chain of `depth`), or with
    `choices` the static tree of those rank paths (as Medusa's: (0, 1) = the second-ranked
    child of the top-ranked token)."""
    return self.replace(top_k=self.top_k if top_k is None else top_k,
                        depth=self.depth if depth is None else depth,
                        size=self.size if size is None else size,
                        choices=None if choices is None else tuple(map(tuple, choices)))

  def check(self, target: ModelConfig) -> None:
    if not target.is_causal:
      raise ValueError(f"EAGLE drafts for an autoregressive target, got attention {target.attention}")
    if tuple(self.embed.shape) != (target.vocab_size, target.hidden_size):
      raise ValueError(f"the drafter's embedding is {tuple(self.embed.shape)}; the target has "
                       f"{target.vocab_size} ids of width {target.hidden_size}")
    for layer in self.layers:
      if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer <= target.num_layers:
        raise ValueError(f"feature layer {layer!r} is outside the target's [0, {target.num_layers}]")
    if self.draft_ids is not None:
      ids = jax.device_get(self.draft_ids)
      if ids.min() < 0 or ids.max() >= target.vocab_size:
        raise ValueError(f"draft_ids hold target ids in [{ids.min()}, {ids.max()}], outside the "
                         f"target's vocabulary of {target.vocab_size}")
    if self.reuse != "hidden":
      if not isinstance(self.kv_layer, int) or not 0 <= self.kv_layer < target.num_layers:
        raise ValueError(f"kv_layer {self.kv_layer!r} is not a layer of the target "
                         f"(0..{target.num_layers - 1})")
      if (self.config.num_kv_heads, self.config.head_dim) != (target.num_kv_heads, target.head_dim):
        raise ValueError(f"reading the target's K/V needs its {target.num_kv_heads} KV heads of "
                         f"{target.head_dim}; the draft layer has {self.config.num_kv_heads} of "
                         f"{self.config.head_dim}")

  def hidden_layers(self, target: ModelConfig) -> tuple[int, ...]:
    return () if self.reuse == "kv" else tuple(self.layers)

  # The drafter's own KV cache: pair t at slot t (committed), drafted nodes after them.
  def init(self, prompt, prompt_lengths, capacity, hidden=None):
    c = self.config
    shape = (1, prompt.shape[0], capacity, c.num_kv_heads, c.head_dim)
    dtype = self.params.layer.wk.dtype
    cache = KVCache(k=jnp.zeros(shape, dtype), v=jnp.zeros(shape, dtype),
                    positions=jnp.zeros(prompt.shape[:1] + (capacity,), jnp.int32),
                    length=jnp.zeros(prompt.shape[:1], jnp.int32))
    if self.reuse == "kv":
      return cache
    width = prompt.shape[1]
    pos = jnp.broadcast_to(jnp.arange(1, width, dtype=jnp.int32)[None, :], (prompt.shape[0], width - 1))
    cache, _ = self._qkv_write(cache, prompt[:, 1:], fuse(self.params, hidden)[:, :-1], pos,
                               cache.length)
    return cache.with_length(jnp.maximum(prompt_lengths - 1, 0))

  def _qkv_write(self, cache: KVCache, tokens, feats, positions, start):
    """Write the K/V of pairs (tokens, feats) at slots start[b].. of each row; returns the cache
    (length unchanged) and the pairs' queries."""
    q, k, v = pair_qkv(self.params, self.config, self.embed[tokens], feats, positions)
    cache = cache.replace(k=write_layer(cache.k, 0, k, start), v=write_layer(cache.v, 0, v, start),
                          positions=write_slots(cache.positions, positions, start))
    return cache, q

  def _attend(self, q, positions, cache: KVCache, length, ctx: Context, tree=None, tree_start=None):
    """Attention of queries at positions over the own cache's first `length` slots (the drafted
    nodes' region [tree_start, ...) seen through `tree`) and, for KV reuse, the target's cached
    K/V of `kv_layer`."""
    visible = MaskSpec(q_positions=positions, kv_positions=cache.positions, kv_length=length,
                       tree=tree, start=length if tree_start is None else tree_start).dense()
    shared = [(cache.k[0], cache.v[0], visible)]
    if self.reuse != "hidden":
      target = ctx.cache
      slots = jnp.arange(target.max_len, dtype=jnp.int32)[None, None, :]
      seen = jnp.broadcast_to(slots < target.length[:, None, None], positions.shape + (target.max_len,))
      shared.append((target.k[self.kv_layer].astype(q.dtype), target.v[self.kv_layer].astype(q.dtype),
                     seen))
    return attend(q, shared)

  def propose(self, state: KVCache, ctx: Context):
    cache, h, base = self._root(state, ctx)
    grow = self._grow_static if self.choices is not None else self._grow_dynamic
    draft, cache = grow(cache, ctx, h, base)
    return draft, cache.with_length(base)

  def _root(self, state: KVCache, ctx: Context):
    """Feed the committed pairs the last step may have added and run the root pair: (cache, the
    root's output h [B, D], base = the first slot of the drafted nodes)."""
    batch, total = ctx.seq.shape[0], ctx.total
    root_pos = (total - 1)[:, None]
    if self.reuse == "kv":  # Only the root pair, at slot 0, with g = 0.
      feats = jnp.zeros((batch, 1, self.embed.shape[1]), self.params.layer.wk.dtype)
      cache, q = self._qkv_write(state, gather(ctx.seq, root_pos), feats, root_pos,
                                 jnp.zeros_like(total))
      root_feat, root_q, base = feats[:, 0], q, jnp.ones_like(total)
    else:  # Re-feed the last pairs (every one a verification can commit) at their slots.
      count = self.tree.max_depth + 1
      start = jnp.maximum(total - 1 - count, 0)
      index = start[:, None] + jnp.arange(count, dtype=jnp.int32)[None, :]  # Pair indices.
      hidden = jnp.take_along_axis(ctx.hidden, jnp.clip(index, 0, ctx.hidden.shape[2] - 1)[None, :, :, None], 2)
      feats = fuse(self.params, hidden)
      cache, q = self._qkv_write(state, gather(ctx.seq, index + 1), feats, index + 1, start)
      root = (total - 2 - start)[:, None]
      root_feat = jnp.take_along_axis(feats, root[:, :, None], 1)[:, 0]
      root_q = jnp.take_along_axis(q, root[:, :, None, None], 1)
      base = total - 1
    attended = self._attend(root_q, root_pos, cache, base, ctx)
    return cache, pair_output(self.params, self.config, root_feat[:, None], attended)[:, 0], base

  def _expand(self, cache, ctx: Context, tokens, feats, depth: int, base, done: int, tree):
    """Run drafted nodes at `depth` (target ids [B, E], features [B, E, D] = their parents'
    outputs) after the `done` nodes already in the tree region at slot `base`; `tree` bool[B, E,
    done + E] = which of those each sees. Returns (their log-probs [B, E, Vd], outputs, cache)."""
    positions = jnp.broadcast_to(ctx.total[:, None] + depth - 1, tokens.shape)
    cache, q = self._qkv_write(cache, tokens, feats, positions, base + done)
    h = pair_output(self.params, self.config, feats,
                    self._attend(q, positions, cache, base + done + tokens.shape[1], ctx, tree, base))
    return draft_logp(self.params, self.config, self.head, h), h, cache

  def _grow_dynamic(self, cache, ctx: Context, h, base):
    """EAGLE-2: expand the top_k frontier by cumulative log-probability, rerank (module doc)."""
    batch, k = h.shape[0], self.top_k
    g = first_level(draft_logp(self.params, self.config, self.head, h), k)
    width = max((self.depth - 1) * k, k)
    feats = jnp.broadcast_to(h[:, None], (batch, k, h.shape[-1]))
    ancestors = jnp.broadcast_to(jnp.eye(k, width, dtype=bool)[None], (batch, k, width))
    for depth in range(1, self.depth):
      done = (depth - 1) * k  # Nodes already in the tree region.
      tokens = self._target_ids(jnp.take_along_axis(g.tokens, g.frontier, 1))
      logp, h, cache = self._expand(cache, ctx, tokens, feats, depth, base, done,
                                    ancestors[:, :, :done + k])
      g, came_from = next_level(g, logp, k)
      feats = jnp.take_along_axis(h, came_from[:, :, None], 1)
      ancestors = jnp.take_along_axis(ancestors, came_from[:, :, None], 1)
      ancestors = ancestors | (jnp.arange(width)[None, None, :]
                               == done + k + jnp.arange(k)[None, :, None])
    chosen, parents = rerank(g, self.size)
    tokens = self._target_ids(jnp.take_along_axis(g.tokens, chosen, 1))
    return Draft(tokens=tokens, valid=jnp.ones(tokens.shape, bool),
                 parents=None if self.top_k == 1 else parents), cache

  def _grow_static(self, cache, ctx: Context, h, base):
    """EAGLE-1's static tree: node (r1, .., rd) is rank rd among the children of node (r1, ..,
    r(d-1)); depth by depth, the nodes with children are expanded in one forward."""
    paths = self.choices
    token = {}  # path -> target ids [B]
    output = {(): h}  # path -> its output h [B, D] (the features its children are fed).
    logp = {(): draft_logp(self.params, self.config, self.head, h)}
    expanded = []  # Paths in the tree region, in slot order.
    for depth in range(1, max(len(p) for p in paths) + 1):
      level = [p for p in paths if len(p) == depth]
      ranks = jax.lax.top_k(jnp.stack([logp[p[:-1]] for p in level], 1), 1 + max(p[-1] for p in level))[1]
      for i, p in enumerate(level):
        token[p] = self._target_ids(ranks[:, i, p[-1]])
      parents = [p for p in level if any(len(c) == depth + 1 and c[:depth] == p for c in paths)]
      if not parents:
        break
      seen = np.array([[q == p[:len(q)] for q in expanded + parents] for p in parents])
      tree = jnp.broadcast_to(jnp.asarray(seen)[None], (h.shape[0],) + seen.shape)
      lp, out, cache = self._expand(cache, ctx, jnp.stack([token[p] for p in parents], 1),
                                    jnp.stack([output[p[:-1]] for p in parents], 1), depth, base,
                                    len(expanded), tree)
      for i, p in enumerate(parents):
        logp[p], output[p] = lp[:, i], out[:, i]
      expanded += parents
    tokens = jnp.stack([token[p] for p in paths], 1)
    return Draft(tokens=tokens, valid=jnp.ones(tokens.shape, bool)), cache

  def _target_ids(self, draft_tokens: jax.Array) -> jax.Array:
    if self.draft_ids is None:
      return draft_tokens
    return self.draft_ids[draft_tokens].astype(jnp.int32)
