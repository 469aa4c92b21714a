"""The `jaxdec` console script: one module per command (`generate`, `eval`, `train`, `bench`,
`demo`, `convert`), each with its parser and its run; the plug-ins' choices come from their own
declarations (`jaxdec.plugins`), the bench suites' flags from the suites. The work is done by the
library."""

from __future__ import annotations

import os
import sys

from jaxdec.cli import bench, convert, demo, generate, train
from jaxdec.cli import eval as evaluate
from jaxdec.cli.common import Parser, join_distributed

# `jaxdec --help` lists the commands in this order.
COMMANDS = (demo, generate, convert, train, evaluate, bench)


def _enable_compile_cache() -> None:
  """Persist compiled programs across CLI runs (a second `jaxdec generate` skips most compiles)."""
  import jax

  directory = os.environ.get("JAXDEC_CACHE_DIR", os.path.expanduser("~/.cache/jaxdec/xla"))
  jax.config.update("jax_compilation_cache_dir", directory)
  jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)


def build_parser() -> Parser:
  parser = Parser(prog="jaxdec", description="Fast LM decoding in JAX.")
  sub = parser.add_subparsers(dest="command", required=True)
  for command in COMMANDS:
    command.add_parser(sub)
  return parser


def main(argv: list[str] | None = None) -> int:
  args = build_parser().parse_args(argv)
  _enable_compile_cache()  # A global of this module: tests patch jaxdec.cli._enable_compile_cache.
  try:
    join_distributed(args)
    return args.fn(args)
  except (ValueError, FileNotFoundError, ImportError) as e:
    print(f"jaxdec {args.command}: error: {e}", file=sys.stderr)
    return 2
