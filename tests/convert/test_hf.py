"""Conversion parity against transformers' own PyTorch models (tiny random configs, fp32)."""

import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jaxdec  # noqa: E402
from hf_models import ARCHS, make_hf_model  # noqa: E402
from jaxdec.convert import config_from_hf, config_to_hf, families  # noqa: E402
from jaxdec.model import Bidirectional, BlockCausal, RopeScaling, init_params  # noqa: E402
from jaxdec.model.params import flatten  # noqa: E402
from tiny import tiny_config  # noqa: E402

pytestmark = pytest.mark.hf


def _save(hf_model, path, **kw):
  hf_model.save_pretrained(str(path), **kw)
  return str(path)


def _hf_logits(hf_model, tokens, output_hidden_states=False):
  with torch.no_grad():
    out = hf_model(torch.tensor(np.asarray(tokens)), output_hidden_states=output_hidden_states)
  return out


@pytest.mark.parametrize("arch", ARCHS)
def test_logits_and_hidden_match_transformers(arch, tmp_path):
  hf = make_hf_model(arch)
  model = jaxdec.load(_save(hf, tmp_path))
  tokens = np.random.RandomState(0).randint(0, 256, (2, 40))
  ref = _hf_logits(hf, tokens, output_hidden_states=True)
  np.testing.assert_allclose(jaxdec.forward(model, tokens), ref.logits.numpy(), atol=1e-4, rtol=0)
  # Hidden states, HF convention: [0] embeddings, [L] after the final norm.
  positions = np.broadcast_to(np.arange(40, dtype=np.int32), (2, 40))
  layers = tuple(range(model.config.num_layers + 1))
  _, hidden, _ = jaxdec.model.forward(model.params, jnp.asarray(tokens, jnp.int32), positions,
                                      config=model.config, hidden_layers=layers)
  for i in layers:
    np.testing.assert_allclose(hidden[i], ref.hidden_states[i].numpy(), atol=1e-4, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_greedy_generation_matches_transformers_ragged(arch, tmp_path):
  hf = make_hf_model(arch)
  model = jaxdec.load(_save(hf, tmp_path))
  rng = np.random.RandomState(1)
  prompts = [rng.randint(3, 256, n).tolist() for n in (5, 17, 9)]
  new = 32
  ours = jaxdec.generate(model, prompts, max_new_tokens=new, stop_tokens=())
  # transformers' ragged batch: left padding with an attention mask.
  width = max(map(len, prompts))
  ids = torch.zeros((len(prompts), width), dtype=torch.long)
  mask = torch.zeros_like(ids)
  for i, p in enumerate(prompts):
    ids[i, width - len(p):] = torch.tensor(p)
    mask[i, width - len(p):] = 1
  hf.generation_config.eos_token_id = None
  with torch.no_grad():
    ref = hf.generate(ids, attention_mask=mask, max_new_tokens=new, do_sample=False, pad_token_id=0)
  np.testing.assert_array_equal(ours.tokens, ref[:, width:].numpy())
  np.testing.assert_array_equal(ours.lengths, [new] * 3)


def test_bf16_checkpoint_loads(tmp_path):
  hf = make_hf_model("qwen2").to(torch.bfloat16)
  path = _save(hf, tmp_path)
  model = jaxdec.load(path)
  assert model.params.layers.wq.dtype == jnp.bfloat16
  # Loaded in fp32, the bf16 weights give the logits transformers gets from them in fp32.
  tokens = np.random.RandomState(0).randint(0, 256, (1, 24))
  upcast = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
  ref = _hf_logits(upcast, tokens).logits.numpy()
  np.testing.assert_allclose(jaxdec.forward(jaxdec.load(path, dtype=jnp.float32), tokens), ref,
                             atol=1e-4, rtol=0)
  bf16_logits = np.asarray(jaxdec.forward(model, tokens))
  assert np.mean(bf16_logits.argmax(-1) == ref.argmax(-1)) > 0.9


@pytest.mark.parametrize("layout", ["sharded_safetensors", "pytorch_bin", "sharded_bin"])
def test_other_checkpoint_layouts(layout, tmp_path):
  hf = make_hf_model("llama")
  reference = jaxdec.load(_save(hf, tmp_path / "ref"))
  path = tmp_path / layout
  if layout == "sharded_safetensors":
    _save(hf, path, max_shard_size="40KB")
    assert os.path.exists(path / "model.safetensors.index.json")
  else:
    hf.config.save_pretrained(str(path))
    state = {k: v.contiguous() for k, v in hf.state_dict().items()}
    if layout == "pytorch_bin":
      torch.save(state, path / "pytorch_model.bin")
    else:
      names = sorted(state)
      shards = {"pytorch_model-00001-of-00002.bin": names[::2],
                "pytorch_model-00002-of-00002.bin": names[1::2]}
      for file, keys in shards.items():
        torch.save({k: state[k] for k in keys}, path / file)
      weight_map = {k: f for f, keys in shards.items() for k in keys}
      (path / "pytorch_model.bin.index.json").write_text(json.dumps({"weight_map": weight_map}))
  model = jaxdec.load(str(path))
  for a, b in zip(jaxdec.model.params.flatten(model.params).values(),
                  jaxdec.model.params.flatten(reference.params).values()):
    np.testing.assert_array_equal(a, b)


def test_legacy_config_layout_equals_v5():
  legacy = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
            "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                             "high_freq_factor": 4.0, "original_max_position_embeddings": 64},
            "torch_dtype": "bfloat16", "architectures": ["LlamaForCausalLM"], "eos_token_id": [2, 3]}
  v5 = {k: v for k, v in legacy.items() if k not in ("rope_theta", "rope_scaling", "torch_dtype")}
  v5["rope_parameters"] = dict(legacy["rope_scaling"], rope_theta=500000.0)
  v5["dtype"] = "bfloat16"
  a, b = config_from_hf(legacy), config_from_hf(v5)
  assert a == b
  assert a.rope.theta == 500000.0 and a.rope.scaling.kind == "llama3"
  assert a.head_dim == 16 and a.tokens.eos == (2, 3)


