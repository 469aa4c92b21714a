"""Multi-token-prediction heads (Medusa; Cai et al. 2024): K small heads read the target's
final-normed hidden state and guess the tokens after the one the target itself predicts, so a
step's drafts cost a few matrix products instead of draft-model forwards.

Head k (1..K) is `num_layers` residual blocks x + SiLU(W x + b) followed by its own unembedding,
and from the hidden state at position t it predicts token t + k + 1. In the speculative loop the
last committed token (the root, at total - 1) was chosen from the hidden state at total - 2, so
head k drafts the token at depth k of the tree. Sequential heads (Hydra's idea, in its simplest
form) also read the token just before their target: head 1 the root, head k its parent node's
token, through a mixing matrix that starts at zero (so training starts from Medusa's heads).
Candidates form a sparse tree given as Medusa's
`choices`: each node is a path of ranks, (0, 2) = head 1's top-1 token followed by head 2's
top-3 token. Drafts are deterministic (ranks of the heads' logits), so `Exact` verification is
lossless on any tree.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec.model import ModelConfig
from jaxdec.model.params import pytree_dataclass
from jaxdec.plugins import Source, register_cli
from jaxdec.spec.drafter import Context, Drafter
from jaxdec.spec.tree import Tree
from jaxdec.spec.verify import Draft


@pytree_dataclass
class HeadsParams:
  """K heads of R residual blocks: w f[K, R, D, D] (input x output), b f[K, R, D], unembed
  f[K, D, V]. Sequential heads add mix f[K, D, D] and embed f[V, D] (both None for Medusa's)."""

  w: Any
  b: Any
  unembed: Any
  mix: Any = None
  embed: Any = None

  @property
  def sequential(self) -> bool:
    return self.mix is not None



def head_logits(params: HeadsParams, hidden: jax.Array,
                previous: jax.Array | None = None) -> jax.Array:
  """Every head's logits f32[..., K, V] from the final-normed hidden state [..., D] at t.

  Sequential heads (`HeadsParams.mix`) read `previous` i32[..., K]: the token just before each
  head's target (head k, predicting t + k + 1, reads token t + k)."""
  x = jnp.broadcast_to(hidden[..., None, :], hidden.shape[:-1] + (params.w.shape[0],)
                       + hidden.shape[-1:]).astype(params.w.dtype)
  if params.sequential:
    x = x + jnp.einsum("...kd,kde->...ke", params.embed[previous], params.mix)
  for r in range(params.w.shape[1]):
    bias = params.b[:, r].reshape((1,) * (x.ndim - 2) + params.b.shape[::2])
    x = x + jax.nn.silu(jnp.einsum("...kd,kde->...ke", x, params.w[:, r]) + bias)
  return jnp.einsum("...kd,kdv->...kv", x, params.unembed).astype(jnp.float32)


def _one_head(params: HeadsParams, k: int, x: jax.Array, previous: jax.Array) -> jax.Array:
  """Sequential head k (static) on hidden states x [N, D] after tokens i32[N] -> f32[N, V]; plain
  2-D products (XLA:CPU runs head_logits' batched einsum on a single head ~7x slower)."""
  x = x.astype(params.w.dtype) + params.embed[previous] @ params.mix[k]
  for r in range(params.w.shape[1]):
    x = x + jax.nn.silu(x @ params.w[k, r] + params.b[k, r][None, :])
  return (x @ params.unembed[k]).astype(jnp.float32)


def draft_tree(params: HeadsParams, hidden: jax.Array, root: jax.Array, choices) -> jax.Array:
  """The tokens i32[B, N] of the tree nodes `choices` (sorted, checked) drafted from the hidden
  state f32[B, D] that predicted the root token i32[B]. Parallel heads rank once; sequential
  heads run depth by depth, each parent's token feeding the head that drafts its children."""
  if not params.sequential:
    return ranked_tokens(head_logits(params, hidden), choices)
  index = {path: i for i, path in enumerate(choices)}
  tokens = [None] * len(choices)
  batch = hidden.shape[0]
  for depth in range(1, max(len(p) for p in choices) + 1):
    level = [p for p in choices if len(p) == depth]
    parents = sorted({p[:-1] for p in level})
    parent_tokens = jnp.stack([root if not q else tokens[index[q]] for q in parents], axis=1)
    inputs = jnp.repeat(hidden, len(parents), axis=0)  # [B * parents, D], row-major like tokens.
    logits = _one_head(params, depth - 1, inputs, parent_tokens.reshape(-1))
    _, ranked = jax.lax.top_k(logits.reshape(batch, len(parents), -1), 1 + max(p[-1] for p in level))
    for p in level:
      tokens[index[p]] = ranked[:, parents.index(p[:-1]), p[-1]].astype(jnp.int32)
  return jnp.stack(tokens, axis=1)


def chain(depth: int) -> tuple[tuple[int, ...], ...]:
  """The choices of a chain: every head's top-1 token."""
  return tuple((0,) * d for d in range(1, depth + 1))


def check_choices(choices, num_heads: int | None = None) -> tuple[tuple[int, ...], ...]:
  """`choices` as a tuple of rank paths in tree order (shorter first), after checking that it is
  non-empty, that every path's prefix is also a node and (given `num_heads`) that no path is
  deeper than the heads."""
  if not isinstance(choices, (tuple, list)) or not choices:
    raise ValueError(f"choices must be a non-empty sequence of rank paths such as ((0,), (0, 0)), "
                     f"got {choices!r}")
  paths = []
  for path in choices:
    if (not isinstance(path, (tuple, list)) or not path
        or not all(isinstance(r, (int, np.integer)) and not isinstance(r, bool) and r >= 0
                   for r in path)):
      raise ValueError(f"each choice must be a non-empty path of ranks >= 0, got {path!r}")
    paths.append(tuple(int(r) for r in path))
  known = set(paths)
  if len(known) != len(paths):
    raise ValueError(f"choices repeat a path: {choices!r}")
  for path in paths:
    if len(path) > 1 and path[:-1] not in known:
      raise ValueError(f"choice {path} has no parent {path[:-1]} among the choices")
  depth = max(len(p) for p in paths)
  if num_heads is not None and depth > num_heads:
    raise ValueError(f"the tree is {depth} deep but there are only {num_heads} heads: "
                     f"a node at depth d reads head d")
  return tuple(sorted(paths, key=lambda p: (len(p), p)))


def sparse_tree(accuracy, size: int) -> tuple[tuple[int, ...], ...]:
  """The `size`-node tree with the most expected accepted drafts (Medusa's construction),
  reading `accuracy` f[K, R] (how often head k's rank-r token is the right one, measured on a
  calibration split) as independent: a path's chance is the product along it, and the tree's
  expected accepted length is the sum over its nodes. A child never beats its parent, so adding
  the best node whose parent is in the tree, one at a time, is optimal."""
  accuracy = np.asarray(accuracy, np.float64)
  if accuracy.ndim != 2 or not accuracy.size or not np.all((accuracy >= 0) & (accuracy <= 1)):
    raise ValueError(f"accuracy must be f[heads, ranks] in [0, 1], got shape {accuracy.shape}")
  if not isinstance(size, int) or size < 1:
    raise ValueError(f"a tree needs size >= 1 nodes, got {size!r}")
  heads, ranks = accuracy.shape
  chosen: dict[tuple[int, ...], float] = {}
  frontier = {(r,): accuracy[0, r] for r in range(ranks)}
  while len(chosen) < size and frontier:
    path = max(frontier, key=lambda p: (frontier[p], -len(p), tuple(-r for r in p)))
    chosen[path] = frontier.pop(path)
    if len(path) < heads:
      frontier.update({path + (r,): chosen[path] * accuracy[len(path), r] for r in range(ranks)})
  return check_choices(tuple(chosen))


def expected_accepted(accuracy, choices) -> float:
  """The drafts a tree is expected to get accepted per step under `sparse_tree`'s model."""
  accuracy = np.asarray(accuracy, np.float64)
  return float(sum(np.prod([accuracy[d, r] for d, r in enumerate(p)]) for p in choices))


def choices_tree(choices) -> Tree:
  """The `Tree` of sorted, checked `choices` (node i + 1 is choices[i])."""
  index = {path: i + 1 for i, path in enumerate(choices)}
  return Tree(tuple(index.get(path[:-1], 0) for path in choices))


@register_cli("drafter", "heads", order=50, help="trained Medusa heads with their tree",
              source=Source("DRAFTER", "drafter", "the heads' directory", "zoo:pycode-mtp",
                            noun="Medusa heads"))
@struct.dataclass
class Heads(Drafter):
  """Medusa heads over the target (`params` as `head_logits`), drafting the tree `choices`
  (default: a chain through every head). Load trained heads with `jaxdec.load_drafter`; train
  them with `jaxdec.train.mtp`."""

  params: HeadsParams
  choices: tuple = struct.field(pytree_node=False, default=None)
  forwards = 0

  def __post_init__(self):
    if not isinstance(self.params, HeadsParams):
      raise TypeError(f"Heads.params must be a HeadsParams, got {type(self.params).__name__}")
    if (self.params.mix is None) != (self.params.embed is None):
      raise TypeError("sequential heads need both mix and embed (Medusa's heads neither)")
    choices = chain(self.num_heads) if self.choices is None else self.choices
    choices = check_choices(choices, self.num_heads)
    if max(len(p) for p in choices) < self.num_heads:
      raise ValueError(f"the tree reaches depth {max(len(p) for p in choices)} but there are "
                       f"{self.num_heads} heads; use .with_choices(choices) to keep only the heads "
                       f"it reads")
    object.__setattr__(self, "choices", choices)

  @property
  def num_heads(self) -> int:
    return int(self.params.w.shape[0])

  @property
  def tree(self) -> Tree:
    return choices_tree(self.choices)

  def with_choices(self, choices) -> "Heads":
    """The same heads drafting another tree; heads deeper than it are dropped."""
    depth = max(len(p) for p in check_choices(choices, self.num_heads))
    cut = lambda x: None if x is None else x[:depth]
    p = self.params
    params = p.replace(w=cut(p.w), b=cut(p.b), unembed=cut(p.unembed), mix=cut(p.mix))
    return Heads(params, tuple(choices))

  def check(self, target: ModelConfig) -> None:
    _, hidden, vocab = self.params.unembed.shape
    if (hidden, vocab) != (target.hidden_size, target.vocab_size):
      raise ValueError(f"heads read hidden size {hidden} and emit {vocab} ids; the target has "
                       f"hidden size {target.hidden_size} and {target.vocab_size} ids")
    if not target.is_causal:
      raise ValueError(f"Medusa heads draft for an autoregressive target, got attention "
                       f"{target.attention}")

  def hidden_layers(self, target: ModelConfig) -> tuple[int, ...]:
    return (target.num_layers,)  # The final-normed state.

  def propose(self, state, ctx: Context):
    return draft_from(self.params, ctx, self.choices), state


def draft_from(params: HeadsParams, ctx: Context, choices) -> Draft:
  """Heads' drafts of the tree `choices` after the committed sequence in `ctx`."""
  hidden = gather_hidden(ctx.hidden[0], ctx.total - 2)
  root = jnp.take_along_axis(ctx.seq, (ctx.total - 1)[:, None], 1)[:, 0]
  return Draft(tokens=draft_tree(params, hidden, root, choices),
               valid=jnp.ones((hidden.shape[0], len(choices)), bool))


def gather_hidden(hidden: jax.Array, index: jax.Array) -> jax.Array:
  """hidden [B, S, D] at i32[B] -> [B, D]."""
  return jnp.take_along_axis(hidden, jnp.clip(index, 0, hidden.shape[1] - 1)[:, None, None], 1)[:, 0]


def ranked_tokens(logits: jax.Array, choices) -> jax.Array:
  """Heads' logits f32[B, K, V] -> the tokens of the tree nodes `choices`: i32[B, N]."""
  width = 1 + max(p[-1] for p in choices)
  _, ranked = jax.lax.top_k(logits, width)  # [B, K, width]
  head = np.array([len(p) - 1 for p in choices])
  rank = np.array([p[-1] for p in choices])
  return ranked[:, head, rank].astype(jnp.int32)
