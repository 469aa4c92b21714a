"""Decoder core: config, params, layers, masks, attention, KV cache and `forward`."""

from flax import struct

from jaxdec.model.attention import attention
from jaxdec.model.config import (Embeddings, Layer, ModelConfig, Rope, RopeScaling, Sliding,
                                  SpecialTokens)
from jaxdec.model.decoder import (decode_hidden, embed, forward, hidden_mask_keys, mask_spec,
                                  project_qkv, unembed)
from jaxdec.model.kv_cache import KVCache
from jaxdec.model.masks import Bidirectional, BlockCausal, Causal, MaskSpec, Segments
from jaxdec.model.params import LayerParams, Params, check_params, init_params, param_specs


@struct.dataclass
class Model:
  """A model = (static config, params pytree). A pytree itself, so it can cross `jax.jit`."""

  config: ModelConfig = struct.field(pytree_node=False)
  params: Params

  @property
  def dtype(self):
    return self.params.embed.dtype


__all__ = ["Model", "ModelConfig", "RopeScaling", "Sliding", "Rope", "Layer", "Embeddings",
           "SpecialTokens", "KVCache", "forward", "decode_hidden", "embed", "hidden_mask_keys",
           "unembed", "init_params", "param_specs", "check_params", "Params", "LayerParams",
           "attention", "mask_spec", "project_qkv", "MaskSpec", "Segments", "Causal", "Bidirectional",
           "BlockCausal"]
