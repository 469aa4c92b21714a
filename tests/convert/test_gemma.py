"""Gemma 2 / Gemma 3 text beyond the shared parity tests of test_hf.py: the KV cache against the
full forward, speculative decoding, each feature's effect, config layouts and their errors."""

import dataclasses
import json
import os

import jax.numpy as jnp
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jaxdec  # noqa: E402
from hf_models import make_hf_model  # noqa: E402
from jaxdec import spec  # noqa: E402
from jaxdec.convert import config_from_hf, config_to_hf  # noqa: E402
from tiny import updated  # noqa: E402

pytestmark = pytest.mark.hf

GEMMAS = ("gemma2", "gemma3")


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
  """{arch: (HF model, its saved directory, the jaxdec Model loaded from it)}."""
  out = {}
  for arch in GEMMAS:
    hf = make_hf_model(arch)
    path = str(tmp_path_factory.mktemp(arch))
    hf.save_pretrained(path)
    out[arch] = (hf, path, jaxdec.load(path))
  return out


def _hf_logits(hf, tokens):
  with torch.no_grad():
    return hf(torch.tensor(np.asarray(tokens))).logits.numpy()


def _tokens(seed, shape):
  return np.random.RandomState(seed).randint(0, 256, shape)


@pytest.mark.parametrize("arch", GEMMAS)
def test_generate_equals_the_full_forwards_greedy_continuation(arch, converted):
  """KV-cached decoding across the sliding window (8) equals re-running the whole sequence."""
  _, _, model = converted[arch]
  rng = np.random.RandomState(1)
  prompts = [rng.randint(3, 256, n).tolist() for n in (5, 17, 9)]
  new = 20
  out = jaxdec.generate(model, prompts, max_new_tokens=new, stop_tokens=())
  # One forward over the right-padded sequences: causal, so the padding changes nothing before it.
  seqs = np.zeros((len(prompts), max(map(len, prompts)) + new - 1), np.int64)
  for row, (prompt, generated) in enumerate(zip(prompts, np.asarray(out.tokens))):
    seqs[row, :len(prompt) + new - 1] = prompt + generated[:-1].tolist()
  logits = np.asarray(jaxdec.forward(model, seqs))
  for row, prompt in enumerate(prompts):
    greedy = logits[row, len(prompt) - 1:len(prompt) - 1 + new].argmax(-1)
    np.testing.assert_array_equal(greedy, out.tokens[row])


def test_greedy_speculative_equals_greedy_ar(converted):
  """A draft tree (AdaPLD) verified under Gemma 3's per-layer windows and RoPE bases."""
  _, _, model = converted["gemma3"]
  rng = np.random.RandomState(2)
  prompts = [np.tile(rng.randint(3, 256, 4), n).tolist() for n in (3, 5)]
  ref = jaxdec.generate(model, prompts, max_new_tokens=16)
  drafter = spec.AdaPLD(max_ngram=3, min_ngram=2, depth=3, branches=3)
  out = jaxdec.speculative_generate(model, prompts, drafter, max_new_tokens=16)
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  np.testing.assert_array_equal(out.lengths, ref.lengths)
  assert np.asarray(out.stats["accepted"]).max() > 0  # The tree path was taken, not only roots.


_OFF = {
    "layer.attn_logit_softcap": dict(layer=dict(attn_logit_softcap=None)),
    "embeddings.final_logit_softcap": dict(embeddings=dict(final_logit_softcap=None)),
    "layer.query_pre_attn_scalar": dict(layer=dict(query_pre_attn_scalar=None)),
    "embeddings.scale": dict(embeddings=dict(scale=False)),
    "layer.norm_unit_offset": dict(layer=dict(norm_unit_offset=False)),
    "layer.activation": dict(layer=dict(activation="silu")),
    "sliding.layers": dict(sliding=dict(layers=(True,) * 3)),
    "no_window": dict(sliding=None, rope=dict(local_theta=None)),
    "rope.local_theta": dict(rope=dict(local_theta=10000.0)),
    "rope.scaling": dict(rope=dict(scaling=None)),
}
# One compile each: a few run by default, the rest with -m slow.
_QUICK = {("gemma2", "layer.attn_logit_softcap"), ("gemma3", "sliding.layers"),
          ("gemma3", "rope.local_theta")}
