"""The decoding flags that `generate` and `eval --task` share: the method (asked for, or implied
by the flags and the model), sampling, the drafter / verifier / scheduler / cache (`plugins`),
the diffusion canvas, and the decoder they make."""

from __future__ import annotations

from jaxdec.cli import plugins
from jaxdec.cli.common import flag, given, positive_int

METHODS = ("greedy", "sample", "speculative", "diffusion")
_CANVAS_FLAGS = ("gen_length", "block_length", "steps", "stop_early", "visible_suffix")


def speculative_flags() -> tuple[str, ...]:
  """Flags that only speculative decoding reads: giving one picks it when --method is left out."""
  return ("drafter", *plugins.params("drafter"), "verifier", *plugins.params("verifier"))


def diffusion_flags() -> tuple[str, ...]:
  """Flags that only diffusion decoding reads: giving one picks it when --method is left out."""
  return ("scheduler", *plugins.params("scheduler"), "cache", *plugins.params("cache"),
          *_CANVAS_FLAGS)


def requested_method(args) -> tuple[str | None, str]:
  """(--method, or the method the flags imply, or None to let the model decide; what chose it).

  Raises ValueError naming a flag that the chosen method would ignore."""
  speculative, diffusion = given(args, speculative_flags()), given(args, diffusion_flags())
  method, why = args.method, f"--method {args.method}"
  if method is None and speculative and diffusion:
    raise ValueError(f"{flag(speculative[0])} is a speculative-decoding flag and "
                     f"{flag(diffusion[0])} a diffusion one: pass the flags of one method")
  if method is None and (speculative or diffusion):
    method = "speculative" if speculative else "diffusion"
    why = flag((speculative or diffusion)[0])
  for flags, owner in ((speculative, "speculative"), (diffusion, "diffusion")):
    if flags and method != owner:
      raise ValueError(f"{flag(flags[0])} only acts with --method {owner}, not with --method "
                       f"{method}")
  if method == "greedy" and args.temperature:
    raise ValueError(f"--temperature {args.temperature} samples, but --method greedy decodes "
                     "greedily: drop one of them")
  if method == "sample" and args.temperature == 0:
    raise ValueError("--method sample needs --temperature > 0 (left out: 1.0), got --temperature 0")
  return method, why


def method(args, model) -> str:
  """The decoding method: as requested, else diffusion for a masked-diffusion model, sample when
  --temperature > 0, greedy otherwise; ValueError when the model cannot run it."""
  chosen, why = requested_method(args)
  causal = model.config.is_causal
  if chosen is None:
    chosen = "diffusion" if not causal else "sample" if args.temperature else "greedy"
  elif chosen == "diffusion" and causal:
    raise ValueError(f"{why} needs a masked-diffusion model (LLaDA, Dream, zoo:pycode-dlm); "
                     f"--model {args.model} is autoregressive")
  elif chosen != "diffusion" and not causal:
    raise ValueError(f"{why} needs an autoregressive model; --model {args.model} is a "
                     "masked-diffusion model: leave --method out (diffusion) or pass "
                     "--method diffusion")
  if chosen == "diffusion":
    controls = [name for name, on in (("--stop", args.stop), ("--stream", args.stream),
                                      ("--logprobs", args.logprobs),
                                      ("--min-new-tokens", args.min_new_tokens),
                                      ("--repetition-penalty", args.repetition_penalty != 1.0))
                if on]
    if controls:
      raise ValueError(f"{controls[0]} acts on autoregressive and speculative decoding, not on "
                       "diffusion decoding")
  return chosen


def _sampling(args, method: str):
  """(Sampling or None for greedy, PRNG key or None); ValueError for a setting that the method
  would ignore. Diffusion decoding returns its temperature in place of a Sampling."""
  import jax

  import jaxdec

  # Left out: 1.0 for --method sample, else 0 (greedy).
  temperature = args.temperature if args.temperature is not None else \
      1.0 if method == "sample" else 0.0
  if temperature < 0:
    raise ValueError(f"--temperature must be >= 0 (0 = greedy), got {temperature}")
  if args.top_k < 0:
    raise ValueError(f"--top-k must be >= 0 (0 = off), got {args.top_k}")
  if not 0 < args.top_p <= 1:
    raise ValueError(f"--top-p must be in (0, 1] (1 = off), got {args.top_p}")
  if method == "diffusion" and (args.top_k or args.top_p < 1):
    raise ValueError(f"--top-k {args.top_k} / --top-p {args.top_p} act on autoregressive "
                     "sampling; diffusion decoding samples with --temperature alone")
  if temperature == 0:
    if args.top_k or args.top_p < 1 or args.seed is not None:
      raise ValueError(f"--top-k {args.top_k} / --top-p {args.top_p} / --seed {args.seed} only "
                       "act on sampling, but --temperature 0 decodes greedily; pass "
                       "--temperature > 0 (e.g. 1.0) to sample")
    return (0.0 if method == "diffusion" else None), None
  key = jax.random.key(0 if args.seed is None else args.seed)
  if method == "diffusion":
    return temperature, key
  return jaxdec.Sampling.create(temperature, args.top_k, args.top_p), key


