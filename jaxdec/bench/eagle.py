"""`jaxdec bench eagle`: the EAGLE-3 studies, each drafter trained here by the zoo recipe of the
task (zoo:gsm-eagle3 or zoo:pycode-eagle3: same data, same steps) and then measured the same way.

  * VAT vs the plain training-time-test loss, `seeds` seeds each (`TrainingTimeTest(vat=True)`
    with the verification head, against its ablation).
  * KVShot: the three reuse variants (hidden states only = EAGLE-3, the target's KV cache only,
    hybrid), seed 0 each.

Measured per drafter: real greedy decoding of the task's test prompts (one ragged batch, exact
w.r.t. greedy AR) with a chain of `depth` (tau, and the acceptance rate at each depth 1..depth
given the earlier drafts accepted: KVShot's diagnostic) and with the recipe's dynamic tree (tau);
and the training-time test's simulated chain acceptance on validation rows. Training runs are
resumable (`workdir`); nothing here is timed.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

import jaxdec
from jaxdec.bench.common import Timer, add_output_flags, check_plot, report
from jaxdec.configs import load_config
from jaxdec.corpus import held_out_prompts
from jaxdec.tasks import gsm_synth
from jaxdec.train.eagle import Eagle3Drafter, TrainingTimeTest
from jaxdec.train.trainer import Trainer
from jaxdec.train.zoo import train_and_export

_RECIPES = {"gsm-synth": "zoo:gsm-eagle3", "code": "zoo:pycode-eagle3"}


def variants(seeds: int) -> dict[str, tuple[dict, dict, int]]:
  """name -> (Eagle3Drafter changes, TrainingTimeTest changes, seed)."""
  out = {}
  for seed in range(seeds):
    out[f"plain seed {seed}"] = ({}, {}, seed)
    out[f"VAT seed {seed}"] = ({"verification_head": True}, {"vat": True}, seed)
  out["KV only seed 0"] = ({"reuse": "kv"}, {}, 0)
  out["hybrid seed 0"] = ({"reuse": "hybrid"}, {}, 0)
  return out


def depth_reached(accepted: np.ndarray, depth: int) -> list[int]:
  """From drafts accepted per verification step (-1 = no step), the number of steps accepting
  >= d drafts for d = 0..depth: the sample behind each depth's rate."""
  steps = accepted[accepted >= 0]
  return [int(np.sum(steps >= d)) for d in range(depth + 1)]


def depth_acceptance(accepted: np.ndarray, depth: int) -> list[float]:
  """The rate at each depth d of a chain: steps accepting >= d drafts over steps accepting
  >= d - 1."""
  reached = np.array(depth_reached(accepted, depth), np.float64)
  return (reached[1:] / np.maximum(reached[:-1], 1)).round(4).tolist()


def _prompts(task: str, tokenizer, count: int):
  if task == "code":
    return held_out_prompts(tokenizer, count), 64
  return [tokenizer.encode(p.prompt) for p in gsm_synth.problems("test", count, 0)], gsm_synth.GEN_LENGTH