_CASES = [pytest.param(arch, name, marks=() if (arch, name) in _QUICK else pytest.mark.slow)
          for arch, names in [("gemma2", [n for n in _OFF if n not in ("rope.local_theta",
                                                                        "rope.scaling")]),
                              ("gemma3", [n for n in _OFF if n != "layer.attn_logit_softcap"])]
          for name in names]


@pytest.mark.parametrize("arch, feature", _CASES)
def test_each_feature_moves_the_logits(arch, feature, converted):
  """The parity tests would catch a wrong implementation of any of these: switching one off
  moves the logits far past their tolerance."""
  hf, _, model = converted[arch]
  tokens = _tokens(0, (1, 40))
  changed = model.replace(config=updated(model.config, **_OFF[feature]))
  assert np.abs(np.asarray(jaxdec.forward(changed, tokens)) - _hf_logits(hf, tokens)).max() > 1e-2


def test_bf16_embedding_scale_is_rounded_like_transformers(tmp_path):
  """sqrt(48) rounds to 6.9375 in bf16; HF multiplies by that, and so must jaxdec."""
  hf = make_hf_model("gemma2", hidden_size=48, head_dim=12, num_hidden_layers=1,
                     layer_types=["full_attention"]).to(torch.bfloat16)
  hf.save_pretrained(str(tmp_path))
  model = jaxdec.load(str(tmp_path))
  tokens = _tokens(3, (1, 8))
  positions = jnp.arange(8, dtype=jnp.int32)[None]
  _, hidden, _ = jaxdec.model.forward(model.params, jnp.asarray(tokens, jnp.int32), positions,
                                      config=model.config, hidden_layers=(0,))
  with torch.no_grad():
    ref = hf.model.embed_tokens(torch.tensor(tokens)).float().numpy()
  np.testing.assert_array_equal(np.asarray(hidden[0].astype(jnp.float32)), ref)


def test_legacy_gemma3_config_loads_as_transformers_loads_it(converted, tmp_path):
  """A v4-era config.json (rope_theta / rope_local_base_freq / rope_scaling /
  sliding_window_pattern, no layer_types) gives the same model in both libraries."""
  hf, path, model = converted["gemma3"]
  with open(os.path.join(path, "config.json")) as f:
    raw = json.load(f)
  for key in ("rope_parameters", "layer_types", "_sliding_window_pattern"):
    raw.pop(key, None)
  raw.update(rope_theta=10000.0, rope_local_base_freq=100.0, sliding_window_pattern=2,
             rope_scaling={"rope_type": "linear", "factor": 4.0}, cache_implementation="hybrid")
  legacy = tmp_path / "legacy"
  legacy.mkdir()
  (legacy / "config.json").write_text(json.dumps(raw))
  os.symlink(os.path.join(path, "model.safetensors"), legacy / "model.safetensors")
  reference = transformers.AutoModelForCausalLM.from_pretrained(str(legacy)).eval()
  assert reference.config.layer_types == hf.config.layer_types
  again = jaxdec.load(str(legacy))
  assert again.config == model.config
  tokens = _tokens(4, (2, 40))
  np.testing.assert_allclose(jaxdec.forward(again, tokens), _hf_logits(reference, tokens),
                             atol=1e-4, rtol=0)


def _gemma2_raw(**changes):
  raw = {"model_type": "gemma2", "vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
         "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
         "max_position_embeddings": 256, "sliding_window": 8}
  raw.update(changes)
  return raw


