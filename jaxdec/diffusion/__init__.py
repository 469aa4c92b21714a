"""Masked-diffusion decoding (LLaDA, Dream, Fast-dLLM), un-jitted, for use inside a caller's jit.

`jaxdec.diffusion_generate` (api.py) is the validated, jitted entry point.
"""

from jaxdec.diffusion.caches import DualCache, PrefixCache
from jaxdec.diffusion.proposals import EosFlags
from jaxdec.diffusion.sampler import (Denoiser, DiffusionOutput, ModelDenoiser, denoise,
                                      diffusion_generate)
from jaxdec.diffusion.schedulers import (Dream, Factor, FixedSteps, Frechet, Scheduler, Threshold,
                                         transfer_count)

__all__ = ["diffusion_generate", "denoise", "DiffusionOutput", "Denoiser", "ModelDenoiser",
           "FixedSteps", "Dream", "Threshold", "Factor", "Frechet", "Scheduler", "transfer_count",
           "PrefixCache", "DualCache", "EosFlags"]
