"""The zoo's corpora: by default the CPython standard-library sources of the running interpreter.

Every machine has it, no download. Files are listed in sorted relative-path order and split
train / validation by a stable hash of the relative path, so the split is the same on every
machine with the same Python version. Token streams are cached as .npy next to nothing else the
user owns (`~/.cache/jaxdec/corpus`).

A recipe picks another text source with `TrainConfig(data=Windows(source))`: any object with a
`name`, a `key()` that changes whenever its documents do, `documents(split)` for 'train' and
'validation', and the `vocab_size` / `individual_digits` of the tokenizer trained on it
(`jaxdec.tasks.gsm_synth.Corpus` is one).
"""

from __future__ import annotations

import dataclasses
import hashlib
import os
import sys
import sysconfig
import tempfile
from typing import Any, ClassVar, Protocol, runtime_checkable

import numpy as np

VAL_PERCENT = 5  # sha1(relpath) % 100 < 5 -> validation.


@dataclasses.dataclass(frozen=True)
class SourceFile:
  relpath: str
  path: str


def stdlib_root() -> str:
  return sysconfig.get_paths()["stdlib"]


def is_validation(relpath: str) -> bool:
  return int(hashlib.sha1(relpath.encode()).hexdigest(), 16) % 100 < VAL_PERCENT


def list_python_files(root: str, exclude_dirs=("site-packages", "dist-packages", "__pycache__")) -> list[SourceFile]:
  """All *.py under root (sorted by relative path), skipping the excluded directory names."""
  out = []
  for directory, dirs, files in os.walk(root):
    dirs[:] = sorted(d for d in dirs if d not in exclude_dirs)
    for name in files:
      if name.endswith(".py"):
        path = os.path.join(directory, name)
        out.append(SourceFile(os.path.relpath(path, root).replace(os.sep, "/"), path))
  return sorted(out, key=lambda f: f.relpath)


def stdlib_split(split: str) -> list[SourceFile]:
  """'train' or 'validation' files of the stdlib of this interpreter."""
  if split not in ("train", "validation"):
    raise ValueError(f"split must be 'train' or 'validation', got {split!r}")
  files = list_python_files(stdlib_root())
  return [f for f in files if is_validation(f.relpath) == (split == "validation")]


def read_texts(files: list[SourceFile]) -> tuple[list[str], list[str]]:
  """(texts, skipped relpaths): files that are not valid UTF-8 are skipped and reported."""
  texts, skipped = [], []
  for f in files:
    try:
      with open(f.path, encoding="utf-8") as fh:
        texts.append(fh.read())
    except (UnicodeDecodeError, OSError):
      skipped.append(f.relpath)
  return texts, skipped


@dataclasses.dataclass(frozen=True)
class Stdlib:
  """The default text source: the stdlib sources of this interpreter, split by `stdlib_split`."""

  name: ClassVar[str] = "stdlib"
  vocab_size: ClassVar[int] = 4096
  individual_digits: ClassVar[bool] = False

  def key(self) -> str:
    return f"{sys.version_info.major}.{sys.version_info.minor}.{sys.version_info.micro}"

  def documents(self, split: str) -> list[str]:
    return read_texts(stdlib_split(split))[0]


STDLIB = Stdlib()


@dataclasses.dataclass(frozen=True)
class Windows:
  """`TrainConfig.data` for training on random windows of `source`'s train split (its
  tokenizer, validation windows and final evaluation come from the same source)."""

  source: Any = STDLIB

  def build(self, stream: np.ndarray, progress: bool = True, *, tokenizer=None) -> np.ndarray:
    del progress, tokenizer
    return stream  # `stream` is already the source's train split.


@dataclasses.dataclass(frozen=True)
class Rows:
  """Ready-made training rows: `tokens` i32[N, L] and `scored` bool[N, L], True where the loss
  predicts the token (objectives take it as `scored`)."""

  tokens: np.ndarray
  scored: np.ndarray


