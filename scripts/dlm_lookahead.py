"""How many tokens per forward can threshold decoding hope for? Confidence at the decoding frontier.

Threshold rules (Fast-dLLM) commit every masked position whose top-1 probability passes tau, so
tokens per forward are set by how often the tokens *after* the frontier pass it. Prints, on stdlib
validation windows with a clean prefix followed by masks:
  1. each diffusion model's share of positions with confidence > tau at offsets 0..7 from the
     frontier, and its accuracy there;
  2. what a diffusion model that knew exactly what the AR model knows could reach at offset 1:
     the AR model marginalised over its top-k guesses for the frontier token. The probability
     mass outside the top-k is counted as favourably as possible, so the bound is an upper one.

Usage: python scripts/dlm_lookahead.py [DLM ...]   (default zoo:pycode-dlm; AR model zoo:pycode-ar)
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np

import jaxdec
from jaxdec import corpus

TAU, WINDOWS, LENGTH, PREFIX, TOP_K = 0.9, 64, 200, 160, 16


def probs(model, tokens):
  return jax.nn.softmax(jaxdec.forward(model, np.asarray(tokens, np.int32)), axis=-1)


def diffusion_lookahead(path: str, rows: np.ndarray) -> None:
  """Share of confident positions, and accuracy, at offsets 0-7 past the frontier of `path`."""
  model = jaxdec.load(path, dtype=jnp.float32)
  canvas = np.where(np.arange(LENGTH)[None] >= PREFIX, model.config.tokens.mask, rows)
  p = probs(model, canvas)[:, PREFIX:PREFIX + 8]
  confident = np.asarray(p.max(-1) > TAU).mean(0)
  accuracy = np.asarray(jnp.argmax(p, -1) == rows[:, PREFIX:PREFIX + 8]).mean(0)
  print(f"{path}: share > {TAU} at offsets 0-7 {np.round(confident, 2)}; accuracy {np.round(accuracy, 2)}")


def ar_bound(rows: np.ndarray) -> None:
  """The offset-1 confidence a diffusion model with the AR model's knowledge could reach."""
  ar = jaxdec.load("zoo:pycode-ar", dtype=jnp.float32)
  frontier, after = [], []
  for row in rows[:12]:
    p = np.asarray(probs(ar, row[None]))[0]  # p[j]: the law of token j + 1.
    for i in range(100, 150):  # The frontier is token i; offset 1 is token i + 1.
      guesses = np.argsort(-p[i - 1])[:TOP_K]
      variants = np.repeat(row[None, :i + 1], TOP_K, axis=0)
      variants[:, i] = guesses
      marginal = p[i - 1, guesses] @ np.asarray(probs(ar, variants))[:, i]
      frontier.append(p[i - 1].max())
      after.append(marginal.max() + 1.0 - p[i - 1, guesses].sum())
  print(f"zoo:pycode-ar: share > {TAU} at the frontier {np.mean(np.array(frontier) > TAU):.2f}; "
        f"at offset 1 for a diffusion model with its knowledge, at most {np.mean(np.array(after) > TAU):.2f}")


def main(argv=None) -> None:
  paths = (sys.argv[1:] if argv is None else argv) or ["zoo:pycode-dlm"]
  tokenizer = jaxdec.load_tokenizer("zoo:pycode-ar")
  rows = corpus.fixed_windows(corpus.token_stream("validation", tokenizer), WINDOWS, LENGTH)
  for path in paths:
    diffusion_lookahead(path, rows)
  ar_bound(rows)


if __name__ == "__main__":
  main()