_LLAMA3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
           "original_max_position_embeddings": 64}


def test_legacy_rope_scaling_beside_rope_parameters_matches_transformers(tmp_path):
  """transformers lets a legacy `rope_scaling` override `rope_parameters`; so must jaxdec."""
  path = _save(make_hf_model("llama3"), tmp_path)
  with open(os.path.join(path, "config.json")) as f:
    raw = json.load(f)
  raw["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0}
  raw["rope_scaling"] = dict(_LLAMA3)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(raw, f)
  hf = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32).eval()
  assert hf.config.rope_parameters["rope_type"] == "llama3"
  model = jaxdec.load(path)
  assert model.config.rope.scaling.kind == "llama3"
  tokens = np.random.RandomState(4).randint(0, 256, (2, 40))
  np.testing.assert_allclose(jaxdec.forward(model, tokens), _hf_logits(hf, tokens).logits.numpy(),
                             atol=1e-4, rtol=0)


@pytest.mark.parametrize("rope", [
    dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}, rope_scaling=_LLAMA3),
    dict(rope_parameters={"rope_type": "default", "rope_theta": 5e5},
         rope_scaling={"type": "linear", "factor": 2.0}),
    dict(rope_theta=1234.0, rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
         rope_scaling={"rope_type": "linear", "factor": 2.0}),
    dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0},
         rope_scaling={"rope_type": "default"}),
    dict(rope_parameters={k: v for k, v in _LLAMA3.items() if k != "original_max_position_embeddings"}),
    dict(rope_theta=77.0, rope_parameters={"rope_type": "default", "rope_theta": 500.0}),
    dict(rope_theta=77.0, rope_scaling=None),
])
def test_rope_fields_are_read_as_transformers_reads_them(rope, tmp_path):
  raw = _raw_config(**rope)
  (tmp_path / "config.json").write_text(json.dumps(raw))
  want = dict(transformers.AutoConfig.from_pretrained(str(tmp_path)).rope_parameters)
  config = config_from_hf(raw)
  assert config.rope.theta == want.pop("rope_theta")
  kind = want.pop("rope_type")
  want.pop("type", None)
  if kind == "default":
    assert config.rope.scaling is None
  else:
    assert config.rope.scaling.kind == kind
    assert {k: getattr(config.rope.scaling, k) for k in want} == want


