import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxdec.model import Bidirectional, KVCache, RopeScaling, Sliding, check_params
from tiny import jit_forward as forward, tiny_model

# Every Gemma feature at once: per-layer windows (the first layer slides) and RoPE bases, q/k
# norms, soft-caps, GeGLU, (1 + w) norms, post-norms, scaled tied embeddings.
GEMMA = dict(sliding=dict(window=4, layers=(True, False)),
             rope=dict(local_theta=100.0, scaling=RopeScaling("linear", 4.0)),
             layer=dict(qk_norm=True, norm_unit_offset=True, post_norms=True,
                        activation="gelu_tanh", query_pre_attn_scalar=24, attn_logit_softcap=2.0),
             embeddings=dict(tied=True, scale=True, final_logit_softcap=3.0))


@pytest.fixture(scope="module")
def gemma():
  return tiny_model(**GEMMA)



def _positions(batch, start, steps):
  return jnp.broadcast_to(jnp.arange(start, start + steps, dtype=jnp.int32), (batch, steps))


def _tokens(batch, steps, vocab, seed=0):
  return jnp.asarray(np.random.RandomState(seed).randint(0, vocab, (batch, steps)), jnp.int32)


@pytest.mark.parametrize("which", ["model", "gemma"])
def test_cached_decoding_equals_full_forward(which, request):
  """Prefill in chunks, then one token at a time: every logit equals the full forward's."""
  model = request.getfixturevalue(which)
  cfg, params = model.config, model.params
  tokens = _tokens(2, 20, cfg.vocab_size)
  full, _, _ = forward(params, tokens, _positions(2, 0, 20), config=cfg)
  cache = KVCache.init(cfg, 2, 32)
  pieces = []
  for start, stop in [(0, 7), (7, 12)] + [(i, i + 1) for i in range(12, 20)]:
    logits, _, cache = forward(params, tokens[:, start:stop], _positions(2, start, stop - start),
                               cache, config=cfg)
    pieces.append(logits)
  np.testing.assert_allclose(np.concatenate(pieces, axis=1), full, atol=1e-5, rtol=1e-5)
  np.testing.assert_array_equal(cache.length, [20, 20])


def test_rollback_moves_length_only(model):
  """After a rollback the stale slots are invisible: decoding a different token there gives the
  same logits as a cache that never saw the rejected tokens."""
  cfg, params = model.config, model.params
  tokens = _tokens(1, 12, cfg.vocab_size)
  cache = KVCache.init(cfg, 1, 16)
  _, _, cache = forward(params, tokens[:, :8], _positions(1, 0, 8), cache, config=cfg)
  _, _, dirty = forward(params, tokens[:, 8:12], _positions(1, 8, 4), cache, config=cfg)
  dirty = dirty.with_length(jnp.array([8]))
  new = jnp.array([[5]], jnp.int32)
  a, _, _ = forward(params, new, _positions(1, 8, 1), dirty, config=cfg)
  b, _, _ = forward(params, new, _positions(1, 8, 1), cache, config=cfg)
  np.testing.assert_allclose(a, b, atol=1e-6)


def test_per_row_cache_lengths(model):
  """Rows at different lengths in one cache decode as they would alone."""
  cfg, params = model.config, model.params
  tokens = _tokens(2, 10, cfg.vocab_size, seed=1)
  cache = KVCache.init(cfg, 2, 16)
  _, _, cache = forward(params, tokens, _positions(2, 0, 10), cache, config=cfg)
  cache = cache.with_length(jnp.array([4, 10]))
  step = jnp.array([[3], [7]], jnp.int32)
  logits, _, _ = forward(params, step, jnp.array([[4], [10]], jnp.int32), cache, config=cfg)
  for row, length in enumerate([4, 10]):
    seq = jnp.concatenate([tokens[row:row + 1, :length], step[row:row + 1]], axis=1)
    ref, _, _ = forward(params, seq, _positions(1, 0, length + 1), config=cfg)
    np.testing.assert_allclose(logits[row, 0], ref[0, -1], atol=1e-5)


@pytest.mark.parametrize("which", ["model", "gemma"])
def test_tree_mask_matches_chains(which, request):
  """A block with a custom mask (two branches from one root) gives each node the logits of the
  plain causal sequence along its own branch."""
  model = request.getfixturevalue(which)
  cfg, params = model.config, model.params
  prefix = _tokens(1, 6, cfg.vocab_size, seed=2)
  # Nodes: 0 root, 1 child of 0, 2 child of 0 (sibling of 1), 3 child of 2.
  nodes = jnp.array([[11, 22, 33, 44]], jnp.int32)
  parents = [-1, 0, 0, 2]
  depth = [0, 1, 1, 2]
  mask = np.eye(4, dtype=bool)
  for i, p in enumerate(parents):
    while p >= 0:
      mask[i, p] = True
      p = parents[p]
  cache = KVCache.init(cfg, 1, 16)
  _, _, cache = forward(params, prefix, _positions(1, 0, 6), cache, config=cfg)
  tree_logits, _, _ = forward(params, nodes, jnp.array([[6 + d for d in depth]], jnp.int32), cache,
                              config=cfg, tree=jnp.asarray(mask)[None])
  for node, path in [(1, [0, 1]), (3, [0, 2, 3])]:
    seq = jnp.concatenate([prefix, nodes[:, jnp.array(path)]], axis=1)
    ref, _, _ = forward(params, seq, _positions(1, 0, seq.shape[1]), config=cfg)
    np.testing.assert_allclose(tree_logits[0, node], ref[0, -1], atol=1e-5)


