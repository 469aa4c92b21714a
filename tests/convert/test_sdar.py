"""SDAR checkpoints (remote-code `SDARForCausalLM`, model_type "sdar"): Qwen3 tensors and fields,
unshifted logits, block-causal attention. A tiny transformers Qwen3 saved with an SDAR config.json
loads with the logits transformers computes under an explicit block-causal mask."""

import json
import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import jaxdec  # noqa: E402
from hf_models import make_hf_model  # noqa: E402
from jaxdec.convert import config_from_hf, config_to_hf  # noqa: E402
from jaxdec.model import BlockCausal  # noqa: E402
from jaxdec.model.params import flatten  # noqa: E402
from tiny import updated  # noqa: E402

pytestmark = pytest.mark.hf

BLOCK, MASK = 4, 250
# The fields SDAR-1.7B-Chat's config.json adds to a Qwen3 one (transformers 4.52 layout).
_SDAR_FIELDS = {
    "architectures": ["SDARForCausalLM"], "model_type": "sdar",
    "auto_map": {"AutoConfig": "configuration_sdar.SDARConfig",
                 "AutoModel": "modeling_sdar.SDARModel",
                 "AutoModelForCausalLM": "modeling_sdar.SDARForCausalLM"},
    "attn_implementation": "flex_attention", "debug": False, "ep_size": 1,
    "fuse_cross_entropy": True, "micro_forward": False, "skip_checkpoint": False,
    "use_deepep": False, "use_cache": False, "torch_dtype": "float32",
    "transformers_version": "4.52.4",
}


def _release_config(**sizes) -> dict:
  """SDAR-1.7B-Chat's config.json, every field, plus the two jaxdec requires."""
  return {
      **_SDAR_FIELDS, "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643,
      "eos_token_id": 151643, "head_dim": 128, "hidden_act": "silu", "hidden_size": 2048,
      "initializer_range": 0.02, "intermediate_size": 6144, "max_position_embeddings": 32768,
      "max_window_layers": 28, "num_attention_heads": 16, "num_hidden_layers": 28,
      "num_key_value_heads": 8, "rms_norm_eps": 1e-06, "rope_scaling": None,
      "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": False,
      "use_sliding_window": False, "vocab_size": 151936, "block_size": 4, "mask_token_id": 151669,
      **sizes,
  }


@pytest.fixture(scope="module")
def sdar(tmp_path_factory):
  """(transformers Qwen3, its directory rewritten as an SDAR checkpoint in the release layout)."""
  hf = make_hf_model("qwen3", rope_parameters={"rope_type": "default", "rope_theta": 1000000.0})
  path = str(tmp_path_factory.mktemp("sdar"))
  hf.save_pretrained(path)
  with open(os.path.join(path, "config.json")) as f:
    raw = json.load(f)
  for field in ("rope_parameters", "dtype", "layer_types"):  # v5-only fields the release lacks.
    raw.pop(field)
  raw.update(_SDAR_FIELDS, rope_theta=1000000.0, rope_scaling=None, block_size=BLOCK,
             mask_token_id=MASK)
  with open(os.path.join(path, "config.json"), "w") as f:
    json.dump(raw, f)
  return hf, path


def _logits(hf, tokens, visible) -> np.ndarray:
  """transformers' logits under a float [B, 1, L, L] mask: 0 where visible, -inf elsewhere."""
  mask = torch.where(torch.as_tensor(visible), 0.0, float("-inf"))
  mask = mask[None, None].expand(tokens.shape[0], 1, *visible.shape)
  with torch.no_grad():
    return hf(torch.tensor(tokens, dtype=torch.long), attention_mask=mask).logits.numpy()


