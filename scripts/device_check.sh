#!/usr/bin/env bash
# On a GPU or TPU machine, in under 8 minutes: the kernel tests compiled (not interpreted), then
# kernel vs XLA attention times at 2K-32K and the decode tokens/s of a Llama-3-8B-shaped model
# (random bf16 weights) at batch 1 and 64 against the memory-bandwidth bound.
#
#   bash scripts/device_check.sh            # needs jax with the accelerator's plugin installed
#
# Results: bench_results/kernels_device.json and the printed tables.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python}
"$PY" - <<'PY' || exit 1
import jax
platform = jax.default_backend()
print("devices:", jax.devices())
if platform not in ("gpu", "tpu"):
    raise SystemExit(f"device_check: the default backend is {platform!r}, not a GPU or TPU")
PY
status=0
echo "== kernel tests, compiled =="
timeout 200 "$PY" -m pytest -q -p no:cacheprovider tests/kernels/test_masked_attention.py \
  tests/kernels/test_chunk_attention.py || status=1
echo "== kernels vs XLA attention, then 8B-shaped decode =="
timeout 240 "$PY" -m jaxdec.cli bench kernels --lengths 2048 8192 32768 --repeats 5 \
  --decode-batch-sizes 1 64 --out bench_results/kernels_device.json || status=1
exit $status