def run(task: str = "gsm-synth", steps: int | None = None, seeds: int = 3, depth: int = 8,
        num_prompts: int = 8, workdir: str = "runs/eagle-study", only: str | None = None,
        out: str | None = None, plot: bool = False, progress: bool = True) -> dict:
  """Train (or resume) every variant and measure it. `steps` overrides the recipe's; `only`
  keeps the variants whose name contains it."""
  if task not in _RECIPES:
    raise ValueError(f"task must be one of {sorted(_RECIPES)}, got {task!r}")
  check_plot(plot, out)
  base = load_config(_RECIPES[task])
  base = dataclasses.replace(base, steps=steps or base.steps,
                             warmup_steps=min(base.warmup_steps, (steps or base.steps) // 5))
  model = jaxdec.load(base.target)
  prompts, new_tokens = _prompts(task, jaxdec.load_tokenizer(base.target), num_prompts)
  rows = []
  for name, (part_changes, loss_changes, seed) in variants(seeds).items():
    if only and only not in name:
      continue
    part = dataclasses.replace(base.part, **part_changes)
    cfg = dataclasses.replace(base, name=f"{base.name}-{name.replace(' ', '-')}", part=part,
                              objective=dataclasses.replace(base.objective, **loss_changes), seed=seed)
    directory = os.path.join(workdir, cfg.name)
    meta = train_and_export(cfg, directory, None, progress=progress, plot=False)
    trainer = Trainer(cfg, directory, target=model)
    drafter = part.to_drafter(trainer.module.params(), model)
    trainer.close()
    chain = jaxdec.speculative_generate(model, prompts, drafter.with_tree(top_k=1, depth=depth),
                                        max_new_tokens=new_tokens)
    tree = jaxdec.speculative_generate(model, prompts, drafter, max_new_tokens=new_tokens)
    accepted = np.asarray(chain.stats["accepted"])
    rows.append({"drafter": name, "reuse": part.reuse, "vat": loss_changes.get("vat", False),
                 "seed": seed,
                 f"tau chain {depth}": float(np.sum(chain.lengths) / np.sum(chain.stats["target_forwards"])),
                 "tau dynamic tree": float(np.sum(tree.lengths) / np.sum(tree.stats["target_forwards"])),
                 "sim tau (TTT)": meta["eval"]["sim_tau"],
                 "acceptance by depth": depth_acceptance(accepted, depth),
                 "steps reaching depth 0..": depth_reached(accepted, depth),
                 "sim acceptance by depth": meta["eval"]["alpha"]})
  columns = ["drafter", f"tau chain {depth}", "tau dynamic tree", "sim tau (TTT)",
             "acceptance by depth", "steps reaching depth 0.."]
  summary = _seed_summary(rows, depth)
  print(f"bench eagle: {base.target}, {len(prompts)} {task} test prompts, {new_tokens} new tokens, "
        f"greedy; drafters trained {base.steps} steps by {_RECIPES[task]}")
  record = report(rows + summary, columns, Timer(), {
      "suite": "eagle", "task": task, "target": base.target, "recipe": _RECIPES[task],
      "steps": base.steps, "prompts": len(prompts), "new_tokens": new_tokens, "depth": depth},
      out, figures if plot else None)
  return record


def _seed_summary(rows: list[dict], depth: int) -> list[dict]:
  """Mean and spread (sample std) over seeds of VAT and of the plain loss."""
  out = []
  for label, vat in (("plain", False), ("VAT", True)):
    group = [r for r in rows if r["vat"] == vat and r["reuse"] == "hidden"]
    if len(group) < 2:
      continue
    summary = {"drafter": f"{label}: mean +- std over {len(group)} seeds", "reuse": "hidden",
               "vat": vat, "seed": None}
    for column in (f"tau chain {depth}", "tau dynamic tree", "sim tau (TTT)"):
      values = np.array([r[column] for r in group])
      summary[column] = f"{values.mean():.3f} +- {values.std(ddof=1):.3f}"
    summary["acceptance by depth"] = np.mean([r["acceptance by depth"] for r in group], 0).round(3).tolist()
    summary["steps reaching depth 0.."] = np.sum([r["steps reaching depth 0.."] for r in group], 0).tolist()
    out.append(summary)
  return out


def figures(record: dict) -> dict:
  """{'depth': acceptance rate per depth of each drafter (real decoding; seeds averaged)}."""
  from jaxdec import plots

  curves = {r["drafter"]: r["acceptance by depth"] for r in record["rows"]
            if r["seed"] is None or r["reuse"] != "hidden"}
  if not curves:
    curves = {r["drafter"]: r["acceptance by depth"] for r in record["rows"]}
  return {"depth": plots.acceptance_by_depth(
      curves, title=f"bench eagle: {record['target']}, chain of {record['depth']}, greedy, "
                    f"{record['prompts']} {record['task']} prompts")}


# ---- `jaxdec bench eagle` -----------------------------------------------------------------------

HELP = ("EAGLE-3 studies: VAT vs the plain loss over seeds, and KVShot's hidden / KV / hybrid "
        "drafters' acceptance by depth (trains every drafter, resumably)")


def add_arguments(parser) -> None:
  """`jaxdec bench eagle`'s flags (the CLI adds the multi-process ones)."""

  parser.add_argument("--task", choices=("gsm-synth", "code"), default="gsm-synth",
                      help="the zoo target and recipe: gsm-ar with zoo:gsm-eagle3, or pycode-ar "
                           "with zoo:pycode-eagle3")
  parser.add_argument("--steps", type=int,
                      help="training steps per drafter (left out: the recipe's)")
  parser.add_argument("--seeds", type=int, default=3, help="seeds of VAT and of the plain loss")
  parser.add_argument("--depth", type=int, default=8, help="the chain measured, depths 1..DEPTH")
  parser.add_argument("--prompts", type=int, default=8, help="test prompts decoded")
  parser.add_argument("--workdir", default="runs/eagle-study", help="the drafters' training runs")
  parser.add_argument("--only", help="only the drafters whose name contains this, e.g. VAT or KV")
  add_output_flags(parser, "eagle", "OUT_depth.png (acceptance rate per depth of each drafter)")


def main(args) -> int:
  """`jaxdec bench eagle`: `run` with the parsed flags."""
  run(args.task, steps=args.steps, seeds=args.seeds, depth=args.depth, num_prompts=args.prompts,
      workdir=args.workdir, only=args.only, out=args.out, plot=args.plot)
  return 0
