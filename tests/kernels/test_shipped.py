"""JAX's shipped kernels where they fit (whole in-order sequences, causal or bidirectional, right
padding): splash (TPU) and mha (GPU) equal the reference in interpret mode, and the "pallas"
backend hands a training forward (`forward(positions=None)`) to the platform's op."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdec.model import Bidirectional, Causal, MaskSpec, forward
from pallas_kernels import shipped
from pallas_kernels.common import assert_close
from pallas_kernels.masked_attention import reference_attention
from tiny import tiny_model


def _case(rng, heads, kv_heads, steps=128):
  q = jnp.asarray(rng.normal(size=(2, steps, heads, 64)), jnp.float32)
  k, v = (jnp.asarray(rng.normal(size=(2, steps, kv_heads, 64)), jnp.float32) for _ in range(2))
  return q, k, v, jnp.asarray([steps, steps * 3 // 5], jnp.int32)


@pytest.mark.parametrize("op", shipped.OPS)
@pytest.mark.parametrize("pattern", [Causal(), Bidirectional()], ids=["causal", "bidirectional"])
@pytest.mark.parametrize("heads, kv_heads", [(4, 4), (4, 2)])
def test_shipped_ops_equal_the_reference(op, pattern, heads, kv_heads):
  rng = np.random.default_rng(heads + kv_heads)
  q, k, v, lengths = _case(rng, heads, kv_heads)
  positions = jnp.broadcast_to(jnp.arange(128, dtype=jnp.int32), (2, 128))
  mask = MaskSpec(q_positions=positions, kv_positions=positions, kv_length=lengths,
                  start=jnp.zeros((2,), jnp.int32), pattern=pattern, in_order=True)
  out = shipped.shipped_attention(q, k, v, lengths, causal=isinstance(pattern, Causal), op=op,
                                  interpret=True)
  real = np.asarray(jnp.arange(128)[None] < lengths[:, None])[:, :, None, None]
  assert_close(out, reference_attention(q, k, v, mask), jnp.float32, where=real)


def test_splash_soft_caps_and_mha_refuses_to():
  rng = np.random.default_rng(0)
  q, k, v, lengths = _case(rng, 4, 2)
  positions = jnp.broadcast_to(jnp.arange(128, dtype=jnp.int32), (2, 128))
  mask = MaskSpec(q_positions=positions, kv_positions=positions, kv_length=lengths,
                  start=jnp.zeros((2,), jnp.int32), in_order=True)
  out = shipped.shipped_attention(q, k, v, lengths, causal=True, op="splash", softcap=3.0,
                                  interpret=True)
  real = np.asarray(jnp.arange(128)[None] < lengths[:, None])[:, :, None, None]
  assert_close(out, reference_attention(q, k, v, mask, softcap=3.0), jnp.float32, where=real)
  assert not shipped.fits("mha", 3.0, 128) and not shipped.fits("splash", None, 100)
  with pytest.raises(ValueError, match="mha cannot run 128 tokens with softcap=3.0"):
    shipped.shipped_attention(q, k, v, lengths, causal=True, op="mha", softcap=3.0)
  with pytest.raises(ValueError, match="unknown shipped op 'flash'"):
    shipped.shipped_attention(q, k, v, lengths, causal=True, op="flash")


@pytest.mark.parametrize("op", shipped.OPS)
def test_a_training_forward_goes_to_the_platform_op(op, monkeypatch):
  """With the platform's op forced (interpret mode), forward(positions=None) on "pallas" runs
  the shipped op in every layer and gives XLA's logits and gradients; a forward with explicit
  positions (the promise is not made) runs jaxdec's own kernel."""
  calls = []
  original = shipped.shipped_attention
  monkeypatch.setattr(shipped, "op_for_platform", lambda: op)
  monkeypatch.setattr(shipped, "shipped_attention",
                      lambda *a, **kw: calls.append(kw["op"]) or original(*a, **kw))
  model = tiny_model(head_dim=64)
  tokens = jnp.asarray(np.random.default_rng(1).integers(0, 128, (2, 128)), jnp.int32)
  pallas = dataclasses.replace(model.config, attention_backend="pallas")

  def loss(params, config, positions):
    logits, _, _ = forward(params, tokens, positions, config=config,
                           valid_lengths=jnp.asarray([128, 90], jnp.int32))
    return jnp.mean(jax.nn.log_softmax(logits)[:, :90, 5])

  want, want_grad = jax.value_and_grad(loss)(model.params, model.config, None)
  got, got_grad = jax.value_and_grad(loss)(model.params, pallas, None)
  assert calls and set(calls) == {op}
  np.testing.assert_allclose(float(got), float(want), rtol=1e-6)
  for g, w in zip(jax.tree.leaves(got_grad), jax.tree.leaves(want_grad)):
    assert_close(g, w, jnp.float32)
  calls.clear()
  positions = jnp.broadcast_to(jnp.arange(128, dtype=jnp.int32), (2, 128))
  np.testing.assert_allclose(float(loss(model.params, pallas, positions)), float(want), rtol=1e-6)
  assert not calls


def test_positions_none_means_in_order_and_needs_no_cache():
  from jaxdec.model import KVCache

  model = tiny_model()
  tokens = jnp.asarray([[5, 6, 7, 8]], jnp.int32)
  explicit, _, _ = forward(model.params, tokens, jnp.arange(4, dtype=jnp.int32)[None],
                           config=model.config)
  implicit, _, _ = forward(model.params, tokens, None, config=model.config)
  np.testing.assert_array_equal(np.asarray(implicit), np.asarray(explicit))
  with pytest.raises(ValueError, match="give positions when decoding with a cache"):
    forward(model.params, tokens, None, KVCache.init(model.config, 1, 8), config=model.config)
