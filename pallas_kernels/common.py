"""What every kernel shares: where it runs, and how its tests compare it with its reference."""

from __future__ import annotations

import jax
import jax.numpy as jnp
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


def variants_to_test(variants) -> list[str]:
  """The variants a test runs here: all of them in interpret mode (off GPU/TPU), else only the
  platform's, compiled."""
  return list(variants) if default_interpret() else [default_variant()]


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


def online_softmax_step(s, v, carry):
  """Fold one tile of masked scores s f32[bq, bk] (-inf = hidden) and its values v[bk, hd] into
  the running (max [bq, 1], sum [bq, 1], unnormalised output f32[bq, hd]). Probabilities are
  rounded to v's dtype before the value product, as the XLA path does."""
  m_prev, l_prev, acc = carry
  m_next = jnp.maximum(m_prev, jnp.max(s, axis=1, keepdims=True))
  m_safe = jnp.where(m_next == -jnp.inf, 0.0, m_next)  # No key seen yet: exp(-inf) = 0, no NaN.
  p = jnp.exp(s - m_safe)
  alpha = jnp.exp(m_prev - m_safe)
  l_next = alpha * l_prev + jnp.sum(p, axis=1, keepdims=True)
  pv = jnp.dot(p.astype(v.dtype), v, preferred_element_type=jnp.float32)
  return m_next, l_next, alpha * acc + pv


def softmax_start(rows: int, head_dim: int):
  """The running (max, sum, output) before any key."""
  return (jnp.full((rows, 1), -jnp.inf, jnp.float32), jnp.zeros((rows, 1), jnp.float32),
          jnp.zeros((rows, head_dim), jnp.float32))


def softmax_finish(m, l, acc, empty_lse: float):
  """(output f32[bq, hd], log-sum-exp f32[bq, 1]); a row that saw no key gets output 0 and
  log-sum-exp `empty_lse`."""
  seen = l > 0
  out = jnp.where(seen, acc / jnp.where(seen, l, 1.0), 0.0)
  return out, jnp.where(seen, m + jnp.log(jnp.where(seen, l, 1.0)), empty_lse)


def pad_to(x: jax.Array, axis: int, multiple: int) -> jax.Array:
  """x zero-padded along `axis` to a multiple of `multiple`."""
  pad = -x.shape[axis] % multiple
  if not pad:
    return x
  widths = [(0, 0)] * x.ndim
  widths[axis] = (0, pad)
  return jnp.pad(x, widths)


def fold_rows(q: jax.Array, kv_heads: int, block_q: int) -> jax.Array:
  """q[B, T, H, hd] -> [B, K, R, hd]: the G = H / K query heads sharing a KV head folded into
  its rows (row t * G + g), padded to a multiple of block_q, so a few queries still fill a tile."""
  batch, steps, heads, head_dim = q.shape
  rows = q.reshape(batch, steps, kv_heads, heads // kv_heads, head_dim).transpose(0, 2, 1, 3, 4)
  return pad_to(rows.reshape(batch, kv_heads, -1, head_dim), 2, block_q)


def unfold_rows(rows: jax.Array, steps: int, heads: int) -> jax.Array:
  """The inverse of `fold_rows` on [B, K, R_padded, ...] -> [B, T, H, ...]."""
  batch, kv_heads = rows.shape[:2]
  group, tail = heads // kv_heads, rows.shape[3:]
  out = rows[:, :, :steps * group].reshape((batch, kv_heads, steps, group) + tail)
  return jnp.moveaxis(out, 1, 2).reshape((batch, steps, heads) + tail)


def out_and_lse_shapes(q_rows: jax.Array) -> list[jax.ShapeDtypeStruct]:
  """A kernel's outputs over folded rows: the attention output like q_rows [B, K, R, hd], and
  each row's log-sum-exp f32[B, K, R, 1]."""
  return [jax.ShapeDtypeStruct(q_rows.shape, q_rows.dtype),
          jax.ShapeDtypeStruct(q_rows.shape[:3] + (1,), jnp.float32)]


# The TPU variants keep the running softmax state of a [rows, head_dim] tile in VMEM across the
# innermost ("arbitrary") grid axis: max and sum replicated over a lane width, and the output.
_LANES = 128


def tpu_softmax_scratch(rows: int, head_dim: int) -> list:
  from jax.experimental.pallas import tpu as pltpu

  return [pltpu.VMEM((rows, _LANES), jnp.float32), pltpu.VMEM((rows, _LANES), jnp.float32),
          pltpu.VMEM((rows, head_dim), jnp.float32)]


def tpu_row_tiles_params():
  """Mosaic parameters of a grid (batch, kv head, query tile, reduction axis)."""
  from jax.experimental.pallas import tpu as pltpu

  return pltpu.CompilerParams(dimension_semantics=("parallel", "parallel", "parallel", "arbitrary"))


def scratch_reset(m_ref, l_ref, acc_ref) -> None:
  m_ref[...] = jnp.full(m_ref.shape, -jnp.inf, jnp.float32)
  l_ref[...] = jnp.zeros(l_ref.shape, jnp.float32)
  acc_ref[...] = jnp.zeros(acc_ref.shape, jnp.float32)


def scratch_read(m_ref, l_ref, acc_ref):
  """The running (max, sum, output) held in the scratch refs."""
  return m_ref[:, 0:1], l_ref[:, 0:1], acc_ref[...]


def scratch_write(m_ref, l_ref, acc_ref, carry) -> None:
  m, l, acc = carry
  m_ref[...] = jnp.broadcast_to(m, m_ref.shape)
  l_ref[...] = jnp.broadcast_to(l, l_ref.shape)
  acc_ref[...] = acc
