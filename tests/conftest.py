"""Strict JAX for every test, and 8 simulated CPU devices for the sharding tests."""

import os
import sys

_flag = "--xla_force_host_platform_device_count=8"
if "xla_force_host_platform_device_count" not in os.environ.get("XLA_FLAGS", ""):
  os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

sys.path.insert(0, os.path.dirname(__file__))  # tests/hf_models.py, tests/tiny.py
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "regression"))

from tiny import tiny_model  # noqa: E402


@pytest.fixture(scope="session")
def model():
  """A tiny random Llama-style model with peaked logits (no near-ties for greedy tests)."""
  return tiny_model()