def test_gemma2_defaults_and_legacy_fields_match_transformers(tmp_path):
  """Absent fields take Gemma2Config's defaults (soft-caps 50 / 30, scalar 256, tied, alternating
  layers from a sliding first one); the legacy duplicates hidden_act / sliding_window_size are
  accepted when they agree."""
  raw = _gemma2_raw(hidden_act="gelu_pytorch_tanh", sliding_window_size=8, rope_theta=5000.0,
                    cache_implementation="hybrid", torch_dtype="float32")
  (tmp_path / "config.json").write_text(json.dumps(raw))
  want = transformers.AutoConfig.from_pretrained(str(tmp_path))
  config = config_from_hf(raw)
  assert config.sliding.layers == tuple(t == "sliding_attention" for t in want.layer_types)
  assert config.sliding.layers == (True, False, True, False)
  assert (config.layer.attn_logit_softcap, config.embeddings.final_logit_softcap) == (
      want.attn_logit_softcapping, want.final_logit_softcapping) == (50.0, 30.0)
  assert config.layer.query_pre_attn_scalar == want.query_pre_attn_scalar == 256
  assert config.embeddings.tied and want.tie_word_embeddings
  assert config.rope.theta == want.rope_parameters["rope_theta"] == 5000.0
  assert (config.tokens.bos, config.tokens.eos, config.tokens.pad) == (2, (1,), 0)


def test_gemma_config_survives_json():
  """sliding.layers is a tuple in the (hashable) config and a list in JSON (orbax checkpoints)."""
  config = config_from_hf(_gemma2_raw())
  again = jaxdec.ModelConfig.from_dict(json.loads(json.dumps(config.to_dict())))
  assert again == config and hash(again) == hash(config)


@pytest.mark.parametrize("changes, message", [
    (dict(layer_types=["sliding_attention", "chunked_attention"] * 2),
     "unsupported layer_types value 'chunked_attention'"),
    (dict(layer_types=["full_attention"] * 3), "layer_types has 3 entries for num_hidden_layers=4"),
    (dict(use_bidirectional_attention=True), "use_bidirectional_attention=True"),
    (dict(hidden_activation="gelu"), "hidden_activation='gelu'"),
    (dict(hidden_act="gelu"), "hidden_act='gelu'"),
    (dict(attention_bias=True), "attention_bias=True"),
    (dict(sliding_window_size=16), "sliding_window_size=16"),
    (dict(sliding_window=None), "sliding_attention layers but sliding_window=None"),
    (dict(rope_local_base_freq=10.0),
     r"unhandled config fields for gemma2: \['rope_local_base_freq'\]"),
    (dict(model_type="gemma3_text", attn_logit_softcapping=50.0), "attn_logit_softcapping=50.0"),
    (dict(model_type="gemma3_text", rope_parameters={"rope_type": "default", "rope_theta": 1.0}),
     "must be nested by layer type"),
    (dict(model_type="gemma3_text", rope_parameters={
        "sliding_attention": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4},
        "full_attention": {"rope_type": "default", "rope_theta": 1e6}}),
     r"rope_parameters\['sliding_attention'\] rope_type 'linear'"),
    (dict(model_type="gemma3_text", rope_scaling={"rope_type": "yarn", "factor": 2.0}),
     "unsupported rope_type 'yarn'"),
])
def test_config_errors_name_the_field_and_value(changes, message):
  with pytest.raises(ValueError, match=message):
    config_from_hf(_gemma2_raw(**changes))


def test_exports_refuse_what_the_architecture_cannot_express():
  gemma2 = config_from_hf(_gemma2_raw())
  as_llama = dataclasses.replace(gemma2, architecture="llama")
  with pytest.raises(ValueError,
                     match="architecture 'llama' cannot express .*'layer.post_norms': True"):
    config_to_hf(as_llama, "float32")
  with pytest.raises(ValueError, match=r"\{'rope.local_theta': 100.0\}.*'gemma2'"):
    config_to_hf(updated(gemma2, rope=dict(local_theta=100.0)), "float32")
  as_gemma3 = updated(gemma2, architecture="gemma3_text", layer=dict(qk_norm=True))
  with pytest.raises(ValueError, match=r"'layer.attn_logit_softcap': 50.0"):
    config_to_hf(as_gemma3, "float32")