@pytest.mark.parametrize("legacy", [
    {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 64},
    {"rope_type": "dynamic", "factor": 2.0},
    {"type": "longrope", "short_factor": [1.0] * 8, "long_factor": [2.0] * 8},
])
def test_unimplemented_legacy_rope_scaling_raises(legacy):
  kind = legacy.get("rope_type", legacy.get("type"))
  raw = _raw_config(rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
                    rope_scaling=legacy)
  with pytest.raises(ValueError, match=f"unsupported rope_type '{kind}'"):
    config_from_hf(raw)


def _raw_config(**changes):
  raw = {"model_type": "llama", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 256}
  raw.update(changes)
  return raw


@pytest.mark.parametrize("changes, message", [
    ({"model_type": "gpt2"}, "unknown architecture model_type='gpt2'"),
    ({"quantization_config": {}}, r"unhandled config fields for llama: \['quantization_config'\]"),
    ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
    ({"rope_parameters": {"rope_type": "yarn", "rope_theta": 1.0, "factor": 2.0}},
     "unsupported rope_type 'yarn'"),
    ({"attention_bias": True}, "attention_bias=True"),
])
def test_config_errors_name_the_field(changes, message):
  with pytest.raises(ValueError, match=message):
    config_from_hf(_raw_config(**changes))


def _edit_checkpoint(src, dst, edit):
  from safetensors.numpy import load_file, save_file

  os.makedirs(dst)
  for name in ("config.json", "generation_config.json"):
    if os.path.exists(os.path.join(src, name)):
      with open(os.path.join(src, name)) as f, open(os.path.join(dst, name), "w") as g:
        g.write(f.read())
  tensors = load_file(os.path.join(src, "model.safetensors"))
  edit(tensors)
  save_file(tensors, os.path.join(dst, "model.safetensors"), metadata={"format": "pt"})
  return str(dst)


@pytest.mark.parametrize("edit, message", [
    (lambda t: t.pop("model.layers.1.mlp.up_proj.weight"),
     r"missing tensors in checkpoint: \['model.layers.1.mlp.up_proj.weight'\]"),
    (lambda t: t.update({"model.layers.0.self_attn.rotary_emb.inv_freq": np.zeros(8, np.float32)}),
     r"unexpected tensors .*\['model.layers.0.self_attn.rotary_emb.inv_freq'\]"),
    (lambda t: t.update({"model.layers.0.self_attn.k_proj.weight": np.zeros((64, 64), np.float32)}),
     r"tensor 'model.layers.0.self_attn.k_proj.weight' has shape \(64, 64\), expected \(32, 64\)"),
])
def test_checkpoint_errors_name_the_tensor(edit, message, tmp_path):
  src = _save(make_hf_model("llama"), tmp_path / "src")
  with pytest.raises(ValueError, match=message):
    jaxdec.load(_edit_checkpoint(src, tmp_path / "bad", edit))


@pytest.mark.parametrize("arch", ARCHS)
def test_export_roundtrip_through_transformers(arch, tmp_path):
  """export_hf's promise for causal models: AutoModelForCausalLM loads it, same logits."""
  hf = make_hf_model(arch)
  model = jaxdec.load(_save(hf, tmp_path / "src"))
  out = jaxdec.export_hf(model, None, str(tmp_path / "export"))
  reloaded = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
  tokens = np.random.RandomState(2).randint(0, 256, (2, 16))
  np.testing.assert_allclose(_hf_logits(reloaded, tokens).logits.numpy(),
                             _hf_logits(hf, tokens).logits.numpy(), atol=1e-5, rtol=0)
  again = jaxdec.load(out)
  assert again.config == model.config
  for a, b in zip(jaxdec.model.params.flatten(again.params).values(),
                  jaxdec.model.params.flatten(model.params).values()):
    np.testing.assert_array_equal(a, b)


def test_export_of_a_jaxdec_native_model(tmp_path, model):
  out = jaxdec.export_hf(model, None, str(tmp_path / "native"))
  hf = transformers.AutoModelForCausalLM.from_pretrained(out).eval()
  tokens = np.random.RandomState(3).randint(0, model.config.vocab_size, (1, 12))
  np.testing.assert_allclose(_hf_logits(hf, tokens).logits.numpy(), jaxdec.forward(model, tokens),
                             atol=1e-4, rtol=0)


@pytest.mark.parametrize("arch, overrides", [("llada", {}),
                                             ("Dream", dict(layer=dict(qkv_bias=True),
                                                            embeddings=dict(shifted_logits=True)))])
