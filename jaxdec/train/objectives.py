"""Training objectives: pluggable pytree dataclasses with one `loss` signature.

`loss(params, tokens, key, *, part, target, scored, step) -> (scalar loss, metrics)`: `params` are the
trainable part's (the only thing differentiated), tokens is i32[B, L], `key` drives any
corruption (a pure function of the step, so resumed runs are exact), `part` is the static
`Trainable` (see `jaxdec.train.trainable`), `target` the frozen target Model or None, and
`scored` bool[B, L] or None (all): the tokens the loss is about (`jaxdec.corpus.Packed` leaves
prompts and padding out), and `step` i32[] the optimizer step (traced; None outside the
Trainer) for objectives with a curriculum (K-Forcing's growing window). Settings
are static fields, so an objective is a jit argument. The objectives here train a whole decoder
(`FullModel`): they read `part.config`.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import optax

from flax import struct

from jaxdec.decoding import positions
from jaxdec.model import BlockCausal, ModelConfig, forward


def _positions(tokens: jax.Array) -> jax.Array:
  return positions(*tokens.shape)


def _mean(values: jax.Array, scored: jax.Array | None) -> jax.Array:
  """Mean of f32[B, L] values over the scored positions (all when `scored` is None)."""
  if scored is None:
    return jnp.mean(values)
  return jnp.sum(jnp.where(scored, values, 0.0)) / jnp.maximum(jnp.sum(scored), 1)


@struct.dataclass
class NextToken:
  """Autoregressive cross-entropy: position i predicts token i + 1 (mean nats per token)."""

  def loss(self, params, tokens, key, *, part, target=None, scored=None, step=None):
    del key, target
    config = part.config
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    logits, _, _ = forward(params, inputs, None, config=config)
    nll = _mean(optax.softmax_cross_entropy_with_integer_labels(logits, targets),
                None if scored is None else scored[:, 1:])
    return nll, {"nll": nll}


@struct.dataclass
class MaskedDiffusion:
  """LLaDA's masked-diffusion objective: per sequence a ratio t ~ U(0, 1), each token masked
  with probability p = (1 - eps) t + eps, and cross-entropy on masked positions weighted by 1/p,
  summed and divided by B * L. The model is bidirectional and unshifted: the prediction for
  position i comes from output i. Its expectation upper-bounds the NLL (the ELBO). With
  `scored`, only scored tokens are ever masked (the rest, a prompt, stays clean: LLaDA's SFT)
  and the sum is divided by the number of scored tokens."""

  eps: float = struct.field(pytree_node=False, default=1e-3)
  # Fraction of sequences whose random-length prefix is never masked (LLaDA's SFT layout: a
  # clean prompt followed by a masked response), matching what decoding sees: a visible prefix
  # and a masked suffix.
  prefix_fraction: float = struct.field(pytree_node=False, default=0.0)
  # Leading positions that are never masked: the prompt of [prompt | response] rows
  # (`jaxdec.train.distill.TeacherSamples`), LLaDA's SFT loss.
  clean_prefix: int = struct.field(pytree_node=False, default=0)
  # dParallel's certainty forcing: adds this weight x the mean entropy of the predictions at
  # masked positions whose argmax is already right, so the model becomes confident where it is
  # correct and a threshold scheduler can commit more tokens per forward. On pycode-dlm (300
  # steps on stdlib windows) it also made the model confident about repetitions: weight 0.2 gave
  # 1.5 tokens per forward at threshold 0.9 (from 1.1) but greedy output that loops.
  certainty_weight: float = struct.field(pytree_node=False, default=0.0)

  # Semi-autoregressive decoding's canvas: with `block` > 0 the rows that keep a clean prefix
  # (`prefix_fraction`) see, after it, `block` positions masked at ratio t and every later
  # position masked (as the masks of later blocks are while one block is decoded), and only the
  # block is scored. Without it a masked rest is a rare draw (t near 1), and a model trained so
  # mispredicts even the token right after a clean prefix when hundreds of masks follow it.
  block: int = struct.field(pytree_node=False, default=0)
  # With `block`: how many positions after the block the model sees (None: all, masked; k: the
  # first k, the rest hidden from attention), to match `diffusion_generate(visible_suffix=k)`.
  visible_suffix: int | None = struct.field(pytree_node=False, default=None)

  def __post_init__(self):
    if not isinstance(self.block, int) or self.block < 0:
      raise ValueError(f"MaskedDiffusion.block must be an int >= 0, got {self.block!r}")
    if self.visible_suffix is not None and (
        isinstance(self.visible_suffix, bool) or not isinstance(self.visible_suffix, int)
        or self.visible_suffix < 0 or not self.block):
      raise ValueError(f"MaskedDiffusion.visible_suffix must be None or an int >= 0 with a block, "
                       f"got {self.visible_suffix!r} (block={self.block})")
    if self.block and not self.prefix_fraction:
      raise ValueError("MaskedDiffusion.block lays out the rows that keep a clean prefix; set "
                       f"prefix_fraction > 0 (got {self.prefix_fraction})")

  def corrupt(self, tokens, key, mask_id: int, t=None, scored=None):
    """(noisy tokens, masked bool[B, L]: the masked positions the loss scores, p_mask f32[B],
    visible i32[B]: positions the model sees, the rest hidden); `t` f32[B] overrides the random
    ratio; positions not `scored` are never masked (except after a `block`, where all are)."""
    t_key, m_key, p_key, l_key = jax.random.split(key, 4)
    batch, length = tokens.shape
    if t is None:
      t = jax.random.uniform(t_key, (batch,))
    p_mask = (1.0 - self.eps) * t + self.eps
    masked = jax.random.uniform(m_key, tokens.shape) < p_mask[:, None]
    where = jnp.arange(length)[None, :]
    beyond = jnp.zeros(tokens.shape, bool)
    visible = jnp.full((batch,), length, jnp.int32)
    if self.prefix_fraction > 0:
      keep = jax.random.uniform(p_key, (batch,)) < self.prefix_fraction
      prefix = jax.random.randint(l_key, (batch,), 0, length)
      masked &= ~(keep[:, None] & (where < prefix[:, None]))
      if self.block:
        beyond = keep[:, None] & (where >= (prefix + self.block)[:, None])
        if self.visible_suffix is not None:
          visible = jnp.where(keep, jnp.minimum(prefix + self.block + self.visible_suffix,
                                                length), length)
    masked &= where >= self.clean_prefix
    beyond &= where >= self.clean_prefix
    if scored is not None:
      masked &= scored
    masked &= ~beyond
    return jnp.where(masked | beyond, mask_id, tokens), masked, p_mask, visible

  def weighted_nll(self, params, tokens, key, config: ModelConfig, t=None, scored=None):
    """(f32[B]: sum over masked positions of CE / p_mask per sequence, masked, logits aligned
    with the tokens they predict). A shifted (Dream) config predicts token i at output i - 1,
    which keeps an AR initialisation's next-token head in use."""
    if config.tokens.mask is None or config.is_causal:
      raise ValueError("masked diffusion needs a bidirectional config with tokens.mask set, got "
                       f"causal={config.is_causal}, tokens.mask={config.tokens.mask}")
    if config.embeddings.shifted_logits:  # Dream: output i - 1 predicts token i; 0 has none.
      first = jnp.arange(tokens.shape[1])[None, :] > 0
      scored = first if scored is None else scored & first
    noisy, masked, p_mask, visible = self.corrupt(tokens, key, config.tokens.mask, t, scored)
    logits, _, _ = forward(params, noisy, None, config=config, valid_lengths=visible)
    if config.embeddings.shifted_logits:
      logits = jnp.concatenate([logits[:, :1], logits[:, :-1]], axis=1)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, tokens)
    return jnp.sum(jnp.where(masked, nll, 0.0), axis=1) / p_mask, masked, logits

  def loss(self, params, tokens, key, *, part, target=None, scored=None, step=None):
    del target
    per_seq, masked, logits = self.weighted_nll(params, tokens, key, part.config, scored=scored)
    loss = jnp.sum(per_seq) / (tokens.size if scored is None else jnp.maximum(jnp.sum(scored), 1))
    metrics = {"elbo_nll": loss, "masked_frac": jnp.mean(masked.astype(jnp.float32))}
    if self.certainty_weight:
      logp = jax.nn.log_softmax(logits, axis=-1)
      entropy = -jnp.sum(jnp.exp(logp) * logp, axis=-1)
      correct = masked & (jnp.argmax(logits, axis=-1) == tokens)
      certainty = jnp.sum(jnp.where(correct, entropy, 0.0)) / jnp.maximum(jnp.sum(correct), 1)
      loss = loss + self.certainty_weight * certainty
      metrics["correct_entropy"] = certainty
    return loss, metrics


