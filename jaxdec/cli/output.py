"""How `jaxdec generate` prints: one line a prompt, a streamed completion, the --stats line."""

from __future__ import annotations


def one_line(text: str) -> str:
  """Backslashes and line breaks escaped (\\\\, \\n, \\r): one output line per prompt."""
  return text.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r")


class StreamPrinter:
  """--stream: the prompt, then each step's new text (or ids) as the loop produces it."""

  def __init__(self, tokenizer, prompt: str | None):
    from jaxdec.text import TextStream

    self.ids, self.text = [], None
    if tokenizer is not None:
      self.text = TextStream(tokenizer, 1, lambda _, piece: print(piece, end="", flush=True))
    if prompt is not None:
      print(prompt, end="", flush=True)

  def __call__(self, step_tokens) -> None:
    if self.text is not None:
      self.text(step_tokens)
      return
    new = [int(t) for t in step_tokens[0]]
    if new:
      print((" " if self.ids else "") + " ".join(map(str, new)), end="", flush=True)
      self.ids += new

  def close(self, completion: list[int]) -> None:
    """What the stream has not shown yet (a trailing partial character), then the newline."""
    if self.text is not None:
      print(self.text.remainder(0, completion), end="")
    print(flush=True)


class Stats:
  """Totals over the prompts for --stats (padding rows of a last short batch excluded)."""

  def __init__(self, method: str):
    self.method, self.prompts, self.tokens, self.forwards = method, 0, 0, 0
    self.draft_forwards, self.canvas = 0, 0

  def add(self, out, rows: int) -> None:
    import numpy as np

    self.prompts += rows
    self.tokens += int(np.asarray(out.lengths[:rows]).sum())
    self.forwards += int(np.asarray(out.stats["nfe"][:rows]).sum())
    if "draft_forwards" in out.stats:
      self.draft_forwards += int(np.asarray(out.stats["draft_forwards"][:rows]).sum())
    self.canvas += rows * int(out.tokens.shape[1])

  def line(self) -> str:
    per = lambda n: n / max(self.forwards, 1)
    head = (f"{self.method}: {self.prompts} prompt{'s' * (self.prompts != 1)}, {self.tokens:,} "
            "tokens")
    if self.method == "diffusion":
      return (f"{head} (to the first stop token) from {self.forwards:,} forwards (model passes "
              f"over the canvas): {per(self.canvas):.2f} tokens/forward ({self.canvas:,} canvas "
              "tokens / forwards)")
    line = (f"{head} from {self.forwards:,} forwards (target forward passes, prefill included): "
            f"{per(self.tokens):.2f} tokens/forward")
    if self.method == "speculative":
      line += (f", acceptance length {per(self.tokens):.2f}, {self.draft_forwards:,} draft "
               "forwards")
    return line
