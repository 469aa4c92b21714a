"""`jaxdec bench kernels` runs end to end at toy sizes (interpreted on a CPU: it checks the suite,
not kernel speed): every attention case, the chunk-sparse row, and the decode rows."""

import json
import math

import jax.numpy as jnp
import pytest

from jaxdec.bench import kernels
from tiny import tiny_config


def test_every_row_is_measured(tmp_path, capsys):
  out = tmp_path / "kernels.json"
  record = kernels.run(lengths=(64, 128), heads=4, kv_heads=2, head_dim=64, dtype="float32",
                       repeats=1, dense_limit=64, chunk=32, decode_batch_sizes=(2,), prompt_len=8,
                       new_tokens=4, decode_config=tiny_config(), out=str(out))
  cases = [(r["case"], r["context"]) for r in record["rows"]]
  assert ("prefill (causal)", 64) in cases and ("prefill (causal)", 128) not in cases
  assert ("verify tree (16 nodes)", 128) in cases and ("diffusion block 32", 64) in cases
  assert ("chunk-sparse top 4 of 4 x 32 vs dense", 128) in cases
  assert not any(case.startswith("chunk-sparse") and n == 64 for case, n in cases)
  assert ("decode, batch 2, pallas", 12) in cases and ("decode, batch 2, xla", 12) in cases
  for row in record["rows"]:  # Each row's figures are measured and its ratio is XLA over kernel.
    if "kernel speedup" in row:
      assert 0 < row["xla ms"] < math.inf and 0 < row["kernel ms"] < math.inf, row
      assert row["kernel speedup"] == pytest.approx(row["xla ms"] / row["kernel ms"]), row
    else:  # A decode row.
      assert 0 < row["tokens/s"] < math.inf, row
  assert json.loads(out.read_text())["suite"] == "kernels"
  assert "interpret mode: not a speed measurement" in capsys.readouterr().out


def test_the_tree_case_is_a_binary_tree():
  tree = kernels._chain_tree(7)[0]
  assert tree.dtype == jnp.bool_ and bool(tree[6, 2]) and bool(tree[6, 0]) and not bool(tree[6, 1])