def block_ids(scored: jax.Array, size: int) -> jax.Array:
  """i32[B, L], non-decreasing along each row: the block of every position, for a model whose
  attention is `BlockCausal(size)`. Blocks are counted from the first scored token of each
  completion, where decoding starts its first block; the prompt before it is cut into blocks
  backwards from there, as positions aligned to that start cut it (see `diffusion_generate`)."""
  length = scored.shape[1]
  where = jnp.arange(length, dtype=jnp.int32)[None, :]
  starts = scored & ~jnp.pad(scored[:, :-1], ((0, 0), (1, 0)))
  last = jax.lax.cummax(jnp.where(starts, where, -1), axis=1)
  following = jax.lax.cummin(jnp.where(starts, where, length), axis=1, reverse=True)
  anchor = jnp.where(scored, last, following)  # The start of the completion a position belongs to.
  doc = jnp.take_along_axis(jnp.cumsum(starts, axis=1, dtype=jnp.int32),
                            jnp.minimum(anchor, length - 1), axis=1)
  doc = jnp.where(anchor < length, doc, doc + 1)  # Trailing positions: after the last completion.
  span = 2 * (length // size + 2)  # More blocks than any one document's offsets reach.
  return doc * span + jnp.floor_divide(where - anchor, size)


@struct.dataclass
class BlockDiffusion:
  """Block diffusion (BD3-LM; Fast-dLLM v2's adaptation of an AR model) for a `BlockCausal` model:
  bidirectional inside a block, causal across blocks, so decoding a block never revisits earlier
  ones and their KV cache is exact. A row runs once as [clean | noisy] (2L tokens, RoPE positions
  repeated): clean tokens attend block-causally, as a decoded prefix does; each noisy block
  attends to the clean blocks before it and to itself. So every block of every row is trained in
  one forward (a `MaskedDiffusion(block=...)` row trains one block). Each block is masked at its
  own ratio t ~ U(0, 1) (p = (1 - eps) t + eps, CE weighted 1/p: the sum over blocks of each
  block's ELBO), only scored tokens are masked, and the loss is divided by the scored count.
  Shifted (Dream) configs predict token i from output i - 1: inside a block the noisy one, at a
  block's first token the clean one, i.e. the AR next-token prediction, as when decoding."""

  eps: float = struct.field(pytree_node=False, default=1e-3)
  # Fraction of blocks masked only from a random offset on (at the block's ratio), as a block
  # looks when decoding commits mostly left to right: the tokens before the cut are all given.
  # Those blocks' terms bound the NLL of the tokens after the cut given the rest, so the loss is
  # no longer the data's ELBO.
  suffix_fraction: float = struct.field(pytree_node=False, default=0.0)
  # Fast-dLLM v2's complementary masks: every row also runs with the scored tokens its mask left
  # given masked instead (weighted by 1 / (1 - p)), so each scored token is trained once per
  # step whatever the ratio; a step costs two rows' forwards per row.
  complementary: bool = struct.field(pytree_node=False, default=False)
  # Weight of the clean stream's next-token loss on the scored tokens. With
  # `BlockCausal(causal_given=True)` and shifted logits the clean stream is the causal model that
  # decodes a block left to right and proposes each block's first token; this term keeps it the
  # AR model it was initialised from while the masks learn to read it (it costs no forward).
  ar_weight: float = struct.field(pytree_node=False, default=0.0)
  # Fraction of blocks (besides the suffix ones) whose given tokens are those the model itself is
  # most confident of with the whole block masked (one extra forward, no gradient), as a block
  # looks part way through confidence-ordered decoding: the predictable tokens (a template's
  # words, its punctuation) given, the hard ones (the digits they frame) masked. Random masks
  # rarely frame a masked token that way, and a model trained only on them copies a nearby digit
  # with confidence when decoding reaches it. Not an ELBO either.
  confidence_fraction: float = struct.field(pytree_node=False, default=0.0)
  # Token-to-token editing training (LLaDA2.1's T2T): this fraction of each row's given scored
  # tokens (those the mask left) is replaced by random tokens in the noisy stream, and the model
  # is scored on recovering the true token there too (CE weighted `edit_weight`, not part of the
  # ELBO), so that a sampler may revise committed tokens (`jaxdec.diffusion.Editing`).
  edit_fraction: float = struct.field(pytree_node=False, default=0.0)
  edit_weight: float = struct.field(pytree_node=False, default=1.0)
  # Fraction of blocks trained on a stale predecessor (for wavefront decoding such as
  # `diffusion.FlowBlock`, after D2F): the noisy block reads the previous block's *noisy* copy
  # (its masks and edits in place) instead of the clean one, as a block drafted while the one
  # before it is still being decoded does. A run of n stale blocks after a fresh one is a
  # wavefront of n + 1 blocks: each reads the noisy copies from the fresh block on. Each block
  # is drawn apart, its predecessor's mask ratio included (a wavefront's gate would bound it;
  # ours does not).
  stale_fraction: float = struct.field(pytree_node=False, default=0.0)

  def weighted_nll(self, params, tokens, key, config: ModelConfig, t=None, scored=None):
    """(f32[R]: sum over masked positions of CE / p_mask, masked bool[R, L], logits aligned with
    the tokens they predict), R = B rows, or 2B with `complementary` (the rows, then the same rows
    with the complementary masks); `t` f32[B] fixes every block's ratio (an ELBO level)."""
    return self._run(params, tokens, key, config, t, scored)[:3]

  def _check(self, config: ModelConfig) -> None:
    """Raise ValueError naming a config or setting this objective cannot train."""
    if not isinstance(config.attention, BlockCausal) or config.tokens.mask is None:
      raise ValueError("BlockDiffusion trains a BlockCausal(block_size) config with tokens.mask "
                       f"set, got attention={config.attention!r}, tokens.mask={config.tokens.mask}")
    if self.ar_weight and not config.has_causal_stream:
      raise ValueError("BlockDiffusion.ar_weight needs a clean stream that is causal: "
                       "BlockCausal(causal_given=True) with shifted logits, got "
                       f"attention={config.attention!r}, embeddings.shifted_logits="
                       f"{config.embeddings.shifted_logits}")
    for name in ("edit_fraction", "stale_fraction"):
      if not 0.0 <= getattr(self, name) <= 1.0:
        raise ValueError(f"BlockDiffusion.{name} must lie in [0, 1], got {getattr(self, name)}")
    if not 0.0 <= self.suffix_fraction + self.confidence_fraction <= 1.0:
      raise ValueError("BlockDiffusion's suffix_fraction + confidence_fraction must lie in "
                       f"[0, 1], got {self.suffix_fraction} + {self.confidence_fraction}")

  def _run(self, params, tokens, key, config: ModelConfig, t=None, scored=None):
    """weighted_nll's triple, then f32[B]: the clean stream's next-token CE summed over scored
    tokens (shifted configs; zeros otherwise), the edited positions bool[R, L] and the noisy
    stream's tokens i32[R, L] (masks and edits in place)."""
    self._check(config)
    batch, length = tokens.shape
    scored = jnp.ones(tokens.shape, bool) if scored is None else scored
    blocks = block_ids(scored, config.attention.block_size)
    if config.embeddings.shifted_logits:  # Output i - 1 predicts token i; the first has none.
      scored &= jnp.arange(length)[None, :] > 0
    t_key, m_key, s_key, c_key = jax.random.split(key, 4)
    starts = jnp.diff(blocks, axis=1, prepend=blocks[:, :1] - 1) > 0  # A block's first position.
    # Per-block draws: index a row of draws by the block's rank in the row.
    rank = jnp.cumsum(starts, axis=1) - 1
    per_block = lambda k: jnp.take_along_axis(jax.random.uniform(k, (batch, length)), rank, axis=1)
    if t is None:
      ratio = per_block(t_key)
    else:
      ratio = jnp.broadcast_to(jnp.asarray(t, jnp.float32)[:, None], tokens.shape)
    p_mask = (1.0 - self.eps) * ratio + self.eps
    masked = scored & (jax.random.uniform(m_key, tokens.shape) < p_mask)
    kind = per_block(s_key)  # [0, suffix): suffix blocks, then confidence-ordered, then random.
    if self.suffix_fraction:
      where = jnp.arange(length, dtype=jnp.int32)[None, :]
      first = jax.lax.cummax(jnp.where(starts, where, 0), axis=1)
      cut = jnp.floor(per_block(c_key) * config.attention.block_size).astype(jnp.int32)
      masked &= (kind >= self.suffix_fraction) | (where - first >= cut)
    if self.confidence_fraction:
      _, all_masked = _block_logits(params, tokens, jnp.where(scored, config.tokens.mask, tokens),
                                    blocks, starts, config)
      confidence = jnp.max(jax.nn.softmax(jax.lax.stop_gradient(all_masked)), axis=-1)
      mates = (blocks[:, :, None] == blocks[:, None, :]) & scored[:, None, :]
      surer = jnp.sum(mates & (confidence[:, None, :] > confidence[:, :, None]), axis=-1)
      given = jnp.floor((1.0 - ratio) * jnp.sum(mates, axis=-1))  # The block's surest tokens.
      ordered = (kind >= self.suffix_fraction) & (kind < self.suffix_fraction + self.confidence_fraction)
      masked = jnp.where(ordered, scored & (surer >= given), masked)
    stale = None
    if self.stale_fraction:  # Own key, as editing's: the other draws stay what they were.
      stale = per_block(jax.random.fold_in(key, 2)) < self.stale_fraction
      stale &= blocks > jnp.min(blocks, axis=1, keepdims=True)
    if self.complementary:
      two = lambda a: jnp.concatenate([a, a])
      stale = None if stale is None else two(stale)
      masked = jnp.concatenate([masked, scored & ~masked])
      p_mask = jnp.concatenate([p_mask, jnp.maximum(1.0 - p_mask, self.eps)])
      tokens, blocks, starts, scored = two(tokens), two(blocks), two(starts), two(scored)
    noisy = jnp.where(masked, config.tokens.mask, tokens)
    edited = jnp.zeros_like(masked)
    if self.edit_fraction:  # Own keys: the other draws stay what they were without editing.
      e_key, r_key = jax.random.split(jax.random.fold_in(key, 1))
      edited = scored & ~masked & (jax.random.uniform(e_key, tokens.shape) < self.edit_fraction)
      noise = jax.random.randint(r_key, tokens.shape, 0, config.vocab_size - 1, jnp.int32)
      noise = noise + (noise >= config.tokens.mask).astype(jnp.int32)  # Never the mask.
      noisy = jnp.where(edited, noise, noisy)
    first_noisy = None  # Per noisy token: the first block it reads as a noisy copy.
    if stale is not None:  # The latest block at or before it that is not stale.
      first_noisy = jax.lax.cummax(jnp.where(stale, jnp.min(blocks), blocks), axis=1)
    clean, logits = _block_logits(params, tokens, noisy, blocks, starts, config, first_noisy)
    ar_nll = jnp.zeros((batch,), jnp.float32)
    if self.ar_weight:  # The clean stream's output i - 1 predicts token i.
      clean = jnp.concatenate([clean[:batch, :1], clean[:batch, :-1]], axis=1)
      ce = optax.softmax_cross_entropy_with_integer_labels(clean, tokens[:batch])
      ar_nll = jnp.sum(jnp.where(scored[:batch], ce, 0.0), axis=1)
    nll = optax.softmax_cross_entropy_with_integer_labels(logits, tokens)
    per_seq = jnp.sum(jnp.where(masked, nll / p_mask, 0.0), axis=1)
    if self.edit_fraction:
      per_seq = per_seq + self.edit_weight * jnp.sum(jnp.where(edited, nll, 0.0), axis=1)
    return per_seq, masked, logits, ar_nll, edited, noisy

  def loss(self, params, tokens, key, *, part, target=None, scored=None, step=None):
    del target
    per_seq, masked, _, ar_nll, edited, _ = self._run(params, tokens, key, part.config,
                                                      scored=scored)
    count = tokens.size if scored is None else jnp.maximum(jnp.sum(scored), 1)
    elbo = jnp.sum(per_seq) / (count * (2 if self.complementary else 1))  # Mean of the estimates.
    metrics = {"elbo_nll": elbo, "masked_frac": jnp.mean(masked.astype(jnp.float32))}
    if self.edit_fraction:
      metrics["edited_frac"] = jnp.mean(edited.astype(jnp.float32))
    if not self.ar_weight:
      return elbo, metrics
    ar = jnp.sum(ar_nll) / count
    return elbo + self.ar_weight * ar, {**metrics, "ar_nll": ar}


def _block_logits(params, tokens, noisy, blocks, starts, config: ModelConfig, first_noisy=None):
  """One [clean | noisy] forward of BlockDiffusion's layout: (the clean stream's logits, the
  logits predicting each token as decoding does: the noisy stream's, shifted for shifted configs,
  where a block's first token reads the clean stream's previous output). A noisy token reads the
  clean blocks before its own, or, with `first_noisy` i32[B, L], the clean blocks before
  `first_noisy` and the noisy copies from there to its own (a wavefront of blocks decoded
  together; a block's first token then reads the previous noisy copy's last output)."""
  length = tokens.shape[1]
  q, k = blocks[:, :, None], blocks[:, None, :]
  start = q if first_noisy is None else first_noisy[:, :, None]
  visible = jnp.concatenate([jnp.concatenate([k <= q, jnp.zeros_like(q == k)], axis=2),
                             jnp.concatenate([k < start, (k >= start) & (k <= q)], axis=2)],
                            axis=1)
  pos = _positions(tokens)
  logits, _, _ = forward(params, jnp.concatenate([tokens, noisy], axis=1),
                         jnp.concatenate([pos, pos], axis=1), config=config, tree=visible)
  clean, noisy_logits = logits[:, :length], logits[:, length:]
  if not config.embeddings.shifted_logits:
    return clean, noisy_logits
  shift = lambda a: jnp.concatenate([a[:, :1], a[:, :-1]], axis=1)
  from_clean = starts if first_noisy is None else starts & (first_noisy == blocks)
  return clean, jnp.where(from_clean[..., None], shift(clean), shift(noisy_logits))


@struct.dataclass
class Distill:
  """Distillation of the frozen AR target (the teacher, `TrainConfig.target`) into a (draft)
  student: KL(teacher || student) between their next-token distributions at temperature T
  (DistillSpec). A draft trained this way agrees with its target more often than one trained on
  the data alone, which is what speculative decoding rewards."""

  temperature: float = struct.field(pytree_node=False, default=1.0)

  def loss(self, params, tokens, key, *, part, target=None, scored=None, step=None):
    del key
    config = part.config
    if target is None:
      raise ValueError("Distill needs a frozen teacher: set TrainConfig.target to its path")
    if target.config.vocab_size != config.vocab_size:
      raise ValueError(f"teacher vocabulary {target.config.vocab_size} != student {config.vocab_size}")
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    student, _, _ = forward(params, inputs, None, config=config)
    target_logits, _, _ = forward(target.params, inputs, None, config=target.config)
    t = self.temperature
    teacher_logp = jax.nn.log_softmax(jax.lax.stop_gradient(target_logits) / t, axis=-1)
    student_logp = jax.nn.log_softmax(student / t, axis=-1)
    kl = jnp.sum(jnp.exp(teacher_logp) * (teacher_logp - student_logp), axis=-1)
    nll = optax.softmax_cross_entropy_with_integer_labels(student, targets)
    scored = None if scored is None else scored[:, 1:]
    kl, nll = _mean(kl, scored), _mean(nll, scored)
    return kl * t * t, {"kl": kl, "nll": nll}
