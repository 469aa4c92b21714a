"""EAGLE-3 drafters in the published layout (`jaxdec.convert.eagle3`): a checkpoint built from
transformers' Llama layer reads into the documented params and decodes losslessly; jaxdec's own
export round-trips; malformed directories raise errors that name the problem."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdec
from jaxdec.convert.eagle3 import is_eagle3_dir, read_eagle3, write_eagle3
from jaxdec.train.eagle import target_head
from tiny import tiny_model

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
from safetensors.torch import load_file, save_file  # noqa: E402

D, H, K, HD, F, V, VD = 64, 4, 2, 16, 128, 128, 48
DRAFT_IDS = np.sort(np.random.RandomState(1).choice(V, VD, replace=False))


@pytest.fixture(scope="module")
def target():
  return tiny_model(seed=3, std=0.3, num_layers=4, tokens=dict(eos=(), pad=None))


def _public_tensors(seed=0) -> dict:
  """A public EAGLE-3 state dict: transformers' LlamaDecoderLayer as the midlayer, its q/k/v
  widened to read [embedding, feature] (2D), every weight random (norms too, so a transposed or
  swapped tensor cannot pass)."""
  from transformers.models.llama.modeling_llama import LlamaDecoderLayer

  torch.manual_seed(seed)
  config = transformers.LlamaConfig(hidden_size=D, num_attention_heads=H, num_key_value_heads=K,
                                    head_dim=HD, intermediate_size=F, vocab_size=V)
  layer = LlamaDecoderLayer(config, layer_idx=0)
  for name, out in (("q_proj", H * HD), ("k_proj", K * HD), ("v_proj", K * HD)):
    setattr(layer.self_attn, name, torch.nn.Linear(2 * D, out, bias=False))
  layer.hidden_norm = torch.nn.Module()
  layer.hidden_norm.weight = torch.nn.Parameter(torch.ones(D))
  tensors = {f"midlayer.{k}": v for k, v in layer.state_dict().items()}
  tensors = {k: 1.0 + 0.1 * torch.randn(v.shape) if k.endswith("norm.weight")
             else 0.1 * torch.randn(v.shape) for k, v in tensors.items()}
  tensors.update({"fc.weight": 0.1 * torch.randn(D, 3 * D), "norm.weight": 1.0 + 0.1 * torch.randn(D),
                  "lm_head.weight": 0.3 * torch.randn(VD, D)})
  ids = torch.as_tensor(DRAFT_IDS, dtype=torch.long)
  tensors["d2t"] = ids - torch.arange(VD)
  tensors["t2d"] = torch.zeros(V, dtype=torch.bool)
  tensors["t2d"][ids] = True
  return tensors


def _public_config(**changes) -> dict:
  config = {"architectures": ["LlamaForCausalLMEagle3"], "model_type": "llama", "hidden_size": D,
            "intermediate_size": F, "num_attention_heads": H, "num_key_value_heads": K,
            "head_dim": HD, "num_hidden_layers": 1, "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
            "max_position_embeddings": 256, "vocab_size": V, "draft_vocab_size": VD,
            "tie_word_embeddings": False, "eagle_config": {"eagle_aux_hidden_state_layer_ids": [1, 2, 3]}}
  config.update(changes)
  return config


def _save(directory, tensors, config) -> str:
  os.makedirs(directory, exist_ok=True)
  save_file({k: v.contiguous() for k, v in tensors.items()}, os.path.join(directory, "model.safetensors"))
  with open(os.path.join(directory, "config.json"), "w") as f:
    json.dump(config, f)
  return str(directory)


def test_a_published_checkpoint_reads_as_documented_and_decodes_losslessly(target, tmp_path):
  tensors = _public_tensors()
  directory = _save(tmp_path / "eagle3", tensors, _public_config())
  assert is_eagle3_dir(directory)
  drafter = read_eagle3(directory, target=target)
  t = {k: v.numpy() for k, v in tensors.items()}
  layer = drafter.params.layer
  close = lambda a, b: np.testing.assert_allclose(np.asarray(a), b, rtol=1e-6)
  close(layer.wq, t["midlayer.self_attn.q_proj.weight"].T.reshape(2 * D, H, HD))
  close(layer.wk, t["midlayer.self_attn.k_proj.weight"].T.reshape(2 * D, K, HD))
  close(layer.wv, t["midlayer.self_attn.v_proj.weight"].T.reshape(2 * D, K, HD))
  close(layer.wo, t["midlayer.self_attn.o_proj.weight"].T.reshape(H, HD, D))
  close(layer.input_norm, t["midlayer.input_layernorm.weight"])
  close(layer.hidden_norm, t["midlayer.hidden_norm.weight"])
  close(layer.mlp_norm, t["midlayer.post_attention_layernorm.weight"])
  for ours, theirs in (("w_gate", "gate_proj"), ("w_up", "up_proj"), ("w_down", "down_proj")):
    close(getattr(layer, ours), t[f"midlayer.mlp.{theirs}.weight"].T)
  close(drafter.params.fc, t["fc.weight"].T)
  close(drafter.params.norm, t["norm.weight"])
  close(drafter.head, t["lm_head.weight"].T)
  np.testing.assert_array_equal(np.asarray(drafter.draft_ids), DRAFT_IDS)
  np.testing.assert_array_equal(np.asarray(drafter.embed), np.asarray(target.params.embed))
  assert drafter.layers == (1, 2, 3)
  assert drafter.config.num_layers == 1 and drafter.reuse == "hidden"

  prompts = np.random.RandomState(0).randint(2, V, size=(3, 5)).tolist()
  ref = jaxdec.generate(target, prompts, max_new_tokens=16, stop_tokens=())
  out = jaxdec.speculative_generate(target, prompts, drafter.with_tree(top_k=3, depth=3, size=6),
                                    max_new_tokens=16, stop_tokens=())
  np.testing.assert_array_equal(out.tokens, ref.tokens)  # Lossless, whatever a random drafter drafts.

  # Without eagle_config, EAGLE-3's default layers for the target; load_drafter dispatches here.
  _save(tmp_path / "plain", tensors, {k: v for k, v in _public_config().items() if k != "eagle_config"})
  plain = jaxdec.load_drafter(str(tmp_path / "plain"), target=target)
  assert plain.layers == (1, 2, 3) and (plain.top_k, plain.depth, plain.size) == (4, 5, 16)
  with pytest.raises(ValueError, match="EAGLE-3.*choices, tree_size"):
    jaxdec.load_drafter(str(tmp_path / "plain"), tree_size=4, target=target)


@pytest.mark.parametrize("lm_head", [True, False])
def test_jaxdec_export_round_trips(target, tmp_path, lm_head):
  """write_eagle3 -> read_eagle3 gives the drafter back; without lm_head the head is the
  target's restricted to the draft ids. Unsorted layers are written sorted, fc's blocks with them."""
  drafter = read_eagle3(_save(tmp_path / "src", _public_tensors(1), _public_config()), target=target)
  fc = np.asarray(drafter.params.fc)
  shuffled = drafter.replace(layers=(3, 1, 2), top_k=3, depth=4, size=9,
                             params=drafter.params.replace(fc=jnp.asarray(np.concatenate(
                                 [fc[2 * D:], fc[:D], fc[D:2 * D]]))))
  out = write_eagle3(shuffled, str(tmp_path / "out"), dtype="float32", lm_head=lm_head,
                     extra={"base_model_name_or_path": "meta-llama/not-here", "evaluation": {"x": 1}})
  saved = load_file(os.path.join(out, "model.safetensors"))
  assert ("lm_head.weight" in saved) == lm_head and "embed_tokens.weight" not in saved
  with open(os.path.join(out, "config.json")) as f:
    config = json.load(f)
  assert config["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [1, 2, 3]
  assert config["evaluation"] == {"x": 1}
  back = jaxdec.load_drafter(out, target=target)
  assert (back.layers, back.top_k, back.depth, back.size) == ((1, 2, 3), 3, 4, 9)
  for a, b in zip(*(jax.tree.leaves(d.params) for d in (drafter, back))):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  np.testing.assert_array_equal(np.asarray(back.draft_ids), DRAFT_IDS)
  want = drafter.head if lm_head else target_head(target)[:, DRAFT_IDS]
  np.testing.assert_array_equal(np.asarray(back.head), np.asarray(want))


def test_the_base_model_in_config_json_stands_in_for_the_target(target, tmp_path):
  jaxdec.save(target, str(tmp_path / "target"))
  tensors = _public_tensors()
  del tensors["lm_head.weight"]
  directory = _save(tmp_path / "d", tensors,
                    _public_config(base_model_name_or_path=str(tmp_path / "target")))
  drafter = jaxdec.load_drafter(directory)  # io loads the base model; convert reads files only.
  np.testing.assert_array_equal(np.asarray(drafter.embed), np.asarray(target.params.embed))
  np.testing.assert_array_equal(np.asarray(drafter.head), np.asarray(target_head(target)[:, DRAFT_IDS]))


def _edited(tensors, drop=(), **put):
  out = {k: v for k, v in tensors.items() if k not in drop}
  out.update(put)
  return out


@pytest.mark.parametrize("edit,message", [
    (lambda t: _edited(t, drop=("midlayer.hidden_norm.weight",)), "missing.*midlayer.hidden_norm.weight"),
    (lambda t: _edited(t, **{"midlayer.extra.weight": torch.zeros(3)}), "does not use.*midlayer.extra.weight"),
    (lambda t: _edited(t, **{"fc.weight": torch.zeros(D, 2 * D)}), r"'fc.weight' has shape \(64, 128\), expected \(64, 192\)"),
    (lambda t: _edited(t, **{"midlayer.self_attn.q_proj.weight": torch.zeros(H * HD, D)}), "q_proj.weight.*expected"),
    (lambda t: _edited(t, d2t=t["d2t"][:-1]), r"'d2t' has shape \(47,\), expected \(48,\)"),
    (lambda t: _edited(t, d2t=torch.full((VD,), V, dtype=torch.long)), "d2t maps draft ids"),
    (lambda t: _edited(t, t2d=torch.ones(V, dtype=torch.bool)), "t2d marks 128 target ids"),
    (lambda t: _edited(t, drop=("d2t",)), "missing.*'d2t'"),
])
def test_malformed_checkpoints_raise_naming_the_problem(target, tmp_path, edit, message):
  directory = _save(tmp_path / "bad", edit(_public_tensors()), _public_config())
  with pytest.raises(ValueError, match=message):
    read_eagle3(directory, target=target)


def test_without_a_target_or_a_loadable_base_model_it_asks_for_one(tmp_path):
  directory = _save(tmp_path / "d", _public_tensors(),
                    _public_config(base_model_name_or_path="meta-llama/Llama-3.1-8B-Instruct"))
  with pytest.raises(ValueError, match="pass target="):
    read_eagle3(directory)
  with pytest.raises(ValueError, match="not a 'zoo:NAME' or directory jaxdec loads: pass target="):
    jaxdec.load_drafter(directory)
  os.rename(os.path.join(directory, "model.safetensors"), os.path.join(directory, "pytorch_model.bin"))
  with pytest.raises(FileNotFoundError, match="safetensors"):
    read_eagle3(directory)
