"""Chunk-sparse prefix attention (Prefilling-dLLM): `kernel.chunk_attention` over selected
chunks of a cached prefix, equal to `reference.reference_chunk_attention`; `kernel.merge` joins
its partial result with attention over the rest of the context."""

from pallas_kernels.chunk_attention.kernel import VARIANTS, chunk_attention, merge
from pallas_kernels.chunk_attention.reference import reference_chunk_attention
from pallas_kernels.chunk_attention.tuned_block_sizes import tuned_block_q

__all__ = ["VARIANTS", "chunk_attention", "merge", "reference_chunk_attention", "tuned_block_q"]
