"""Zoo outputs of every decoding method and cache, recorded before the plug-in redesign.

`zoo_outputs.npz` was written by `python tests/regression/zoo_cases.py --write` at commit
f36389d (the last commit before the redesign), on the shipped pycode-ar / pycode-draft /
pycode-dlm. The diffusion cases were re-recorded when pycode-dlm's weights changed (its
long-context stage), with code that reproduced the earlier recording on the earlier weights.
`test_regression.py` reruns the cases with today's code and asserts the same tokens, lengths and
forward counts: the `CI` cases in the default run, the others under `-m slow`. The case functions
are written in today's public API; what they compute must not change.
"""

from __future__ import annotations

import os
import sys

import jax
import numpy as np

FIXTURE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "zoo_outputs.npz")
NEW_TOKENS, GEN, BLOCK = 24, 64, 32

# The default run's cases: one per code path that nothing else pins bit for bit on the zoo. The
# caches (prefix, dual) have no numpy reference, so each cache kind runs with the baseline rule
# and with parallel rules; each sampled path (AR, each verifier, adapld's sampled tree
# verification, Dream's sampled MaskGIT) once, since a sampled output depends on the exact random
# stream. Left to `-m slow`: the greedy AR and greedy speculative cases (every greedy drafter is
# checked token for token against AR in tests/spec), the cacheless diffusion cases (numpy
# references in tests/diffusion/test_diffusion_reference.py and test_diffusion_zoo.py), the rest
# of the scheduler x cache grid, prompt lookup / adapld repeats, half steps, random remasking,
# CFG, the EOS flags and threshold sampling.
CI = ("ar sampled", "spec draft model exact", "spec adapld exact", "spec draft model truncation",
      "spec draft model collaborative", "diffusion llada prefix", "diffusion llada dual",
      "diffusion threshold prefix", "diffusion threshold dual", "diffusion frechet dual",
      "diffusion dream entropy prefix", "diffusion dream margin dual",
      "diffusion dream maskgit sampled")


def _setup():
  import jaxdec
  from jaxdec.corpus import held_out_prompts

  tok = jaxdec.load_tokenizer("zoo:pycode-ar")
  return {"ar": jaxdec.load("zoo:pycode-ar"), "draft": jaxdec.load("zoo:pycode-draft"),
          "dlm": jaxdec.load("zoo:pycode-dlm"),
          "prompts": [p[:40 + 9 * i] for i, p in enumerate(held_out_prompts(tok, 3, prompt_tokens=96))]}


def _ar(sampled):
  def case(z):
    import jaxdec

    sampling = jaxdec.Sampling.create(0.7, top_p=0.9) if sampled else None
    out = jaxdec.generate(z["ar"], z["prompts"], max_new_tokens=NEW_TOKENS, sampling=sampling,
                          key=jax.random.key(0) if sampled else None)
    return {"tokens": out.tokens, "lengths": out.lengths, "nfe": out.stats["nfe"]}
  return case


def _spec(drafter_fn, verifier_fn=None, sampled=False):
  def case(z):
    import jaxdec

    sampling = jaxdec.Sampling.create(0.8, top_k=20) if sampled else None
    out = jaxdec.speculative_generate(
        z["ar"], z["prompts"], drafter_fn(z), None if verifier_fn is None else verifier_fn(),
        max_new_tokens=NEW_TOKENS, sampling=sampling, key=jax.random.key(1) if sampled else None)
    return {"tokens": out.tokens, "lengths": out.lengths, "nfe": out.stats["target_forwards"],
            "accepted": out.stats["accepted"]}
  return case


def _diffusion(scheduler_fn, cache_fn=None, steps=GEN, **kw):
  def case(z):
    import jaxdec

    out = jaxdec.diffusion_generate(z["dlm"], z["prompts"], gen_length=GEN, block_length=BLOCK,
                                    steps=steps, scheduler=scheduler_fn(),
                                    cache=None if cache_fn is None else cache_fn(), **kw)
    return {"tokens": out.tokens, "lengths": out.lengths, "nfe": out.stats["nfe"]}
  return case


