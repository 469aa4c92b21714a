"""ModelConfig's groups: each checks its own fields, the config checks across them, and saved
configs read back, the flat ones of earlier jaxdec versions included."""

import dataclasses
import json

import jax
import pytest

from jaxdec.model import (Bidirectional, BlockCausal, Embeddings, Layer, ModelConfig, Rope,
                          RopeScaling, Sliding, SpecialTokens)
from jaxdec.model.config import regroup

SHAPE = dict(vocab_size=128, hidden_size=64, intermediate_size=128, num_layers=2, num_heads=4,
             num_kv_heads=2, head_dim=16, max_position_embeddings=256)
# Every group away from its defaults (Gemma 3's options, with a Qwen2 bias for good measure).
GEMMA = ModelConfig(
    **SHAPE, sliding=Sliding(window=4, layers=(True, False)),
    rope=Rope(theta=10000.0, scaling=RopeScaling("linear", 4.0), local_theta=100.0),
    layer=Layer(activation="gelu_tanh", norm_unit_offset=True, post_norms=True, qk_norm=True,
                query_pre_attn_scalar=24, attn_logit_softcap=2.0),
    embeddings=Embeddings(tied=True, scale=True, final_logit_softcap=3.0),
    tokens=SpecialTokens(bos=2, eos=(1, 106), pad=0), architecture="gemma3_text")
# The same config as jaxdec wrote it before the groups (ModelConfig.to_dict, through JSON).
GEMMA_FLAT = {
    **SHAPE, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
    "rope_scaling": {"kind": "linear", "factor": 4.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192},
    "tie_word_embeddings": True, "qkv_bias": False, "qk_norm": True, "sliding_window": 4,
    "sliding_layers": [True, False], "local_rope_theta": 100.0, "embed_scale": True,
    "norm_unit_offset": True, "post_norms": True, "activation": "gelu_tanh",
    "query_pre_attn_scalar": 24, "attn_logit_softcap": 2.0, "final_logit_softcap": 3.0,
    "attention": {"kind": "causal"}, "shifted_logits": False, "architecture": "gemma3_text",
    "bos_token_id": 2, "eos_token_ids": [1, 106], "pad_token_id": 0, "mask_token_id": None}
# zoo:gsm-dlm's config as the zoo's zoo.json and older orbax checkpoints spell it.
GSM_DLM_FLAT = {
    "vocab_size": 1024, "hidden_size": 256, "intermediate_size": 704, "num_layers": 6,
    "num_heads": 4, "num_kv_heads": 2, "head_dim": 64, "max_position_embeddings": 576,
    "rms_norm_eps": 1e-06, "rope_theta": 10000.0, "rope_scaling": None,
    "tie_word_embeddings": True, "qkv_bias": False, "qk_norm": False, "sliding_window": None,
    "sliding_layers": None, "local_rope_theta": None, "embed_scale": False,
    "norm_unit_offset": False, "post_norms": False, "activation": "silu",
    "query_pre_attn_scalar": None, "attn_logit_softcap": None, "final_logit_softcap": None,
    "attention": {"kind": "block_causal", "block_size": 32, "causal_given": True},
    "shifted_logits": True, "architecture": "Fast_dLLM_Qwen", "bos_token_id": 1,
    "eos_token_ids": [2], "pad_token_id": 0, "mask_token_id": 3}


@pytest.mark.parametrize("make, error, message", [
    (lambda: Sliding(window=0), ValueError, r"Sliding.window must be a positive int, got 0"),
    (lambda: Sliding(window=4, layers=[True]), TypeError,
     r"Sliding.layers must be a tuple of bools or None, got \[True\]"),
    (lambda: Rope(theta=0.0), ValueError, "Rope.theta must be a positive number, got 0.0"),
    (lambda: Rope(theta=None), ValueError, "Rope.theta must be a positive number, got None"),
    (lambda: Rope(scaling={"kind": "linear"}), TypeError, "Rope.scaling must be a RopeScaling"),
    (lambda: Rope(local_theta=-1.0), ValueError, "Rope.local_theta must be a positive number"),
    (lambda: Layer(activation="relu"), ValueError, "Layer.activation must be one of .* 'relu'"),
    (lambda: Layer(norm_eps=-1e-6), ValueError, "Layer.norm_eps must be a non-negative number"),
    (lambda: Layer(qk_norm=1), TypeError, "Layer.qk_norm must be a bool, got 1"),
    (lambda: Layer(attn_logit_softcap=0.0), ValueError, "Layer.attn_logit_softcap must be a "
                                                        "positive number or None, got 0.0"),
    (lambda: Embeddings(tied="yes"), TypeError, "Embeddings.tied must be a bool, got 'yes'"),
    (lambda: Embeddings(final_logit_softcap=0.0), ValueError,
     "Embeddings.final_logit_softcap must be a positive number or None, got 0.0"),
    (lambda: SpecialTokens(eos=[1]), TypeError, "SpecialTokens.eos must be a tuple, got list"),
    (lambda: SpecialTokens(mask=-1), ValueError, "SpecialTokens.mask ids must be non-negative"),
    (lambda: SpecialTokens(eos=(1, 2.0)), ValueError, "SpecialTokens.eos ids .* got 2.0"),
])
def test_each_group_names_its_bad_field(make, error, message):
  with pytest.raises(error, match=message):
    make()