def test_logits_match_block_causal_qwen3(sdar):
  hf, path = sdar
  model = jaxdec.load(path)
  c = model.config
  assert c.architecture == "sdar" and c.attention == BlockCausal(BLOCK) and c.layer.qk_norm
  assert not c.embeddings.shifted_logits and not c.layer.qkv_bias and c.tokens.mask == MASK
  tokens = np.random.RandomState(0).randint(3, MASK, (2, 19)).astype(np.int32)  # A partial block.
  pos = np.arange(19)
  want = _logits(hf, tokens, pos[None, :] // BLOCK <= pos[:, None] // BLOCK)
  np.testing.assert_allclose(jaxdec.forward(model, tokens), want, atol=1e-4, rtol=1e-4)
  # Guards the comparison: transformers honours the mask (a causal one gives other logits).
  causal = _logits(hf, tokens, pos[None, :] <= pos[:, None])
  assert np.abs(causal - want).max() > 1e-2


def test_release_config_reads():
  c = config_from_hf(_release_config())
  assert (c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim) == (28, 16, 8, 128)
  assert c.attention == BlockCausal(4) and c.tokens.mask == 151669
  assert not c.embeddings.shifted_logits
  assert c.layer.qk_norm and not c.embeddings.tied and c.rope.theta == 1e6
  assert c.tokens.eos == (151643,) and c.architecture == "sdar"


@pytest.mark.parametrize("field, message", [
    ("block_size", r'an sdar config needs block_size \(add "block_size": 4'),
    ("mask_token_id", r"an sdar config needs mask_token_id \(add the tokenizer's <\|mask\|> id"),
])
def test_missing_field_raises(field, message):
  raw = _release_config()
  del raw[field]
  with pytest.raises(ValueError, match=message):
    config_from_hf(raw)


@pytest.mark.parametrize("changes, message", [
    (dict(logit_scale=2.0), r"unhandled config fields for sdar: \['logit_scale'\]"),
    (dict(use_sliding_window=True), "unsupported config value use_sliding_window=True"),
    (dict(attention_bias=True), "unsupported attention_bias=True"),
    (dict(rope_scaling={"rope_type": "yarn", "factor": 4.0}), "unsupported rope_type 'yarn'"),
])
def test_math_changing_fields_raise(changes, message):
  with pytest.raises(ValueError, match=message):
    config_from_hf(_release_config(**changes))


def test_export_and_reload_roundtrip(sdar, tmp_path):
  model = jaxdec.load(sdar[1])
  out = jaxdec.export_hf(model, None, str(tmp_path / "out"))
  with open(os.path.join(out, "config.json")) as f:
    raw = json.load(f)
  assert raw["model_type"] == "sdar" and raw["architectures"] == ["SDARForCausalLM"]
  assert raw["block_size"] == BLOCK and raw["mask_token_id"] == MASK
  again = jaxdec.load(out)
  assert again.config == model.config
  for name, value in flatten(model.params).items():
    np.testing.assert_array_equal(flatten(again.params)[name], value)


def test_export_rejects_what_sdar_cannot_express(sdar):
  config = jaxdec.load(sdar[1]).config
  for changes in (dict(attention=BlockCausal(BLOCK, causal_given=True)),
                  dict(embeddings=dict(shifted_logits=True)), dict(tokens=dict(mask=None))):
    with pytest.raises(ValueError, match="an sdar checkpoint is unshifted, block-causal"):
      config_to_hf(updated(config, **changes), "float32")


def test_dual_cache_decodes_exactly(sdar):
  """Block-causal attention makes the dual cache exact: the same tokens as without a cache."""
  model = jaxdec.load(sdar[1])
  rng = np.random.RandomState(2)
  prompts = [rng.randint(3, MASK, n).tolist() for n in (5, 7)]  # Off the block boundaries.
  run = lambda cache: jaxdec.diffusion_generate(model, prompts, gen_length=8, block_length=BLOCK,
                                                steps=8, cache=cache).tokens
  plain = np.asarray(run(None))
  assert plain.shape == (2, 8) and not (plain == MASK).any()
  np.testing.assert_array_equal(np.asarray(run(jaxdec.diffusion.DualCache())), plain)
