"""A small draft model proposes a chain autoregressively (Leviathan et al.; Chen et al.)."""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
from flax import struct

from jaxdec.decoding import prefill
from jaxdec.model import KVCache, Model, ModelConfig, forward
from jaxdec.plugins import Param, Source, register_cli
from jaxdec.sampling import sample_tokens
from jaxdec.spec.drafter import Context, Drafter, check_positive, gather
from jaxdec.spec.tree import Tree
from jaxdec.spec.verify import DRAFT_TAG, Draft, target_probs


def require_model(what: str, model) -> None:
  """A drafter's model must be a loaded Model: a path is a TypeError naming `what` and the fix
  (drafters sit below `jaxdec.io` and never read disks)."""
  if isinstance(model, Model):
    return
  hint = (f"; load it first: jaxdec.load({model!r})" if isinstance(model, (str, os.PathLike))
          else "")
  raise TypeError(f"{what} must be a jaxdec Model (from jaxdec.load), got "
                  f"{type(model).__name__}{hint}")


@register_cli("drafter", "draft", order=30, help="a small AR model with the target's tokenizer",
              params=(Param("num_tokens", int, "draft tokens a step"),),
              source=Source("MODEL", "model", "the draft model", "zoo:pycode-draft"))
@struct.dataclass
class DraftModel(Drafter):
  """A smaller AR model with the target's vocabulary drafts `num_tokens` tokens autoregressively
  (sampled with the target's sampling settings, so `Exact` verification is lossless). `model` is
  a Model: `DraftModel(jaxdec.load("zoo:pycode-draft"))` (drafters never read disks).

  Its KV cache is resynchronised each step by re-feeding the last two committed tokens at
  length total - 2: whatever was accepted, rejected or never fed, the cache then holds exactly
  the committed sequence (a re-fed token rewrites identical K/V).
  """

  model: Model
  num_tokens: int = struct.field(pytree_node=False, default=4)

  def __post_init__(self):
    require_model("DraftModel.model", self.model)
    check_positive("num_tokens", self.num_tokens)

  @property
  def tree(self) -> Tree:
    return Tree.chain(self.num_tokens)

  @property
  def forwards(self) -> int:
    return self.num_tokens

  def check(self, target: ModelConfig) -> None:
    if self.model.config.vocab_size != target.vocab_size:
      raise ValueError(f"draft vocabulary {self.model.config.vocab_size} != target vocabulary "
                       f"{target.vocab_size}: drafter and target must share a tokenizer")
    if not self.model.config.is_causal:
      raise ValueError(f"the draft model must be causal (autoregressive), got attention "
                       f"{self.model.config.attention}")

  def init(self, prompt, prompt_lengths, capacity, hidden):
    params, config = self.model.params, self.model.config
    cache = KVCache.init(config, prompt.shape[0], capacity, dtype=params.embed.dtype)
    return prefill(params, prompt, prompt_lengths, cache, config=config)[1]

  def propose(self, state: KVCache, ctx: Context):
    params, config = self.model.params, self.model.config
    total = ctx.total
    key = None if ctx.key is None else jax.random.fold_in(ctx.key, DRAFT_TAG)
    index = total[:, None] + jnp.array([[-2, -1]], jnp.int32)
    logits, _, cache = forward(params, gather(ctx.seq, index), index, state.with_length(total - 2),
                               config=config)

    def draw(logit, position):
      token = sample_tokens(logit, ctx.sampling, key, ctx.rows, position)
      probs = None if ctx.sampling is None else target_probs(logit[:, None], ctx.sampling)[:, 0]
      return token, probs

    def step(carry, i):
      logit, cache = carry
      token, probs = draw(logit, total + i)
      logits, _, cache = forward(params, token[:, None], (total + i)[:, None], cache, config=config)
      return (logits[:, 0], cache), (token, probs)

    (logit, cache), (tokens, probs) = jax.lax.scan(
        step, (logits[:, 1], cache), jnp.arange(self.num_tokens - 1, dtype=jnp.int32))
    last, last_probs = draw(logit, total + self.num_tokens - 1)
    tokens = jnp.concatenate([tokens.T, last[:, None]], axis=1)
    if probs is not None:
      probs = jnp.concatenate([jnp.swapaxes(probs, 0, 1), last_probs[:, None]], axis=1)
    return Draft(tokens=tokens, valid=jnp.ones(tokens.shape, bool), probs=probs), cache
