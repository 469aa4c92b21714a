"""What the commands share: the parser class (every option shows its default), the multi-process
flags, flag names and value types, and the model's tokenizer when it has one."""

from __future__ import annotations

import argparse


class HelpFormatter(argparse.ArgumentDefaultsHelpFormatter):
  """Help with each option's default, except an uninformative one (None, a flag's False): such
  an option's help says what leaving it out does."""

  def _get_help_string(self, action):
    if action.default is None or action.default is False:
      return action.help
    return super()._get_help_string(action)


class Parser(argparse.ArgumentParser):
  """An ArgumentParser with `HelpFormatter`; `add_subparsers` builds sub-parsers of the parent's
  class, so every sub-command (the bench suites included) shows its defaults."""

  def __init__(self, *args, formatter_class=HelpFormatter, **kwargs):
    super().__init__(*args, formatter_class=formatter_class, **kwargs)


def positive_int(text: str) -> int:
  try:
    value = int(text)
  except ValueError:
    value = 0
  if value < 1:
    raise argparse.ArgumentTypeError(f"must be a positive int, got {text!r}")
  return value


def unescape(text: str) -> str:
  """Python string escapes in a flag's value read as such ('\\n' -> a line break)."""
  return text.encode("latin-1", "backslashreplace").decode("unicode_escape")


def flag(dest: str) -> str:
  """The option an argparse dest comes from: 'num_tokens' -> '--num-tokens'."""
  return "--" + dest.replace("_", "-")


def given(args, dests) -> list[str]:
  """The dests among `dests` that the command line set (not None), in order."""
  return [d for d in dests if getattr(args, d) is not None]


def add_distributed_flags(parser) -> None:
  """--distributed and its coordinates: the flags that `generate`, `train` and `bench` share."""
  group = parser.add_argument_group("multi-process (one process per host of a TPU pod slice)")
  group.add_argument("--distributed", action="store_true",
                     help="join a multi-process run first (jax.distributed.initialize); on a TPU "
                          "pod slice JAX reads the coordinates from the environment")
  group.add_argument("--coordinator", help="with --distributed off TPU: process 0's 'host:port'")
  group.add_argument("--num-processes", type=positive_int,
                     help="with --distributed off TPU: the number of processes")
  group.add_argument("--process-id", type=int, help="with --distributed off TPU: this process's "
                                                     "index, 0 .. --num-processes - 1")


def join_distributed(args) -> None:
  """`jaxdec.sharding.initialize` for --distributed, before anything touches a device."""
  coordinates = (args.coordinator, args.num_processes, args.process_id) \
      if hasattr(args, "distributed") else ()
  set_ = [c is not None for c in coordinates]
  if not getattr(args, "distributed", False):
    if any(set_):
      raise ValueError("--coordinator / --num-processes / --process-id only act with --distributed")
    return
  if any(set_) and not all(set_):
    raise ValueError("--distributed: pass all of --coordinator, --num-processes and --process-id, "
                     "or none of them (on TPU JAX reads them from the environment)")
  from jaxdec import sharding

  sharding.initialize(*coordinates)


def process_mesh():
  """Every device of every process: data parallel across processes, tensor parallel inside."""
  import jax

  from jaxdec import sharding

  return sharding.make_mesh(data=jax.process_count(), model=jax.local_device_count())


def tokenizer_or_none(path: str):
  """The model's tokenizer, or None when its directory has no tokenizer.json."""
  import jaxdec

  try:
    return jaxdec.load_tokenizer(path)
  except FileNotFoundError:
    return None