@pytest.mark.parametrize("changes, error, message", [
    (dict(sliding=Sliding(4, (True,) * 3)), ValueError,
     "sliding.layers has 3 entries for num_layers=2"),
    (dict(rope=Rope(local_theta=100.0)), ValueError,
     "rope.local_theta=100.0 needs sliding.layers"),
    (dict(attention=BlockCausal(4, causal_given=True)), ValueError, "set tokens.mask"),
    (dict(tokens=SpecialTokens(mask=128)), ValueError,
     r"tokens.mask=128 is outside the vocabulary \[0, 128\)"),
    (dict(tokens=SpecialTokens(eos=(1, 500))), ValueError, "tokens.eos=500 is outside"),
    (dict(layer={"qk_norm": True}), TypeError, "ModelConfig.layer must be a Layer, got"),
    (dict(sliding=4), TypeError, "ModelConfig.sliding must be a Sliding or None, got 4"),
])
def test_the_config_checks_across_groups(changes, error, message):
  with pytest.raises(error, match=message):
    ModelConfig(**SHAPE, **changes)


def test_configs_are_hashable_static_jit_arguments():
  again = dataclasses.replace(GEMMA, tokens=dataclasses.replace(GEMMA.tokens, eos=(1, 106)))
  assert again == GEMMA and hash(again) == hash(GEMMA) and again is not GEMMA
  other = dataclasses.replace(GEMMA, layer=dataclasses.replace(GEMMA.layer, qk_norm=False))
  assert other != GEMMA
  traces = []
  f = jax.jit(lambda x, config: (traces.append(config), x + config.num_layers)[1],
              static_argnames="config")
  f(1, config=GEMMA), f(1, config=again), f(1, config=other)
  assert traces == [GEMMA, other]  # An equal config reuses the program.


@pytest.mark.parametrize("config", [
    GEMMA, ModelConfig(**SHAPE),
    ModelConfig(**SHAPE, attention=BlockCausal(8, causal_given=True), sliding=Sliding(16),
                embeddings=Embeddings(shifted_logits=True), tokens=SpecialTokens(mask=3),
                attention_backend="pallas"),
])
def test_to_dict_is_grouped_and_reads_back_through_json(config):
  data = config.to_dict()
  assert set(data) == set(SHAPE) | {"attention", "sliding", "rope", "layer", "embeddings",
                                     "tokens", "architecture"}
  again = ModelConfig.from_dict(json.loads(json.dumps(data)))
  assert again == dataclasses.replace(config, attention_backend="xla")  # A runtime choice.
  assert hash(again) == hash(dataclasses.replace(config, attention_backend="xla"))


def test_the_flat_form_of_earlier_versions_reads_as_the_grouped_one():
  assert ModelConfig.from_dict(GEMMA_FLAT) == GEMMA
  assert ModelConfig.from_dict(GEMMA_FLAT).to_dict() == GEMMA.to_dict()
  from jaxdec.configs import load_config

  gsm_dlm = load_config("zoo:gsm-dlm").model
  assert ModelConfig.from_dict(GSM_DLM_FLAT) == gsm_dlm
  assert json.loads(json.dumps(regroup(GSM_DLM_FLAT))) == json.loads(json.dumps(gsm_dlm.to_dict()))
  # Older still: a `causal` flag instead of an attention pattern.
  oldest = {k: v for k, v in GEMMA_FLAT.items() if k != "attention"}
  assert ModelConfig.from_dict(dict(oldest, causal=True)) == GEMMA
  assert ModelConfig.from_dict(dict(oldest, causal=False)).attention == Bidirectional()


def test_regroup_moves_fields_without_filling_any():
  assert regroup({"vocab_size": 8, "rms_norm_eps": 1e-5, "mask_token_id": 3}) == {
      "vocab_size": 8, "layer": {"norm_eps": 1e-5}, "tokens": {"mask": 3}}
  assert regroup({"sliding_window": None, "sliding_layers": None}) == {"sliding": None}
  grouped = GEMMA.to_dict()
  assert regroup(grouped) == grouped


def test_unknown_and_mixed_fields_are_refused():
  with pytest.raises(ValueError, match=r"unknown ModelConfig fields: \['colour'\]"):
    ModelConfig.from_dict(dict(GEMMA.to_dict(), colour="red"))
  with pytest.raises(ValueError, match=r"unknown ModelConfig.rope fields: \['base'\]"):
    ModelConfig.from_dict(dict(GEMMA.to_dict(), rope={"base": 1.0}))
  with pytest.raises(ValueError, match=r"mixes flat fields \['rms_norm_eps'\] with the groups "
                                       r"\['layer'\]"):
    ModelConfig.from_dict(dict(GEMMA.to_dict(), rms_norm_eps=1e-5))