@runtime_checkable
class ScoredData(Protocol):
  """`TrainConfig.data` whose rows score only part of their tokens (`Rows`): its validation rows
  are scored the same way, so the validation loss is the training loss on unseen rows."""

  def build(self, stream: np.ndarray, progress: bool = True, *, tokenizer) -> Rows:
    ...

  def validation(self, tokenizer, count: int) -> Rows:
    ...


@dataclasses.dataclass(frozen=True)
class Packed:
  """`TrainConfig.data` for training on whole documents of `source`'s train split: each row of
  `seq_len` tokens holds as many documents, [BOS] text [EOS], as fit (in a seeded random order,
  first fit), none cut, the rest PAD. Why: a random window starts inside a document as often as
  not, and a task's answer trained without its question teaches the model to answer questions it
  has not read. With `completions_only` the loss scores only each document's completion and its
  EOS, not its prompt (supervised fine-tuning's rule): the source's `examples(split)` gives
  (prompt, completion) pairs, tokenized apart as a prompt is at inference.

  `eos_block`: each completion's EOS is repeated up to a multiple of this many tokens (scored),
  so that the next document starts where a diffusion block would. A masked-diffusion model
  decoding blocks of that length then fills the rest of an answer's last block with EOS, with
  confidence (LLaDA's SFT pads answers with EOS for the same reason), instead of guessing at a
  next question it cannot know."""

  source: Any
  seq_len: int
  completions_only: bool = True
  eos_block: int | None = None
  seed: int = 0

  def __post_init__(self):
    if not isinstance(self.seq_len, int) or self.seq_len < 2:
      raise ValueError(f"Packed.seq_len must be an int >= 2, got {self.seq_len!r}")
    if self.eos_block is not None and (not isinstance(self.eos_block, int) or self.eos_block < 1):
      raise ValueError(f"Packed.eos_block must be None or an int >= 1, got {self.eos_block!r}")
    if self.completions_only and not hasattr(self.source, "examples"):
      raise TypeError(f"Packed(completions_only=True) needs a source with examples(split) -> "
                      f"[(prompt, completion)], got {type(self.source).__name__}")

  def build(self, stream: np.ndarray, progress: bool = True, *, tokenizer) -> Rows:
    """The packed rows of the train split (`stream` is not used: documents are re-encoded whole)."""
    del stream, progress
    return self._rows("train", tokenizer)

  def validation(self, tokenizer, count: int) -> Rows:
    """Up to `count` packed rows of the validation split, scored as training scores them: the
    validation loss is then the training loss on problems never trained on."""
    rows = self._rows("validation", tokenizer)
    return Rows(rows.tokens[:count], rows.scored[:count])

  def _rows(self, split: str, tokenizer) -> Rows:
    if self.completions_only:
      pairs = self.source.examples(split)
    else:
      pairs = [("", text) for text in self.source.documents(split)]
    prompts = tokenizer.backend.encode_batch([p for p, _ in pairs], add_special_tokens=False)
    completions = tokenizer.backend.encode_batch([c for _, c in pairs], add_special_tokens=False)
    documents = []
    for prompt, completion in zip(prompts, completions):
      head = [tokenizer.bos_id] + prompt.ids
      ends = 1 + (-(len(completion.ids) + 1) % self.eos_block if self.eos_block else 0)
      documents.append((head + completion.ids + [tokenizer.eos_id] * ends, len(head)))
    return pack(documents, self.seq_len, tokenizer.pad_id, self.seed)


