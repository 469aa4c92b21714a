"""Pallas attention kernels (tree / block-causal / chunk-sparse masks), one folder per kernel with
kernel.py, reference.py (plain jnp) and tuned block sizes. Kernels are added with the kernels
issue; `jaxdec.model.attention` is the XLA reference they must match.
"""
