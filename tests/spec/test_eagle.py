"""EAGLE-3 drafters: the training-time test against step-by-step drafting, EAGLE-2 tree growth
against a numpy reference, lossless decoding with chains and dynamic trees, VAT, KVShot."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdec
from jaxdec.model import KVCache, forward
from jaxdec.spec.drafter import Context
from jaxdec.spec.eagle import (draft_logp, first_level, fuse, next_level, pair_output, rerank)
from jaxdec.train.eagle import Eagle3Drafter, TrainingTimeTest, unroll
from jaxdec.train.trainer import TrainConfig, Trainer
from tiny import tiny_model


@pytest.fixture(scope="module")
def target():
  return tiny_model(seed=3, std=0.3, num_layers=4, tokens=dict(eos=(), pad=None))


def _randomised(part, target, seed=0):
  """Init params with every weight perturbed, so no test passes by an identity init."""
  params = part.init(jax.random.key(seed), target)
  leaves, tree = jax.tree.flatten(params)
  keys = jax.random.split(jax.random.key(seed + 1), len(leaves))
  return jax.tree.unflatten(tree, [x + 0.1 * jax.random.normal(k, x.shape) for x, k in zip(leaves, keys)])


@pytest.mark.parametrize("reuse", ["hidden", "kv", "hybrid"])
def test_training_time_test_matches_step_by_step_drafting(target, reuse):
  """Step j of the parallel unroll at pair t equals drafting depth j + 1 of a chain rooted at
  pair t - j one pair at a time through the drafter's own cache (teacher-forced tokens)."""
  part = Eagle3Drafter(reuse=reuse, kv_layer=None if reuse == "hidden" else 2)
  params = _randomised(part, target)
  rng = np.random.RandomState(0)
  tokens = jnp.asarray(rng.randint(0, 128, size=(2, 12)), jnp.int32)
  steps = 4
  h_unrolled, _ = unroll(params, part, target, tokens, steps)
  drafter = part.to_drafter(params, target)
  config = target.config
  _, hidden, _ = forward(target.params, tokens, jnp.broadcast_to(jnp.arange(12)[None], (2, 12)),
                         config=config, hidden_layers=drafter.hidden_layers(config) or (0,))
  for root in (0, 3, 6):
    # The target's cache holds tokens 0..root; the drafter's, pairs 0..root (none for "kv").
    cache = KVCache.init(config, 2, 16)
    _, _, cache = forward(target.params, tokens[:, :root + 1],
                          jnp.broadcast_to(jnp.arange(root + 1)[None], (2, root + 1)), cache, config=config)
    ctx = Context(seq=tokens, total=jnp.full((2,), root + 2), hidden=None, cache=cache,
                  sampling=None, key=None, rows=jnp.arange(2))
    own = drafter.init(tokens[:, :1], jnp.ones((2,), jnp.int32), 16, hidden=None if reuse == "kv" else hidden[:, :, :1])
    if reuse == "kv":
      feats = jnp.zeros((2, 1, config.hidden_size))
      slot = 0
    else:
      feats = fuse(params, hidden[:, :, root:root + 1])
      pairs = np.arange(root + 1)
      own, _ = drafter._qkv_write(own, tokens[:, pairs + 1], fuse(params, hidden[:, :, pairs]),
                                  jnp.broadcast_to(jnp.asarray(pairs + 1)[None], (2, root + 1)),
                                  jnp.zeros((2,), jnp.int32))
      slot = root
    for j in range(steps):
      pair = root + j
      pos = jnp.full((2, 1), pair + 1, jnp.int32)
      own, q = drafter._qkv_write(own, tokens[:, pair + 1: pair + 2], feats, pos, jnp.full((2,), slot))
      h = pair_output(params, drafter.config, feats, drafter._attend(q, pos, own, jnp.full((2,), slot + 1), ctx))
      # f32 sums of features up to ~40 in magnitude: an absolute slack of 1e-4 (a wrong pair or
      # depth moves them by O(1)).
      np.testing.assert_allclose(h[:, 0], h_unrolled[j, :, pair], atol=1e-4, rtol=1e-4)
      feats, slot = h, slot + 1


