"""`jaxdec demo`: the zoo's methods side by side (`jaxdec.demo`)."""

from __future__ import annotations

import argparse

from jaxdec.cli.common import positive_int


def run(args) -> int:
  from jaxdec import demo

  demo.run(num_prompts=args.prompts, new_tokens=args.new_tokens, gsm=args.gsm)
  return 0


def add_parser(sub) -> None:
  """`jaxdec demo`."""
  demo = sub.add_parser("demo", help="complete held-out code with the shipped zoo models")
  demo.add_argument("--prompts", type=positive_int, default=3, help="held-out code prompts")
  demo.add_argument("--new-tokens", type=positive_int, default=64, help="tokens per completion")
  demo.add_argument("--gsm", action=argparse.BooleanOptionalAction,
                    help="then solve a gsm-synth problem by greedy AR, speculative decoding and "
                         "parallel diffusion, with whichever gsm-synth zoo models are installed "
                         "(left out: when zoo:gsm-ar is)")
  demo.set_defaults(fn=run)