def test_sliding_window_limits_context():
  model = tiny_model(sliding=dict(window=4))
  cfg, params = model.config, model.params
  a = _tokens(1, 12, cfg.vocab_size, seed=3)
  b = a.at[0, :5].set((a[0, :5] + 1) % cfg.vocab_size)  # Differs only at positions 0..4.
  la, _, _ = forward(params, a, _positions(1, 0, 12), config=cfg)
  lb, _, _ = forward(params, b, _positions(1, 0, 12), config=cfg)
  # Window 4 over 2 layers: position 11 depends on positions >= 11 - 2 * 3 = 5 only, while
  # position 8 reaches back to 2.
  np.testing.assert_allclose(la[0, -1], lb[0, -1], atol=1e-6)
  assert not np.allclose(la[0, 8], lb[0, 8])


def test_per_layer_windows():
  """sliding.layers sets the window layer by layer (in the scan): all True equals the one window
  of every layer (Mistral's static path); a full-attention layer sees past it."""
  base = tiny_model(sliding=dict(window=4))
  with_layers = lambda layers: dataclasses.replace(base.config, sliding=Sliding(4, layers))
  a = _tokens(1, 12, base.config.vocab_size, seed=3)
  b = a.at[0, :5].set((a[0, :5] + 1) % base.config.vocab_size)
  pos = _positions(1, 0, 12)
  static, _, _ = forward(base.params, a, pos, config=base.config)
  every, _, _ = forward(base.params, a, pos, config=with_layers((True, True)))
  np.testing.assert_allclose(every, static, atol=1e-6)
  # Position 11 is out of reach of positions 0..4 through two windows of 4, not through one.
  mixed_a, _, _ = forward(base.params, a, pos, config=with_layers((True, False)))
  mixed_b, _, _ = forward(base.params, b, pos, config=with_layers((True, False)))
  assert not np.allclose(mixed_a[0, -1], mixed_b[0, -1], atol=1e-4)


def test_gemma_config_checks():
  with pytest.raises(ValueError, match="sliding.layers has 3 entries for num_layers=2"):
    tiny_model(sliding=dict(window=4, layers=(True, False, True)))
  with pytest.raises(ValueError, match="rope.local_theta=100.0 needs sliding.layers"):
    tiny_model(rope=dict(local_theta=100.0))
  with pytest.raises(ValueError, match="Layer.activation must be one of .* got 'relu'"):
    tiny_model(layer=dict(activation="relu"))
  with pytest.raises(ValueError, match="Embeddings.final_logit_softcap must be a positive number "
                                       "or None, got 0.0"):
    tiny_model(embeddings=dict(final_logit_softcap=0.0))


def test_bidirectional_config_sees_the_future():
  model = tiny_model(attention=Bidirectional())
  cfg, params = model.config, model.params
  a = _tokens(1, 8, cfg.vocab_size, seed=4)
  b = a.at[0, -1].set((a[0, -1] + 1) % cfg.vocab_size)
  la, _, _ = forward(params, a, _positions(1, 0, 8), config=cfg)
  lb, _, _ = forward(params, b, _positions(1, 0, 8), config=cfg)
  assert not np.allclose(la[0, 0], lb[0, 0])
  causal = tiny_model()
  ca, _, _ = forward(causal.params, a, _positions(1, 0, 8), config=causal.config)
  cb, _, _ = forward(causal.params, b, _positions(1, 0, 8), config=causal.config)
  np.testing.assert_allclose(ca[0, :-1], cb[0, :-1], atol=1e-6)


def test_hidden_layers(model):
  cfg, params = model.config, model.params
  tokens = _tokens(1, 5, cfg.vocab_size)
  logits, hidden, _ = forward(params, tokens, _positions(1, 0, 5), config=cfg,
                              hidden_layers=(0, cfg.num_layers))
  assert hidden.shape == (2, 1, 5, cfg.hidden_size)
  np.testing.assert_allclose(hidden[0], params.embed[tokens], atol=1e-6)
  np.testing.assert_allclose(hidden[1] @ params.lm_head, logits, atol=1e-4)
  with pytest.raises(ValueError, match="hidden layer index 3"):
    forward(params, tokens, _positions(1, 0, 5), config=cfg, hidden_layers=(3,))


def test_check_params_names_the_problem(model):
  params = model.params.replace(layers=model.params.layers.replace(wq=None))
  with pytest.raises(ValueError, match="missing \\['layers/wq'\\]"):
    check_params(params, model.config)
  params = model.params.replace(final_norm=jnp.zeros((3,)))
  with pytest.raises(ValueError, match="'final_norm' has shape \\(3,\\)"):
    check_params(params, model.config)