def pack(documents: list[tuple[list[int], int]], length: int, pad_id: int, seed: int = 0) -> Rows:
  """First-fit packing of (token ids, number of unscored leading ids) into rows of `length`, in
  a seeded random order; a document longer than a row is an error, not a cut."""
  order = np.random.default_rng(seed).permutation(len(documents))
  rows: list[list[int]] = []
  masks: list[list[bool]] = []
  free: list[int] = []  # Room left per row; first fit over the rows that still have some.
  for i in order:
    ids, unscored = documents[i]
    if len(ids) > length:
      raise ValueError(f"a document of {len(ids)} tokens does not fit rows of {length}")
    slot = next((r for r in range(max(0, len(free) - 64), len(free)) if free[r] >= len(ids)), None)
    if slot is None:
      rows.append([]), masks.append([]), free.append(length)
      slot = len(rows) - 1
    rows[slot] += ids
    masks[slot] += [False] * unscored + [True] * (len(ids) - unscored)
    free[slot] -= len(ids)
  tokens = np.full((len(rows), length), pad_id, np.int32)
  scored = np.zeros((len(rows), length), bool)
  for r, (ids, mask) in enumerate(zip(rows, masks)):
    tokens[r, :len(ids)], scored[r, :len(mask)] = ids, mask
  return Rows(tokens, scored)


def source_of(data) -> Any:
  """The text source a `TrainConfig.data` reads: its `source`, else the stdlib."""
  return getattr(data, "source", STDLIB)


def cache_dir() -> str:
  path = os.environ.get("JAXDEC_DATA_DIR", os.path.expanduser("~/.cache/jaxdec/corpus"))
  os.makedirs(path, exist_ok=True)
  return path


def token_stream(split: str, tokenizer, source=STDLIB) -> np.ndarray:
  """uint16/int32 token ids of a split of `source`: documents joined as BOS text EOS. Cached on
  disk, keyed by the source (name and `key()`: the Python version for the stdlib), split and
  the tokenizer's content."""
  vocab_hash = hashlib.sha1(tokenizer.backend.to_str().encode()).hexdigest()[:12]
  path = os.path.join(cache_dir(), f"{source.name}-{source.key()}-{split}-{vocab_hash}.npy")
  if os.path.exists(path):
    return np.load(path)
  stream = encode_documents(source.documents(split), tokenizer)
  write_cached(path, lambda f: np.save(f, stream))
  return stream


def write_cached(path: str, write) -> None:
  """Write a cache file with `write(binary file)` under a name of its own, then rename it: a
  process reading the cache meanwhile (two runs, parallel test workers) sees all of it or none."""
  fd, partial = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".partial")
  try:
    with os.fdopen(fd, "wb") as f:
      write(f)
    os.replace(partial, path)
  finally:
    if os.path.exists(partial):
      os.remove(partial)


def encode_documents(texts: list[str], tokenizer) -> np.ndarray:
  """Concatenate documents as [BOS] tokens [EOS] ...; int32."""
  pieces = []
  for enc in tokenizer.backend.encode_batch(texts, add_special_tokens=False):
    pieces.append(np.asarray([tokenizer.bos_id] + enc.ids + [tokenizer.eos_id], np.int32))
  return np.concatenate(pieces) if pieces else np.zeros((0,), np.int32)


def sample_batch(data: np.ndarray | Rows, batch: int, length: int, seed: int,
                 step: int) -> tuple[np.ndarray, np.ndarray | None]:
  """(tokens i32[batch, length], scored bool[batch, length] or None: every token scored) of a
  training step: random rows of `Rows`, else `sample_windows`."""
  if isinstance(data, Rows):
    rng = np.random.default_rng([seed, step])
    if data.tokens.shape[1] != length:
      raise ValueError(f"training rows have {data.tokens.shape[1]} tokens but seq_len is {length}")
    picked = rng.integers(0, len(data.tokens), size=batch)
    return data.tokens[picked], data.scored[picked]
  return sample_windows(data, batch, length, seed, step), None