def _numpy_growth(levels, top_k, size):
  """EAGLE-2's tree growth in plain numpy for one row. levels[0] f[V] the root's log-probs,
  levels[d] f[top_k, V] those after each of level d's frontier nodes (in frontier order)."""
  order = np.argsort(-levels[0], kind="stable")[:top_k]
  cands = [(int(t), float(levels[0][t]), -1) for t in order]  # (token, score, parent cand).
  frontier = list(range(top_k))
  for logp in levels[1:]:
    new = []
    for slot, node in enumerate(frontier):
      kids = np.argsort(-logp[slot], kind="stable")[:top_k]
      new += [(int(t), cands[node][1] + float(logp[slot][t]), node) for t in kids]
    offset = len(cands)
    cands += new
    scores = np.array([c[1] for c in new])
    frontier = [offset + i for i in np.argsort(-scores, kind="stable")[:top_k]]
  scores = np.array([c[1] for c in cands])
  chosen = sorted(np.argsort(-scores, kind="stable")[:size])
  node = {c: i + 1 for i, c in enumerate(chosen)}
  tokens = [cands[c][0] for c in chosen]
  parents = [0 if cands[c][2] < 0 else node[cands[c][2]] for c in chosen]
  return tokens, parents


@pytest.mark.parametrize("top_k,depth,size", [(3, 4, 10), (4, 3, 16), (2, 5, 9), (1, 4, 4)])
def test_dynamic_tree_growth_matches_numpy(top_k, depth, size):
  rng = np.random.RandomState(top_k * 10 + depth)
  batch, vocab = 3, 11
  levels = [jax.nn.log_softmax(jnp.asarray(rng.randn(batch, vocab) * 2.0), -1)]
  levels += [jax.nn.log_softmax(jnp.asarray(rng.randn(batch, top_k, vocab) * 2.0), -1)
             for _ in range(depth - 1)]
  g = first_level(levels[0], top_k)
  for logp in levels[1:]:
    g, _ = next_level(g, logp, top_k)
  chosen, parents = rerank(g, size)
  tokens = np.asarray(jnp.take_along_axis(g.tokens, chosen, 1))
  for b in range(batch):
    want_tokens, want_parents = _numpy_growth([np.asarray(l[b]) for l in levels], top_k, size)
    assert tokens[b].tolist() == want_tokens
    assert np.asarray(parents[b]).tolist() == want_parents
    assert all(p < i + 1 for i, p in enumerate(want_parents))  # Parents precede children.


@pytest.fixture(scope="module")
def rows(target):
  """The target's own greedy continuations of random prompts (EAGLE-3 trains on those)."""
  rng = np.random.RandomState(0)
  prompts = rng.randint(2, 128, size=(32, 4))
  out = jaxdec.generate(target, prompts, max_new_tokens=28, stop_tokens=())
  return np.concatenate([prompts, np.asarray(out.tokens)], axis=1).astype(np.int32)


def _train(target, rows, workdir, part=Eagle3Drafter(), objective=TrainingTimeTest(steps=3),
           steps=60, seed=0, stop_at=None):
  cfg = TrainConfig(name="eagle3", part=part, objective=objective, steps=steps, batch_size=8,
                    seq_len=rows.shape[1], learning_rate=1e-2, warmup_steps=5, eval_every=steps,
                    eval_windows=4, checkpoint_every=20, seed=seed)
  with jax.numpy_dtype_promotion("standard"):
    trainer = Trainer(cfg, str(workdir), target=target)
    records = trainer.run(rows, rows[:4], progress=False, stop_at=stop_at)
    trainer.close()
  return trainer.module.params(), records


@pytest.fixture(scope="module")
def trained(target, rows, tmp_path_factory):
  return _train(target, rows, tmp_path_factory.mktemp("eagle3"))


def test_training_lowers_the_loss_at_every_step(trained):
  _, records = trained
  first, last = records[0], records[-1]
  assert last["loss"] < 0.7 * first["loss"]
  for j in range(3):
    assert last[f"step{j}_acc"] > first[f"step{j}_acc"] + 0.1
  assert last["sim_tau"] > first["sim_tau"]


