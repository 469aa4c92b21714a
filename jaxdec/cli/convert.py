"""`jaxdec convert`: a Hugging Face checkpoint written as an orbax checkpoint."""

from __future__ import annotations

from jaxdec.cli.common import tokenizer_or_none


def run(args) -> int:
  import jax.numpy as jnp

  import jaxdec

  dtype = None if args.dtype == "keep" else jnp.dtype(args.dtype)
  model = jaxdec.load(args.from_hf, dtype=dtype)
  path = jaxdec.save(model, args.out, tokenizer=tokenizer_or_none(args.from_hf))
  print(f"wrote orbax checkpoint {path} ({model.config.architecture}, "
        f"{model.config.num_params / 1e6:.2f}M params, {jnp.dtype(model.dtype).name})")
  return 0


def add_parser(sub) -> None:
  """`jaxdec convert`."""
  conv = sub.add_parser("convert", help="convert a Hugging Face checkpoint to an orbax checkpoint")
  conv.add_argument("--from-hf", required=True, help="HF checkpoint directory or zoo:NAME")
  conv.add_argument("--out", required=True, help="output directory")
  conv.add_argument("--dtype", default="keep", choices=["keep", "float32", "bfloat16", "float16"],
                    help="weight dtype of the checkpoint (keep = as stored)")
  conv.set_defaults(fn=run)
