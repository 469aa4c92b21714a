"""jaxdec: fast language-model decoding in JAX.

    import jaxdec
    model = jaxdec.load("zoo:pycode-ar")
    out = jaxdec.generate(model, [[1, 2, 3]], max_new_tokens=32)
    texts = jaxdec.complete(model, jaxdec.load_tokenizer("zoo:pycode-ar"), ["def f(x):"])
"""

from jaxdec.api import (diffusion_generate, forward, generate, parallel_generate,
                        push_forward_generate, speculative_generate, ssr_generate)
from jaxdec.io import (export_hf, load, load_drafter, load_push_forward, load_tokenizer, save,
                       shard)
from jaxdec.model import Model, ModelConfig
from jaxdec.sampling import Sampling
from jaxdec.text import complete

__version__ = "0.1.0"

__all__ = ["load", "load_drafter", "load_push_forward", "load_tokenizer", "forward", "generate",
           "speculative_generate", "diffusion_generate", "parallel_generate", "ssr_generate", "push_forward_generate", "complete", "export_hf", "save", "shard", "Model", "ModelConfig", "Sampling"]
