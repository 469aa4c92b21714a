"""Tile sizes (query rows x key slots) by where the kernel runs.

Not tuned on hardware yet (no GPU or TPU has run this kernel): the GPU sizes are the shipped
Triton attention ops' defaults (64 x 64, powers of two as Triton needs), the TPU ones the
shipped flash attention's (128 query rows, 512 keys: MXU- and lane-aligned). Interpret mode pays
about 0.3 ms per grid step on a CPU, so there the tiles are as large as the problem.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class BlockSizes:
  block_q: int  # Query rows per tile (GQA folds a KV head's query heads into the rows).
  block_k: int  # Key slots per tile.

  def __post_init__(self):
    for name in ("block_q", "block_k"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"BlockSizes.{name} must be a positive int, got {value!r}")


def _pow2_at_least(n: int, floor: int) -> int:
  return max(floor, 1 << max(n - 1, 0).bit_length())


def tuned_block_sizes(rows: int, keys: int, *, variant: str, interpret: bool) -> BlockSizes:
  """Tiles for `rows` query rows against `keys` key slots."""
  if interpret:
    return BlockSizes(block_q=_pow2_at_least(min(rows, 256), 8),
                      block_k=_pow2_at_least(min(keys, 1024), 128))
  if variant == "gpu":
    return BlockSizes(block_q=min(64, _pow2_at_least(rows, 16)), block_k=64)
  return BlockSizes(block_q=min(128, _pow2_at_least(rows, 8)), block_k=512 if keys >= 512 else 128)
