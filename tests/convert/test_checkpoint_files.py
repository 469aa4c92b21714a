"""Broken checkpoint files raise errors that name the file, not the parser's bare error."""

import json
import os
import re

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import jaxdec


@pytest.fixture
def exported(tmp_path, model):
  return jaxdec.export_hf(model, None, str(tmp_path / "ckpt"))


def _overwrite(path, data: bytes):
  with open(path, "wb") as f:
    f.write(data)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_corrupt_safetensors_names_the_file(exported, damage):
  file = os.path.join(exported, "model.safetensors")
  with open(file, "rb") as f:
    data = f.read()
  _overwrite(file, {"truncated": data[: len(data) // 2],
                    "garbage": np.random.RandomState(0).bytes(len(data)),
                    "empty": b""}[damage])
  with pytest.raises(ValueError, match=f"checkpoint file {re.escape(file)} is corrupt or truncated"):
    jaxdec.load(exported)


def _shard(exported):
  """Rewrite `exported` as two safetensors shards plus their index; returns the shard names."""
  tensors = load_file(os.path.join(exported, "model.safetensors"))
  os.remove(os.path.join(exported, "model.safetensors"))
  names = sorted(tensors)
  shards = {"model-00001-of-00002.safetensors": names[::2],
            "model-00002-of-00002.safetensors": names[1::2]}
  for file, keys in shards.items():
    save_file({k: tensors[k] for k in keys}, os.path.join(exported, file), metadata={"format": "pt"})
  weight_map = {k: f for f, keys in shards.items() for k in keys}
  with open(os.path.join(exported, "model.safetensors.index.json"), "w") as f:
    json.dump({"weight_map": weight_map}, f)
  return sorted(shards)


def test_sharded_checkpoint_loads(exported, model):
  _shard(exported)
  again = jaxdec.load(exported)
  for a, b in zip(jaxdec.model.params.flatten(again.params).values(),
                  jaxdec.model.params.flatten(model.params).values()):
    np.testing.assert_array_equal(a, b)


def test_missing_shard_is_named(exported):
  first, second = _shard(exported)
  os.remove(os.path.join(exported, second))
  with pytest.raises(FileNotFoundError, match=rf"lists shards missing from .*\['{second}'\]"):
    jaxdec.load(exported)


def test_truncated_shard_is_named(exported):
  _, second = _shard(exported)
  file = os.path.join(exported, second)
  with open(file, "rb") as f:
    data = f.read()
  _overwrite(file, data[: len(data) // 2])
  with pytest.raises(ValueError, match=f"{re.escape(file)} is corrupt or truncated"):
    jaxdec.load(exported)


def test_unreadable_index_is_named(exported):
  _shard(exported)
  _overwrite(os.path.join(exported, "model.safetensors.index.json"), b'{"weight_map": ')
  with pytest.raises(ValueError, match="model.safetensors.index.json is corrupt"):
    jaxdec.load(exported)


@pytest.mark.hf
@pytest.mark.parametrize("damage", ["truncated", "garbage"])
def test_corrupt_pytorch_bin_names_the_file(exported, damage):
  torch = pytest.importorskip("torch")
  tensors = load_file(os.path.join(exported, "model.safetensors"))
  os.remove(os.path.join(exported, "model.safetensors"))
  file = os.path.join(exported, "pytorch_model.bin")
  torch.save({k: torch.from_numpy(v) for k, v in tensors.items()}, file)
  with open(file, "rb") as f:
    data = f.read()
  _overwrite(file, data[: len(data) // 2] if damage == "truncated"
             else np.random.RandomState(0).bytes(len(data)))
  with pytest.raises(ValueError, match=f"{re.escape(file)} is corrupt or truncated"):
    jaxdec.load(exported)