def test_diffusion_exports_need_their_remote_code(arch, overrides, tmp_path):
  """What export_hf documents for llada / Dream: jaxdec reads them, plain transformers cannot."""
  from jaxdec.model import Bidirectional
  from tiny import tiny_model

  model = tiny_model(architecture=arch, attention=Bidirectional(), tokens=dict(mask=5), **overrides)
  out = jaxdec.export_hf(model, None, str(tmp_path / arch))
  with pytest.raises(ValueError, match=f"model type `{arch}`"):
    transformers.AutoModelForCausalLM.from_pretrained(out)
  assert jaxdec.load(out).config == model.config


# ---- the family registry -------------------------------------------------------------------------

def _gemma(rope=None, **layer):
  return dict(layer=dict(norm_unit_offset=True, post_norms=True, activation="gelu_tanh",
                         query_pre_attn_scalar=24, **layer),
              embeddings=dict(scale=True, final_logit_softcap=3.0),
              sliding=dict(window=8, layers=(True, False)), rope=rope or {})


# A tiny ModelConfig each registered family expresses, with its distinctive features on.
_TINY = {
    "llama": dict(embeddings=dict(tied=True), tokens=dict(eos=(1, 2))),
    "mistral": dict(sliding=dict(window=8)),
    "qwen2": dict(layer=dict(qkv_bias=True)),
    "qwen3": dict(layer=dict(qk_norm=True), tokens=dict(bos=3)),
    "gemma2": _gemma(attn_logit_softcap=2.0),
    "gemma3_text": _gemma(qk_norm=True,
                          rope=dict(local_theta=100.0, scaling=RopeScaling("linear", 2.0))),
    "llada": dict(attention=Bidirectional(), tokens=dict(mask=5)),
    "Dream": dict(attention=Bidirectional(), tokens=dict(mask=5),
                  embeddings=dict(shifted_logits=True), layer=dict(qkv_bias=True)),
    "Fast_dLLM_Qwen": dict(attention=BlockCausal(8, causal_given=True), tokens=dict(mask=5),
                           embeddings=dict(shifted_logits=True), layer=dict(qkv_bias=True)),
    "sdar": dict(attention=BlockCausal(4), tokens=dict(mask=5), layer=dict(qk_norm=True)),
}


def test_every_registered_family_has_a_tiny_config():
  assert sorted(_TINY) == sorted(families.SUPPORTED)


@pytest.mark.parametrize("arch", sorted(_TINY))
def test_every_family_round_trips_its_config(arch):
  config = tiny_config(architecture=arch, **_TINY[arch])
  raw = json.loads(json.dumps(config_to_hf(config, "float32")))
  assert raw["model_type"] == arch == families.get(arch).model_type
  assert raw["architectures"] == [families.get(arch).class_name]
  again = config_from_hf(raw)
  assert again == config
  assert config_to_hf(again, "float32") == raw


@pytest.mark.parametrize("arch", sorted(_TINY))
def test_every_family_round_trips_its_tensors(arch):
  from jaxdec.convert.hf_weights import key_table, params_from_hf_tensors, params_to_hf_tensors

  config = tiny_config(architecture=arch, **_TINY[arch])
  params = jax.tree.map(np.asarray, init_params(config, jax.random.key(0)))
  tensors = params_to_hf_tensors(params, config)
  assert set(tensors) == set(key_table(config))
  assert families.get(arch).tensors.embed in tensors
  again = params_from_hf_tensors(tensors.items(), config)
  for name, value in flatten(params).items():
    np.testing.assert_array_equal(flatten(again)[name], value)


def test_unknown_model_types_raise_naming_the_supported_ones():
  with pytest.raises(ValueError, match="unknown architecture model_type='gpt2'; supported: ") as e:
    config_from_hf(_raw_config(model_type="gpt2"))
  assert all(repr(name) in str(e.value) for name in families.SUPPORTED)
  with pytest.raises(ValueError, match="unknown architecture model_type=None"):
    config_from_hf({k: v for k, v in _raw_config().items() if k != "model_type"})
  with pytest.raises(ValueError, match="cannot export architecture 'gpt2'; supported: ") as e:
    config_to_hf(tiny_config(architecture="gpt2"), "float32")
  assert all(repr(name) in str(e.value) for name in families.SUPPORTED)
