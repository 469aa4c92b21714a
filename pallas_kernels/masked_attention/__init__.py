"""Flash attention over jaxdec's `MaskSpec` (causal, bidirectional, block-causal, trees, windows,
hidden mask keys, per-row cache lengths): `kernel.masked_attention`, equal to
`reference.reference_attention` (plain jnp, independent of jaxdec's own attention).
`tile` holds what the forward (`kernel`) and the backward (`backward`) share."""

from pallas_kernels.masked_attention.kernel import VARIANTS, masked_attention
from pallas_kernels.masked_attention.reference import reference_attention, reference_mask
from pallas_kernels.masked_attention.tuned_block_sizes import BlockSizes, tuned_block_sizes

__all__ = ["VARIANTS", "BlockSizes", "masked_attention", "reference_attention", "reference_mask",
           "tuned_block_sizes"]
