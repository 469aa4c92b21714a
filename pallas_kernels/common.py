"""What every kernel shares: where it runs, and how its tests compare it with its reference."""

from __future__ import annotations

import jax
import numpy as np

# Absolute tolerance by dtype of the kernel's inputs (outputs are compared in float32). bfloat16
# and float16 round the probabilities before the value product, as the reference does, but at
# other points than the kernel; float32 differs by summation order only.
TOLERANCES = {np.dtype("float32"): 2e-5, np.dtype("bfloat16"): 2e-2, np.dtype("float16"): 4e-3}
# The largest error allowed relative to the reference's own scale (its root mean square): a check
# a loose absolute tolerance cannot satisfy for a wrong kernel, whose errors are of that scale.
RELATIVE = {np.dtype("float32"): 1e-5, np.dtype("bfloat16"): 1e-2, np.dtype("float16"): 2e-3}


def platform() -> str:
  """"cpu", "gpu" or "tpu": the default backend's platform."""
  return jax.default_backend()


def default_interpret() -> bool:
  """Kernels compile on GPU and TPU; anywhere else they run in Pallas' interpret mode."""
  return platform() not in ("gpu", "tpu")


def default_variant() -> str:
  """"gpu" (Triton lowering) on a GPU, else "tpu" (Mosaic; also what interpret mode runs)."""
  return "gpu" if platform() == "gpu" else "tpu"


def assert_close(actual, expected, dtype, where=None) -> None:
  """actual == expected within the dtype's absolute tolerance AND its relative-error bound.
  `where` (bool, broadcast to the arrays) restricts the comparison."""
  dtype = np.dtype(dtype)
  actual = np.asarray(actual, np.float32)
  expected = np.asarray(expected, np.float32)
  if actual.shape != expected.shape:
    raise AssertionError(f"shape {actual.shape} != reference {expected.shape}")
  if where is not None:
    keep = np.broadcast_to(where, actual.shape)
    actual, expected = actual[keep], expected[keep]
  if not np.all(np.isfinite(actual)):
    raise AssertionError(f"{np.sum(~np.isfinite(actual))} non-finite outputs")
  error = np.abs(actual - expected)
  worst = float(error.max(initial=0.0))
  scale = float(np.sqrt(np.mean(np.square(expected)))) if expected.size else 0.0
  relative = float(np.sqrt(np.mean(np.square(error)))) / max(scale, 1e-30) if expected.size else 0.0
  if worst > TOLERANCES[dtype] or relative > RELATIVE[dtype]:
    raise AssertionError(f"{dtype}: max abs error {worst:.3g} (tolerance {TOLERANCES[dtype]:.1g}), "
                         f"rms error / rms reference {relative:.3g} (bound {RELATIVE[dtype]:.1g})")