def test_vat_trains_the_verification_head_and_resumes_exactly(target, rows, tmp_path):
  """VAT's head learns (its BCE falls), and 20 steps run as 10, stop, resume for 10 give the
  same params bit for bit."""
  part = Eagle3Drafter(verification_head=True)
  vat = TrainingTimeTest(steps=3, vat=True)
  straight, records = _train(target, rows, tmp_path / "a", part, vat, steps=20)
  assert records[-1]["verify_bce"] < records[0]["verify_bce"]
  _train(target, rows, tmp_path / "b", part, vat, steps=20, stop_at=10)
  resumed, _ = _train(target, rows, tmp_path / "b", part, vat, steps=20)
  jax.tree.map(np.testing.assert_array_equal, straight, resumed)
  with pytest.raises(ValueError, match="verification_head"):
    _train(target, rows, tmp_path / "c", Eagle3Drafter(), vat, steps=8)


STATIC = ((0,), (1,), (0, 0), (0, 1), (0, 0, 0))


@pytest.mark.parametrize("shape", ["chain", "static", "dynamic"])
def test_greedy_output_equals_greedy_ar(target, rows, trained, shape):
  """A trained drafter (so drafts do get accepted, on the prompts it trained on) is lossless as a
  chain, a static tree and a dynamic tree: batch 1 and a ragged batch of 4 equal greedy AR token
  for token."""
  params, _ = trained
  drafter = Eagle3Drafter().to_drafter(params, target)
  drafter = {"chain": drafter.with_tree(top_k=1, depth=4), "static": drafter.with_tree(choices=STATIC),
             "dynamic": drafter.with_tree(top_k=3, depth=4, size=8)}[shape]
  prompts = [rows[i, :n].tolist() for i, n in enumerate((5, 3, 9, 1))]
  ref = jaxdec.generate(target, prompts, max_new_tokens=24, stop_tokens=())
  out = jaxdec.speculative_generate(target, prompts, drafter, max_new_tokens=24, stop_tokens=())
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  assert float(np.mean(out.stats["acceptance_length"])) > 1.1  # The drafts do get accepted.
  one = jaxdec.speculative_generate(target, prompts[2:3], drafter, max_new_tokens=24, stop_tokens=())
  np.testing.assert_array_equal(one.tokens, ref.tokens[2:3])


def test_bad_layers_and_vocabulary_maps_raise(target, trained):
  params, _ = trained
  with pytest.raises(ValueError, match="feature layer 9"):
    Eagle3Drafter(layers=(1, 9)).check(target)
  with pytest.raises(ValueError, match="kv_layer 4"):
    Eagle3Drafter(reuse="kv", kv_layer=4).check(target)
  with pytest.raises(ValueError, match="reuse"):
    Eagle3Drafter(reuse="cache").check(target)
  drafter = Eagle3Drafter().to_drafter(params, target)
  with pytest.raises(ValueError, match="draft_ids"):
    drafter.replace(head=drafter.head[:, :64], draft_ids=jnp.arange(32))
  with pytest.raises(ValueError, match="needs draft_ids"):
    drafter.replace(head=drafter.head[:, :64])
  with pytest.raises(ValueError, match="outside the target's vocabulary"):
    jaxdec.speculative_generate(target, [[3, 4]], drafter.replace(
        head=drafter.head[:, :64], draft_ids=jnp.arange(64) + 100), max_new_tokens=4)
  with pytest.raises(ValueError, match="feature layer 7"):
    jaxdec.speculative_generate(target, [[3, 4]], drafter.replace(layers=(1, 2, 7)), max_new_tokens=4)
  with pytest.raises(ValueError, match="size=99 exceeds"):
    drafter.with_tree(top_k=2, depth=3, size=99)


def test_acceptance_by_depth_reads_the_accepted_counts():
  from jaxdec.bench.eagle import depth_acceptance, depth_reached

  accepted = np.array([[3, 0, 8, -1], [1, 2, -1, -1]])  # -1: no step.
  assert depth_acceptance(accepted, 8) == [0.8, 0.75, round(2 / 3, 4), 0.5, 1.0, 1.0, 1.0, 1.0]
  assert depth_reached(accepted, 8) == [5, 4, 3, 2, 1, 1, 1, 1, 1]
