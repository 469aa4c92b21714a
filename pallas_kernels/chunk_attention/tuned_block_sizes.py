"""Query rows per tile; a tile's keys are one chunk (the chunk length is the caller's).

Not tuned on hardware yet: 128 rows on TPU (the MXU's height), 64 on GPU (the shipped Triton
ops' default, a power of two), and in interpret mode as many as the problem has (each grid step
costs about 0.3 ms on a CPU)."""

from __future__ import annotations


def tuned_block_q(rows: int, *, variant: str, interpret: bool) -> int:
  fitted = max(8, 1 << max(rows - 1, 0).bit_length())  # The rows, rounded up to a power of two.
  if interpret:
    return min(fitted, 256)
  return min(fitted, 64 if variant == "gpu" else 128)