def _diffusion_shape(args) -> tuple[int, int, int]:
  """(gen_length, block_length, steps) with their defaults: --max-new-tokens, 32 (or the whole
  canvas when shorter), one step per token; ValueError naming the flag that does not divide."""
  gen = args.max_new_tokens if args.gen_length is None else args.gen_length
  gen_flag = "--max-new-tokens" if args.gen_length is None else "--gen-length"
  block = min(32, gen) if args.block_length is None else args.block_length
  steps = gen if args.steps is None else args.steps
  if gen < 1 or block < 1 or steps < 1:
    raise ValueError(f"--gen-length {gen} / --block-length {block} / --steps {steps} must be "
                     "positive")
  if gen % block:
    raise ValueError(f"{gen_flag} {gen} (the canvas length) is not a multiple of --block-length "
                     f"{block}")
  if steps % (gen // block):
    raise ValueError(f"--steps {steps} is not a multiple of the number of blocks, "
                     f"{gen} // {block} = {gen // block}")
  return gen, block, steps


def decoder(args, model, method: str, tokenizer=None, stream=None, stop_early: bool = False):
  """fn(prompts: list of token-id lists) -> DecodeOutput; plug-ins and draft models built once.
  `stream`: the AR / speculative loops' per-step callback (jaxdec.generate's `stream`);
  `stop_early`: diffusion rows end at the block holding their first stop token."""
  import jaxdec

  sampling, key = _sampling(args, method)
  if method == "diffusion":
    gen, block, steps = _diffusion_shape(args)
    scheduler, cache = plugins.scheduler(args), plugins.cache(args)
    return lambda prompts: jaxdec.diffusion_generate(
        model, prompts, gen_length=gen, block_length=block, steps=steps, scheduler=scheduler,
        cache=cache, temperature=sampling, key=key, stop_early=stop_early or bool(args.stop_early),
        visible_suffix=args.visible_suffix)
  budget = {"max_new_tokens": args.max_new_tokens, "sampling": sampling, "key": key,
            "min_new_tokens": args.min_new_tokens, "repetition_penalty": args.repetition_penalty,
            "logprobs": args.logprobs, "stream": stream}
  if args.stop:
    budget.update(stop_strings=args.stop, tokenizer=tokenizer)
  if method == "speculative":
    drafter, verifier = plugins.drafter(args), plugins.verifier(args)
    return lambda prompts: jaxdec.speculative_generate(model, prompts, drafter, verifier, **budget)
  return lambda prompts: jaxdec.generate(model, prompts, **budget)


def add_sampling_flags(parser) -> None:
  """The sampling settings."""
  sample = parser.add_argument_group("sampling (--method sample, speculative, diffusion)")
  sample.add_argument("--temperature", type=float,
                      help="0 = greedy; > 0 samples (needed by --top-k / --top-p / --seed); "
                           "left out: 1.0 with --method sample, else 0")
  sample.add_argument("--top-k", type=int, default=0, help="sample from the k likeliest (0 = off)")
  sample.add_argument("--top-p", type=float, default=1.0, help="nucleus sampling mass (1 = off)")
  sample.add_argument("--seed", type=int, help="sampling seed (left out: 0)")


def add_speculative_flags(parser) -> None:
  """The drafter and the verifier, with the flags the declared plug-ins read."""
  group = parser.add_argument_group(
      "speculative decoding (any of these implies --method speculative)")
  group.add_argument("--drafter", metavar=plugins.metavar("drafter"),
                     help=f"{plugins.choices_help('drafter')}; left out: "
                          f"{plugins.DEFAULT_DRAFTER}")
  plugins.add_param_flags(group, "drafter")
  group.add_argument("--verifier", choices=plugins.names("verifier"),
                     help=f"{plugins.choices_help('verifier')}; left out: greedy, or exact when "
                          "sampling")
  plugins.add_param_flags(group, "verifier")


def add_diffusion_flags(parser) -> None:
  """The scheduler, the cache (with the flags the declared plug-ins read) and the canvas."""
  group = parser.add_argument_group("diffusion decoding (any of these implies --method diffusion)")
  group.add_argument("--scheduler", choices=plugins.names("scheduler"),
                     help=f"which masks a step commits: {plugins.choices_help('scheduler')}; each "
                          "at its defaults but for the flags named (other settings: from "
                          "Python, jaxdec.diffusion); left out: dream for a shifted-logit "
                          "(Dream) model, else fixed")
  plugins.add_param_flags(group, "scheduler")
  group.add_argument("--cache", choices=("none", *plugins.names("cache")),
                     help=f"none (exact), {plugins.choices_help('cache')}; left out: none")
  plugins.add_param_flags(group, "cache")
  group.add_argument("--gen-length", type=positive_int,
                     help="canvas tokens per prompt, a multiple of --block-length (left out: "
                          "--max-new-tokens)")
  group.add_argument("--block-length", type=positive_int,
                     help="tokens a block; blocks are decoded left to right (left out: 32, or "
                          "the canvas when shorter)")
  group.add_argument("--steps", type=positive_int,
                     help="forwards of the step-counting schedulers (fixed, dream) over the whole "
                          "canvas, a multiple of the number of blocks (left out: --gen-length)")
  group.add_argument("--stop-early", action="store_true", default=None,
                     help="end a row at the block holding its first EOS instead of decoding "
                          "every block (jaxdec eval --task always does)")
  group.add_argument("--visible-suffix", type=int,
                     help="canvas tokens after the current block the model sees (left out: all, "
                          "as LLaDA and Dream; 0: none, as block-diffusion models decode)")
