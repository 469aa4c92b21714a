"""SimSD: speculative decoding with a block-diffusion drafter (arXiv 2606.02544).

The drafter is a small block-diffusion model (`BlockCausal(causal_given=True)`, shifted logits:
zoo:gsm-dlm-draft). Each step it puts `num_tokens` masks after the committed sequence and
denoises them in parallel for at most `max_steps` forwards, committing per forward every mask
whose confidence (the top probability) reaches `threshold`, always at least one, and all that
are left at the last forward. The target then verifies the whole draft in one forward, as a
chain, with any verifier: `Greedy` accepts drafts while they equal the target's argmax,
`Exact` is the paper's modified rejection sampling (min(1, p/q), then the residual).

SimSD's reference tokens and step-causal mask give each drafted token, in the target's one
forward, the context it would have had when decoded: the tokens before it. For a target whose
given tokens form a causal LM (`ModelConfig.has_causal_stream`: zoo:gsm-dlm, Fast-dLLM v2's
layout) that mask is the causal mask, so the target verifies as an AR model does and the output
is exactly the target's own greedy block decoding one token per forward, left to right (and
with `Exact`, its sampling in distribution). Targets bidirectional inside a block (SDAR, LLaDA2)
need mask copies in the verify forward: not built (`check` refuses them, as `speculative_generate`
does any non-causal target).

`order` is the draft's commit order (our reading; the release decodes its draft block by
confidence):
- "left_to_right" (default): the masks committed are the leading run that reaches the
  threshold, so every drafted token is drawn given only the tokens before it: the proposal
  distribution `Exact` needs (the decision to commit reads the top probability, never the drawn
  token, so it does not bias the draw).
- "confidence": every mask over the threshold, anywhere in the draft, plus the most confident
  one; a token may then be drafted after tokens to its right, which greedy verification
  handles and exact sampling does not (sampling with it raises).

The draft model's cache holds the committed tokens as given tokens: each step's first forward
re-feeds those committed since the last step (at most num_tokens + 1) ahead of the masks; masks
are hidden keys, so that forward writes exact K/V for the committed tokens whatever the masks.
`forwards` is the bound max_steps; a step stops early once no mask is left in any row.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec.decoding import prefill
from jaxdec.model import KVCache, Model, ModelConfig, forward
from jaxdec.plugins import Param, Source, register_cli
from jaxdec.sampling import sample_tokens
from jaxdec.spec.draft_model import require_model
from jaxdec.spec.drafter import Context, Drafter, check_positive, gather
from jaxdec.spec.tree import Tree
from jaxdec.spec.verify import DRAFT_TAG, Draft, target_probs

ORDERS = ("left_to_right", "confidence")


@struct.dataclass
class SimSDState:
  cache: KVCache  # The draft model's; slots < fed hold committed tokens as given tokens.
  fed: jax.Array  # i32[B]


@register_cli("drafter", "simsd", order=40,
              help="a block-diffusion draft denoising each block, SimSD, for a "
                   "block-diffusion target such as zoo:gsm-dlm",
              params=(Param("num_tokens", int, "draft tokens a step"),),
              source=Source("MODEL", "model", "the block-diffusion draft", "zoo:gsm-dlm-draft"))
@struct.dataclass
class SimSD(Drafter):
  """A block-diffusion draft model denoises `num_tokens` masks per step (module docstring).
  `model` is a Model (`SimSD(jaxdec.load("zoo:gsm-dlm-draft"))`: drafters never read disks);
  `threshold` is traced (a sweep does not recompile)."""

  model: Model
  threshold: jax.Array | float = 0.9
  num_tokens: int = struct.field(pytree_node=False, default=8)
  max_steps: int | None = struct.field(pytree_node=False, default=None)  # None: num_tokens.
  order: str = struct.field(pytree_node=False, default="left_to_right")

  def __post_init__(self):
    require_model("SimSD.model", self.model)
    check_positive("SimSD.num_tokens", self.num_tokens)
    if self.max_steps is not None:
      check_positive("SimSD.max_steps", self.max_steps)
    if self.order not in ORDERS:
      raise ValueError(f"SimSD.order must be one of {ORDERS}, got {self.order!r}")
    if isinstance(self.threshold, (bool, int, float, np.number)):
      object.__setattr__(self, "threshold", np.float32(self.threshold))

  @property
  def tree(self) -> Tree:
    return Tree.chain(self.num_tokens)

  @property
  def steps(self) -> int:
    return self.num_tokens if self.max_steps is None else self.max_steps

  @property
  def forwards(self) -> int:
    return self.steps

  def check(self, target: ModelConfig) -> None:
    draft = self.model.config
    if draft.vocab_size != target.vocab_size:
      raise ValueError(f"draft vocabulary {draft.vocab_size} != target vocabulary "
                       f"{target.vocab_size}: drafter and target must share a tokenizer")
    if not draft.has_causal_stream:
      raise ValueError(f"SimSD's draft must be a block-diffusion model whose given tokens are "
                       f"causal (BlockCausal(causal_given=True), shifted logits, as zoo:gsm-dlm-"
                       f"draft), got attention {draft.attention} with embeddings.shifted_logits="
                       f"{draft.embeddings.shifted_logits}")
    threshold = np.asarray(self.threshold, np.float64)
    if threshold.ndim > 1 or not np.isfinite(threshold).all() or (threshold < 0).any() or (
        threshold > 1).any():
      raise ValueError(f"SimSD.threshold must be in [0, 1] (a scalar or one per row), got "
                       f"{self.threshold!r}")

  def init(self, prompt, prompt_lengths, capacity, hidden):
    params, config = self.model.params, self.model.config
    cache = KVCache.init(config, prompt.shape[0], capacity, dtype=params.embed.dtype)
    cache = prefill(params, prompt, prompt_lengths, cache, config=config)[1]
    return SimSDState(cache=cache, fed=prompt_lengths)

  def propose(self, state: SimSDState, ctx: Context):
    if ctx.sampling is not None and self.order != "left_to_right":
      raise ValueError(f"SimSD(order={self.order!r}) drafts tokens after tokens to their right, "
                       f"which exact sampling cannot verify: sample with order='left_to_right'")
    params, config = self.model.params, self.model.config
    mask_id, n = config.tokens.mask, self.num_tokens
    batch = ctx.seq.shape[0]
    total, fed = ctx.total, state.fed
    key = None if ctx.key is None else jax.random.fold_in(ctx.key, DRAFT_TAG)
    targets = total[:, None] + jnp.arange(n, dtype=jnp.int32)[None, :]  # Positions drafted.
    threshold = jnp.asarray(self.threshold, jnp.float32)
    threshold = threshold[:, None] if threshold.ndim == 1 else threshold

    def decide(logits, window, pending, step):
      """Commit among the `pending` bool[B, n] positions of the window i32[B, n], whose logits
      f32[B, n, V] this forward computed (the mask id is never proposed)."""
      logits = logits.at[..., mask_id].set(-jnp.inf)
      tokens = jax.vmap(lambda lg, pos: sample_tokens(lg, ctx.sampling, key, ctx.rows, pos),
                        in_axes=(1, 1), out_axes=1)(logits, targets)
      confidence = jnp.max(jax.nn.softmax(logits, axis=-1), axis=-1)
      sure = confidence >= threshold
      if self.order == "left_to_right":  # Pending positions follow the committed: a leading run.
        first = jnp.cumsum(pending, axis=1) == 1
        select = pending & (first | (jnp.cumprod(sure | ~pending, axis=1) > 0))
      else:
        best = jnp.argmax(jnp.where(pending, confidence, -1.0), axis=1)
        select = pending & (sure | (jnp.arange(n)[None, :] == best[:, None]))
      select = select | (pending & (step + 1 >= self.steps))
      probs = None if ctx.sampling is None else target_probs(logits, ctx.sampling)
      return jnp.where(select, tokens, window), pending & ~select, select, probs

    # First forward: the tokens committed since the last step, then n masks, from slot `fed`.
    width = 2 * n + 1
    index = fed[:, None] + jnp.arange(width, dtype=jnp.int32)[None, :]
    seen = jnp.where(index < total[:, None], gather(ctx.seq, index), mask_id)
    logits, _, cache = forward(params, seen, index, state.cache.with_length(fed), config=config,
                               valid_lengths=total + n - fed)
    at = (total - 1 - fed)[:, None] + jnp.arange(n, dtype=jnp.int32)[None, :]
    logits = jnp.take_along_axis(logits, at[:, :, None], axis=1)
    masks = jnp.full((batch, n), mask_id, jnp.int32)
    window, pending, _, probs = decide(logits, masks, jnp.ones((batch, n), bool), 0)
    root = gather(ctx.seq, (total - 1)[:, None])
    window_positions = (total - 1)[:, None] + jnp.arange(n + 1, dtype=jnp.int32)[None, :]

    def more(carry):
      step, _, pending, _ = carry
      return (step < self.steps) & jnp.any(pending)

    def denoise(carry):
      step, window, pending, probs = carry
      seen = jnp.concatenate([root, jnp.where(pending, mask_id, window)], axis=1)
      logits, _, _ = forward(params, seen, window_positions, cache.with_length(total - 1),
                             config=config)
      window, pending, select, new_probs = decide(logits[:, :n], window, pending, step)
      if probs is not None:
        probs = jnp.where(select[:, :, None], new_probs, probs)
      return step + 1, window, pending, probs

    _, window, _, probs = jax.lax.while_loop(
        more, denoise, (jnp.ones((), jnp.int32), window, pending, probs))
    draft = Draft(tokens=window, valid=jnp.ones(window.shape, bool), probs=probs)
    return draft, SimSDState(cache=cache, fed=total)
