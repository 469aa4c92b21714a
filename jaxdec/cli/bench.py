"""`jaxdec bench SUITE`: each suite of `jaxdec.bench` brings its help (`HELP`), its flags
(`add_arguments`) and its run (`main`); this module lists them and adds the multi-process flags."""

from __future__ import annotations

from jaxdec.bench import (ar, archer, blocks, diffusion, eagle, hpd, kernels, kforcing, prefilling,
                          spec)
from jaxdec.cli.common import add_distributed_flags

# In the order `jaxdec bench --help` lists them.
SUITES = {"ar": ar, "spec": spec, "diffusion": diffusion, "kforcing": kforcing, "eagle": eagle,
          "kernels": kernels, "prefilling": prefilling, "blocks": blocks, "archer": archer,
          "hpd": hpd}


def add_parser(sub) -> None:
  """`jaxdec bench ar | spec | diffusion | kforcing | eagle | kernels | prefilling | blocks |
  archer | hpd`."""
  bench = sub.add_parser("bench", help="benchmarks that print side-by-side ratios")
  suites = bench.add_subparsers(dest="suite", required=True)
  for name, suite in SUITES.items():
    parser = suites.add_parser(name, help=suite.HELP)
    suite.add_arguments(parser)
    add_distributed_flags(parser)
    parser.set_defaults(fn=suite.main)
