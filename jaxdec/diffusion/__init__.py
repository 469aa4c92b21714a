"""Masked-diffusion decoding (LLaDA, Dream, Fast-dLLM), un-jitted, for use inside a caller's jit.

`jaxdec.diffusion_generate` (api.py) is the validated, jitted entry point. Plug-in parts:
schedulers implement `Scheduler` (schedulers.py; one file per family), caches implement
`DiffusionCache` (caches.py), confidence measures implement `Confidence` (confidence.py).
"""

from jaxdec.diffusion.cai import FirstStepConfidence
from jaxdec.diffusion.archer import Archer
from jaxdec.diffusion.async_lane import AsyncLane
from jaxdec.diffusion.caches import (CanvasView, DiffusionCache, DualCache, NoCache, PrefixCache,
                                     Refreshed)
from jaxdec.diffusion.confidence import (Confidence, LeftToRight, Margin, NegEntropy,
                                         Probability, RandomConfidence)
from jaxdec.diffusion.cora import Persistence
from jaxdec.diffusion.dream import Dream
from jaxdec.diffusion.editing import Editing
from jaxdec.diffusion.fast_dllm import Factor, Frechet, Threshold
from jaxdec.diffusion.flowblock import FlowBlock
from jaxdec.diffusion.llada import FixedSteps
from jaxdec.diffusion.prefilling import PrefillingCache
from jaxdec.diffusion.proposals import EosFlags
from jaxdec.diffusion.sampler import Denoiser, ModelDenoiser, denoise, diffusion_generate
from jaxdec.diffusion.rps import RipplePivot
from jaxdec.diffusion.said import Scaffold
from jaxdec.diffusion.schedulers import (Decision, Ranked, Scheduler, StepView, commit, filled,
                                         rank_confidence, top, transfer_count)

__all__ = ["diffusion_generate", "denoise", "Denoiser", "ModelDenoiser",
           "Scheduler", "StepView", "Decision", "Ranked", "rank_confidence", "commit", "filled", "top",
           "transfer_count", "FixedSteps", "Dream", "Threshold", "Factor", "Frechet", "Editing", "FlowBlock",
           "FirstStepConfidence", "Persistence", "Scaffold",
           "RipplePivot", "AsyncLane",
           "DiffusionCache", "CanvasView", "NoCache", "Refreshed", "PrefixCache", "DualCache", "PrefillingCache", "Archer",
           "Confidence", "Probability", "Margin", "NegEntropy", "RandomConfidence", "LeftToRight",
           "EosFlags"]
