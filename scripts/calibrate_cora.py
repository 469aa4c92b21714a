"""Pick CORA-Diff's operating point on gsm-synth's `validation` split, as the paper reports one.

Every (tau, persistence) of a grid decodes the same validation problems with gsm-dlm and the dual
cache (exact for this block-causal model), next to LLaDA's one-token-per-forward baseline; the
chosen point is the one with the fewest forwards per problem whose accuracy is at least the
baseline's less the tolerance (`jaxdec.tasks.evaluate.calibrate`). Freeze it, then report it on
`test` (`jaxdec bench diffusion --task gsm-synth`, whose CORA row uses the point printed here).

Measured on 32 validation problems (LLaDA 65.6%, 232 forwards): none of 15 points (tau 0.7, 0.8,
0.9 x persistence 1-3; 0.95, 0.98, 0.99 x 1, 3) stays within 2 points, so the pick is LLaDA; the closest, 0.99 x3, reaches
59.4% at 162 forwards, and tau <= 0.8 falls below 7% (gsm-dlm is confidently wrong about digits
its scratchpad has not reached yet).

Usage: python scripts/calibrate_cora.py [N_PROBLEMS] [TOLERANCE]   (default 48 problems, 0.02)
"""

import itertools
import sys

import jaxdec
from jaxdec import diffusion
from jaxdec.tasks import evaluate, gsm_synth

TAUS, PERSISTENCES, MODEL = (0.7, 0.8, 0.9, 0.95, 0.98, 0.99), (1, 2, 3), "zoo:gsm-dlm"


def main(argv=None) -> None:
  args = sys.argv[1:] if argv is None else argv
  n, tolerance = (int(args[0]) if args else 48), (float(args[1]) if len(args) > 1 else 0.02)
  model, tokenizer = jaxdec.load(MODEL), jaxdec.load_tokenizer(MODEL)
  gen = gsm_synth.GEN_LENGTH

  def decoder(scheduler):
    return lambda prompts: jaxdec.diffusion_generate(
        model, prompts, gen_length=gen, block_length=32, steps=gen, scheduler=scheduler,
        cache=diffusion.DualCache(), stop_early=True)

  decoders = {"LLaDA": decoder(diffusion.FixedSteps())}
  for tau, k in itertools.product(TAUS, PERSISTENCES):
    decoders[f"CORA {tau} x{k}"] = decoder(diffusion.Persistence(tau, k))
  problems = gsm_synth.problems("validation", n, 0)
  # One row at a time: on CPU a batch runs until its longest row ends.
  best, results = evaluate.calibrate(decoders, tokenizer, problems, "LLaDA", tolerance,
                                     batch_size=1)
  print(f"{MODEL} on {n} gsm-synth validation problems, dual cache, block 32, steps = {gen}")
  print("| decoder | accuracy | forwards per problem | tokens per forward |")
  print("|---|---|---|---|")
  for name, r in results.items():
    print(f"| {name} | {r.accuracy:.3f} | {r.forwards.mean():.1f} | {r.tokens_per_forward:.2f} |")
  print(f"chosen (fewest forwards within {tolerance} of LLaDA's accuracy): {best}")


if __name__ == "__main__":
  main()
