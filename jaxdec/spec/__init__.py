"""Speculative decoding, un-jitted (call inside your own jit); `jaxdec.speculative_generate` is
the validated, jitted entry point.

Drafters implement `Drafter` (one file each), verifiers implement `Verifier` (verify.py).
"""

from jaxdec.spec.adapld import AdaPLD
from jaxdec.spec.draft_model import DraftModel
from jaxdec.spec.eagle import Eagle3, Eagle3Params, EagleLayer
from jaxdec.spec.heads import Heads, HeadsParams
from jaxdec.spec.kforcing import KForcing, NoiseParams, PushForward
from jaxdec.spec.drafter import Context, Drafter, Feedback, Switching
from jaxdec.spec.lookup import PromptLookup
from jaxdec.spec.loop import speculative_generate
from jaxdec.spec.simsd import SimSD
from jaxdec.spec.ssr import SSR, SuffixCache, ssr_generate
from jaxdec.spec.tree import DynamicTree, Topology, Tree
from jaxdec.spec.verify import (Collaborative, Draft, Exact, Greedy, Truncation, Verdict, VerifyInputs,
                                Verifier)

__all__ = ["speculative_generate", "Drafter", "Switching", "Context", "Feedback", "DraftModel",
           "PromptLookup", "AdaPLD", "SimSD", "SSR", "SuffixCache", "ssr_generate", "Heads",
           "HeadsParams", "KForcing", "PushForward", "NoiseParams", "Eagle3", "Eagle3Params",
           "EagleLayer", "Tree", "DynamicTree", "Topology", "Draft", "Verdict", "VerifyInputs",
           "Verifier", "Greedy", "Exact", "Truncation", "Collaborative"]
