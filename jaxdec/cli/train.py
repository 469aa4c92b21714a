"""`jaxdec train`: a recipe (zoo:NAME or a config file) trained, evaluated and exported."""

from __future__ import annotations

import argparse
import os
import sys

from jaxdec.cli.common import add_distributed_flags


def run(args) -> int:
  import dataclasses
  import json

  from jaxdec.configs import load_config
  from jaxdec.train.trainer import TrainingInterrupted
  from jaxdec.train.zoo import train_and_export

  cfg = load_config(args.config)
  if args.steps is not None:
    cfg = dataclasses.replace(cfg, steps=args.steps,
                              warmup_steps=min(cfg.warmup_steps, args.steps // 10))
  workdir = args.workdir or os.path.join("runs", cfg.name)
  export = None if args.no_export else (args.export or os.path.join(workdir, "export"))
  try:
    meta = train_and_export(cfg, workdir, export, third_party_dir=args.third_party, plot=args.plot)
  except TrainingInterrupted as e:
    print(f"jaxdec train: interrupted at step {e.step}; checkpoint saved in {e.directory} (the "
          f"same command resumes from it)", file=sys.stderr)
    return 130
  print(json.dumps({k: meta[k] for k in ("name", "steps", "tokens_seen", "train_seconds", "eval")},
                   indent=2, default=str))
  if export:
    print(f"exported {export}")
  return 0


def add_parser(sub) -> None:
  """`jaxdec train`."""
  train = sub.add_parser("train", help="train a model from a recipe (zoo:NAME or a config file)")
  train.add_argument("--config", required=True,
                     help="zoo:NAME (a shipped recipe, e.g. zoo:pycode-ar) or a Python file with "
                          "get_config() -> TrainConfig")
  train.add_argument("--workdir",
                     help="checkpoints and metrics (default runs/NAME); resumes if present")
  train.add_argument("--export", help="HF-format output dir (default WORKDIR/export)")
  train.add_argument("--no-export", action="store_true", help="train only; write no HF-format dir")
  train.add_argument("--steps", type=int, help="override the number of steps")
  train.add_argument("--third-party",
                     help="a directory of .py files the model never saw, evaluated at the end")
  train.add_argument("--plot", action=argparse.BooleanOptionalAction,
                     help="write WORKDIR/training.png (loss and validation bits per byte vs "
                          "step) at the end; left out: when matplotlib is installed")
  add_distributed_flags(train)
  train.set_defaults(fn=run)
