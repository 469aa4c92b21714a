"""Bits per byte of held-out text: exact next-token NLL for AR models, the masked-diffusion ELBO
bound for bidirectional ones. Each document is [BOS] + tokens; its EOS is not scored."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxdec.decoding import positions
from jaxdec.model import BlockCausal, Model, ModelConfig, forward
from jaxdec.train.objectives import BlockDiffusion, MaskedDiffusion

def eval_window(path: str, config: ModelConfig) -> int:
  """The window `jaxdec eval` uses for the model at `path`: the window its recipe evaluated with
  (its zoo.json metadata: eval_seq_len, else seq_len), so figures match the recorded ones; else
  the model's own context length, max_position_embeddings (the most context it can use)."""
  from jaxdec import io, zoo

  recipe = zoo.metadata(io.resolve(path)).get("recipe", {})
  window = recipe.get("eval_seq_len") or recipe.get("seq_len")
  if isinstance(window, int) and 2 <= window <= config.max_position_embeddings:
    return window
  return config.max_position_embeddings


def _windows(docs: list[np.ndarray], length: int, overlap: int) -> tuple[np.ndarray, np.ndarray]:
  """Cut each doc into windows of `length` tokens that share `overlap` tokens with the previous
  one; returns (i32[N, length], valid bool[N, length])."""
  rows, valid = [], []
  for ids in docs:
    start = 0
    while True:
      piece = ids[start: start + length]
      row = np.zeros(length, np.int32)
      row[: len(piece)] = piece
      rows.append(row)
      valid.append(np.arange(length) < len(piece))
      if start + length >= len(ids):
        break
      start += length - overlap
  return np.stack(rows), np.stack(valid)


@functools.partial(jax.jit, static_argnames=("config",))
def _ar_nll(params, tokens, valid, *, config: ModelConfig):
  inputs = tokens[:, :-1]
  logits, _, _ = forward(params, inputs, positions(*inputs.shape), config=config)
  nll = optax.softmax_cross_entropy_with_integer_labels(logits, tokens[:, 1:])
  return jnp.sum(jnp.where(valid[:, 1:], nll, 0.0))


@functools.partial(jax.jit, static_argnames=("config",))
def _dlm_nll(params, tokens, valid, key, t, *, config: ModelConfig):
  """Sum over the batch of the 1/p-weighted masked CE at ratio t (padding never masked; a
  shifted model's token i scored by output i - 1, its first token by none); a block-causal
  model's block by block, each given the clean blocks before it."""
  objective = BlockDiffusion() if isinstance(config.attention, BlockCausal) else MaskedDiffusion()
  per_seq, _, _ = objective.weighted_nll(params, tokens, key, config,
                                         t=jnp.full((tokens.shape[0],), t), scored=valid)
  return jnp.sum(per_seq)


def bits_per_byte(model: Model, tokenizer, texts: list[str], seq_len: int = 256, batch: int = 16,
                  diffusion_levels: int = 8, seed: int = 0, progress: bool = False,
                  desc: str = "scoring") -> dict:
  """{'bits_per_byte', 'nats_per_token', 'tokens', 'bytes'} over `texts`.

  AR: windows overlap by one token, so every token but the first (BOS) of a document is scored
  with up to `seq_len - 1` tokens of context; windows are cut to the longest document when all
  are shorter (the same scores, less padding to run). Bidirectional: non-overlapping windows, the
  ELBO estimated at `diffusion_levels` stratified masking ratios (a fixed-seed Monte Carlo
  bound). `progress` shows a tqdm bar over the windows, named `desc`.
  """
  from tqdm.auto import tqdm

  if not texts:
    raise ValueError("bits_per_byte needs at least one text, got none")
  if tokenizer.bos_id is None:
    raise ValueError("bits_per_byte scores documents as [BOS] text: the tokenizer has no BOS")
  docs = [np.asarray(tokenizer.encode(t), np.int32) for t in texts]  # [BOS] + the text's tokens.
  n_bytes = sum(len(t.encode("utf-8")) for t in texts)
  n_tokens = sum(len(d) - 1 for d in docs)
  causal = model.config.is_causal
  if causal:  # Causal only: padding after a document changes none of its scores.
    seq_len = max(2, min(seq_len, max(len(d) for d in docs)))
  tokens, valid = _windows(docs, seq_len, overlap=1 if causal else 0)
  count = len(tokens)
  bar = tqdm(total=count, desc=desc, unit="window", disable=not progress)
  pad = (-len(tokens)) % batch
  tokens = np.concatenate([tokens, np.zeros((pad, seq_len), np.int32)])
  valid = np.concatenate([valid, np.zeros((pad, seq_len), bool)])
  total = 0.0
  for i in range(0, len(tokens), batch):
    tb, vb = jnp.asarray(tokens[i: i + batch]), jnp.asarray(valid[i: i + batch])
    if causal:
      total += float(_ar_nll(model.params, tb, vb, config=model.config))
    else:
      vb = vb & (tb != tokenizer.bos_id)  # BOS is given, never predicted.
      levels = [float(_dlm_nll(model.params, tb, vb, jax.random.key(seed * 100003 + i * 31 + j),
                               (j + 0.5) / diffusion_levels, config=model.config))
                for j in range(diffusion_levels)]
      total += float(np.mean(levels))
    bar.update(min(batch, count - i))
  bar.close()
  return {"bits_per_byte": total / math.log(2) / n_bytes, "nats_per_token": total / n_tokens,
          "tokens": n_tokens, "bytes": n_bytes}
