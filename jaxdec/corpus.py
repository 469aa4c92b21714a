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
from typing import Any, ClassVar

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

  def build(self, stream: np.ndarray, progress: bool = True) -> np.ndarray:
    return stream  # `stream` is already the source's train split.


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
  np.save(path, stream)
  return stream


def encode_documents(texts: list[str], tokenizer) -> np.ndarray:
  """Concatenate documents as [BOS] tokens [EOS] ...; int32."""
  pieces = []
  for enc in tokenizer.backend.encode_batch(texts, add_special_tokens=False):
    pieces.append(np.asarray([tokenizer.bos_id] + enc.ids + [tokenizer.eos_id], np.int32))
  return np.concatenate(pieces) if pieces else np.zeros((0,), np.int32)


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
