"""Text in, text out: `complete` encodes prompts, decodes with the method the arguments pick, and
returns completions as strings (streamed to a callback as they grow, when asked)."""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from jaxdec import api
from jaxdec.decoding import DecodeOutput


class TextStream:
  """A `stream` callback that turns each step's token arrays into per-row text pieces, handed to
  `callback(row, piece)`. A row's text is decoded whole each time (a piece is what it gained), so
  multi-byte characters split across tokens come out once complete."""

  def __init__(self, tokenizer, batch: int, callback: Callable[[int, str], None]):
    self.tokenizer, self.callback = tokenizer, callback
    self.ids = [[] for _ in range(batch)]
    self.shown = [""] * batch

  def __call__(self, step_tokens: list[np.ndarray]) -> None:
    for row, new in enumerate(step_tokens):
      if not len(new):
        continue
      self.ids[row] += new.tolist()
      text = self.tokenizer.decode(self.ids[row])
      if text.endswith("\ufffd"):  # An incomplete UTF-8 sequence: wait for its next bytes.
        continue
      piece, self.shown[row] = text[len(self.shown[row]):], text
      if piece:
        self.callback(row, piece)

  def remainder(self, row: int, completion) -> str:
    """What the stream has not shown of a row's final `completion` ids (a trailing partial
    character)."""
    return self.tokenizer.decode(completion)[len(self.shown[row]):]


def cut_at_stop(text: str, stop_strings: Sequence[str] | None) -> str:
  """The text up to the end of its first stop string (the token that completed it may carry more
  characters)."""
  ends = [text.find(s) + len(s) for s in stop_strings or () if s in text]
  return text[: min(ends)] if ends else text


def complete(model, tokenizer, texts: Sequence[str], max_new_tokens: int = 64, *, drafter=None,
             stream: Callable[[int, str], None] | None = None,
             stop_strings: Sequence[str] | None = None, return_output: bool = False, **kwargs):
  """Complete each text of `texts`; returns the completions (not the prompts) as strings.

  The method follows from the arguments: a masked-diffusion model decodes with
  `diffusion_generate` (`max_new_tokens` is its `gen_length`; pass `block_length`, `steps`,
  `scheduler`, `cache` in kwargs), a `drafter` decodes speculatively, anything else with
  `generate`. Other kwargs (`sampling`, `key`, `verifier`, `min_new_tokens`,
  `repetition_penalty`, `logprobs`, ...) go to that function. Prompts are encoded with the
  tokenizer's BOS rule.

  Args:
    stream: called as `stream(row, text_piece)` while decoding runs (diffusion: a block's text
      once the block is finished).
    stop_strings: a completion ends where one completes; the text is cut right after it.
    return_output: also return the `DecodeOutput` (ids, lengths, stats, logprobs).
  """
  if isinstance(texts, str):
    raise TypeError("texts must be a list of strings; for one text write [text]")
  tokenizer.check_fits(model.config.vocab_size)  # Before encoding: ids past the vocabulary.
  prompts = [tokenizer.encode(t) for t in texts]
  listener = None if stream is None else TextStream(tokenizer, len(prompts), stream)
  common = dict(stop_strings=stop_strings, tokenizer=tokenizer, stream=listener, **kwargs)
  if not model.config.is_causal:
    out = api.diffusion_generate(model, prompts, gen_length=max_new_tokens, **common)
  elif drafter is None:
    out = api.generate(model, prompts, max_new_tokens=max_new_tokens, **common)
  else:
    out = api.speculative_generate(model, prompts, drafter, max_new_tokens=max_new_tokens,
                                   **common)
  completions = _decode(tokenizer, out, stop_strings)
  return (completions, out) if return_output else completions


def _decode(tokenizer, out: DecodeOutput, stop_strings) -> list[str]:
  tokens, lengths = np.asarray(out.tokens), np.asarray(out.lengths)
  return [cut_at_stop(tokenizer.decode(tokens[r, : lengths[r]]), stop_strings)
          for r in range(tokens.shape[0])]