def sample_windows(stream: np.ndarray, batch: int, length: int, seed: int, step: int) -> np.ndarray:
  """i32[batch, length] windows at random offsets of a 1-D token stream, or random rows of a 2-D
  array of ready-made sequences (whose width must be `length`); a pure function of (seed, step),
  so a resumed run sees exactly the batches it would have seen."""
  rng = np.random.default_rng([seed, step])
  if stream.ndim == 2:
    if stream.shape[1] != length:
      raise ValueError(f"training rows have {stream.shape[1]} tokens but seq_len is {length}")
    return stream[rng.integers(0, len(stream), size=batch)].astype(np.int32)
  starts = rng.integers(0, len(stream) - length, size=batch)
  return np.stack([stream[s: s + length] for s in starts]).astype(np.int32)


def fixed_windows(stream: np.ndarray, count: int, length: int) -> np.ndarray:
  """`count` evenly spaced, non-overlapping windows: a fixed validation batch."""
  stride = max((len(stream) - length) // max(count, 1), length)
  starts = [i * stride for i in range(count) if i * stride + length <= len(stream)]
  return np.stack([stream[s: s + length] for s in starts]).astype(np.int32)


def held_out_prompts(tokenizer, count: int, prompt_tokens: int = 128, min_chars: int = 3000) -> list[list[int]]:
  """`count` code prompts from stdlib validation files (deterministic): each starts at the first
  line after a third of its file and ends at a line break, at most `prompt_tokens` tokens, with
  no BOS (a prompt from the middle of a document)."""
  prompts = []
  texts, _ = read_texts(stdlib_split("validation"))
  for text in texts:
    if len(prompts) == count:
      break
    if len(text) < min_chars:
      continue
    lines = text[len(text) // 3:].split("\n")[1:]
    prompt, ids = "", []
    for line in lines:
      candidate = prompt + line + "\n"
      candidate_ids = tokenizer.encode(candidate, add_bos=False)  # A continuation point: no BOS.
      if len(candidate_ids) > prompt_tokens:
        break
      prompt, ids = candidate, candidate_ids
    if len(ids) >= prompt_tokens // 2:
      prompts.append(ids)
  if len(prompts) < count:
    raise ValueError(f"only {len(prompts)} validation files are long enough for {count} prompts")
  return prompts


def long_context_prompts(tokenizer, count: int, context_tokens: int,
                         continuation_tokens: int = 64) -> list[tuple[list[int], list[int]]]:
  """`count` long-context tasks from stdlib validation files (deterministic): (prompt, its true
  continuation). Prompt i concatenates whole files, starting at the i-th long file, each after a
  `# file: NAME` line, up to `context_tokens` (BOS first); the file that does not fit is cut at
  a line break, and the next `continuation_tokens` tokens of it are the continuation. For
  long-prefix decoding (Prefilling-dLLM): the answer continues the end of the prompt, the rest
  is context."""
  files = stdlib_split("validation")
  texts, _ = read_texts(files)
  docs = [f"# file: {os.path.basename(f.relpath)}\n{t}\n" for f, t in zip(files, texts)
          if len(t) >= 3000]
  if len(docs) < count + 1:
    raise ValueError(f"only {len(docs)} validation files are long enough for {count} prompts")
  encode = lambda text: tokenizer.encode(text, add_bos=False)
  out = []
  for i in range(count):
    ids = [tokenizer.bos_id] if tokenizer.bos_id is not None else []
    for j in range(len(docs)):
      doc = docs[(i + j) % len(docs)]
      piece = encode(doc)
      if len(ids) + len(piece) <= context_tokens:
        ids += piece
        continue
      lines = doc.split("\n")
      lo, hi = 1, len(lines) - 1  # The most whole lines whose tokens still fit (binary search).
      while lo < hi:
        mid = (lo + hi + 1) // 2
        if len(ids) + len(encode("\n".join(lines[:mid]) + "\n")) <= context_tokens:
          lo = mid
        else:
          hi = mid - 1
      head = "\n".join(lines[:lo]) + "\n"
      out.append((ids + encode(head), encode(doc[len(head):])[:continuation_tokens]))
      break
  return out