def cases() -> dict:
  """name -> fn(zoo) -> dict of arrays. Written in the current API."""
  from jaxdec import diffusion as d
  from jaxdec import spec as s

  out = {"ar greedy": _ar(False), "ar sampled": _ar(True)}
  drafters = {"draft model": lambda z: s.DraftModel(z["draft"], 4),
              "prompt lookup": lambda z: s.PromptLookup(3, 4),
              "adapld": lambda z: s.AdaPLD(max_ngram=3, min_ngram=2, depth=3, branches=3)}
  for name, fn in drafters.items():
    out[f"spec {name} greedy"] = _spec(fn)
    out[f"spec {name} exact"] = _spec(fn, s.Exact, sampled=True)
  import jax.numpy as jnp

  out["spec draft model truncation"] = _spec(
      drafters["draft model"], lambda: s.Truncation(top_k=jnp.asarray(5), top_p=jnp.asarray(0.9)),
      sampled=True)
  out["spec draft model collaborative"] = _spec(
      drafters["draft model"],
      lambda: s.Collaborative(weight=jnp.asarray(0.5), max_overshoot=jnp.asarray(2.0)), sampled=True)
  schedulers = {"llada": d.FixedSteps, "threshold": lambda: d.Threshold(0.9),
                "factor": lambda: d.Factor(1.0), "frechet": lambda: d.Frechet(0.25),
                "dream entropy": lambda: d.Dream(d.NegEntropy())}
  caches = {"none": None, "prefix": d.PrefixCache, "dual": d.DualCache}
  for sname, sched in schedulers.items():
    for cname, cache in caches.items():
      out[f"diffusion {sname} {cname}"] = _diffusion(sched, cache)
  out["diffusion llada half steps"] = _diffusion(d.FixedSteps, steps=GEN // 2)
  out["diffusion llada random remasking"] = _diffusion(lambda: d.FixedSteps(d.RandomConfidence()),
                                                       key=jax.random.key(2))
  out["diffusion dream margin dual"] = _diffusion(lambda: d.Dream(d.Margin()), d.DualCache,
                                                  steps=GEN // 2)
  out["diffusion dream maskgit sampled"] = _diffusion(lambda: d.Dream(d.Probability()),
                                                      temperature=0.5, key=jax.random.key(3))
  out["diffusion threshold sampled"] = _diffusion(lambda: d.Threshold(0.7), temperature=0.8,
                                                  key=jax.random.key(4))
  out["diffusion llada cfg"] = _diffusion(d.FixedSteps, cfg_scale=1.0)
  out["diffusion llada eos flags"] = _diffusion(d.FixedSteps, logits_eos_inf=True,
                                                confidence_eos_eot_inf=True)
  return out


def run(names=None) -> dict[str, dict[str, np.ndarray]]:
  zoo = _setup()
  return {name: {k: np.asarray(v) for k, v in fn(zoo).items()}
          for name, fn in cases().items() if names is None or name in names}


def save(results: dict, path: str) -> None:
  np.savez_compressed(path, **{f"{name}/{k}": v for name, r in results.items() for k, v in r.items()})


def load(path: str) -> dict[str, dict[str, np.ndarray]]:
  out = {}
  with np.load(path) as data:
    for key in data.files:
      name, field = key.rsplit("/", 1)
      out.setdefault(name, {})[field] = data[key]
  return out


def main() -> None:
  """--write: record the fixture; --out PATH [NAME ...]: run the named cases (default: every
  case) and save the outputs to PATH."""
  args = sys.argv[1:]
  if args == ["--write"]:
    save(run(), FIXTURE)
    print(f"wrote {len(cases())} cases to {FIXTURE}")
  elif len(args) >= 2 and args[0] == "--out":
    unknown = set(args[2:]) - set(cases())
    if unknown:
      raise SystemExit(f"unknown cases: {sorted(unknown)}")
    save(run(args[2:] or None), args[1])
  else:
    raise SystemExit("usage: python tests/regression/zoo_cases.py --write | --out PATH [NAME ...]")


if __name__ == "__main__":
  main()
