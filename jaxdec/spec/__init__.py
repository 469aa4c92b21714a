"""Speculative decoding, un-jitted (call inside your own jit); `jaxdec.speculative_generate` is
the validated, jitted entry point."""

from jaxdec.spec.drafters import AdaPLD, Context, DraftModel, Drafter, PromptLookup
from jaxdec.spec.loop import speculative_generate
from jaxdec.spec.tree import Tree
from jaxdec.spec.verify import Collaborative, Draft, Exact, Greedy, Truncation, Verdict

__all__ = ["speculative_generate", "Drafter", "Context", "DraftModel", "PromptLookup", "AdaPLD",
           "Tree", "Draft", "Verdict", "Greedy", "Exact", "Truncation", "Collaborative"]
