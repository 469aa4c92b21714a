"""Pallas attention kernels, one folder per kernel: kernel.py (TPU and GPU variants), reference.py
(what it must equal) and tuned_block_sizes.py; `common` holds where kernels run and how tests
compare them.

  masked_attention   flash attention over jaxdec's `MaskSpec`: causal, bidirectional,
                     block-causal, draft trees, windows, hidden mask keys, per-row cache lengths
                     (what `jaxdec.load(..., attention="pallas")` runs).
"""
