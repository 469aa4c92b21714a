"""Medusa heads: training over a frozen target, trees from accuracy tables, lossless drafting,
the published checkpoint layout."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxdec
from jaxdec import spec
from jaxdec.convert.medusa import read_medusa, write_medusa
from jaxdec.spec.heads import Heads, expected_accepted, head_logits, sparse_tree
from jaxdec.train.mtp import EntropyBoundaries, MedusaHeads, MultiToken, head_accuracy
from jaxdec.train.trainer import TrainConfig, Trainer
from tiny import tiny_model

TREE = ((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0))


@pytest.fixture(scope="module")
def target():
  return tiny_model(seed=5, std=0.3, tokens=dict(eos=(), pad=None))


@pytest.fixture(scope="module")
def rows(target):
  """The target's own greedy continuations of random prompts: what the heads must predict."""
  rng = np.random.RandomState(0)
  prompts = rng.randint(2, 128, size=(64, 4))
  out = jaxdec.generate(target, prompts, max_new_tokens=44, stop_tokens=())
  return np.concatenate([prompts, np.asarray(out.tokens)], axis=1).astype(np.int32)


def _train(target, rows, workdir, objective=MultiToken(), steps=100, seed=0, sequential=False):
  cfg = TrainConfig(name="heads", part=MedusaHeads(num_heads=3, sequential=sequential),
                    objective=objective, steps=steps,
                    batch_size=8, seq_len=rows.shape[1], learning_rate=3e-2, warmup_steps=5,
                    eval_every=steps, eval_windows=4, checkpoint_every=steps, seed=seed)
  with jax.numpy_dtype_promotion("standard"):
    trainer = Trainer(cfg, str(workdir), target=target)
    records = trainer.run(rows, rows[:4], progress=False)
    trainer.close()
  return trainer.module.params(), records


@pytest.fixture(scope="module")
def trained(target, rows, tmp_path_factory):
  return _train(target, rows, tmp_path_factory.mktemp("heads"))


@pytest.fixture(scope="module")
def sequential(target, rows, tmp_path_factory):
  return _train(target, rows, tmp_path_factory.mktemp("sequential"), sequential=True)


def test_sequential_heads_start_as_medusa_heads_and_learn_more(target, trained, sequential):
  """With the mixing at zero the depth-by-depth drafting equals the parallel heads' ranking; trained,
  reading the token before the target makes every head right more often."""
  from jaxdec.spec.heads import draft_tree

  start = MedusaHeads(num_heads=3, sequential=True).init(jax.random.key(0), target)
  parallel = start.replace(mix=None, embed=None)
  hidden = jax.random.normal(jax.random.key(1), (2, 64))
  root = jnp.array([5, 9])
  choices = tuple(sorted(TREE, key=lambda p: (len(p), p)))
  np.testing.assert_array_equal(draft_tree(start, hidden, root, choices),
                                draft_tree(parallel, hidden, root, choices))
  for k in (1, 2, 3):
    assert sequential[1][-1][f"head{k}_acc"] > trained[1][-1][f"head{k}_acc"]


def test_heads_start_as_the_targets_next_token_prediction(target):
  """Zero blocks and the target's unembedding: every head's logits equal the target's."""
  params = MedusaHeads(num_heads=2, num_layers=2).init(jax.random.key(0), target)
  tokens = jnp.asarray([[5, 9, 17, 3, 30]])
  logits, hidden, _ = jaxdec.model.forward(target.params, tokens, jnp.arange(5)[None],
                                           config=target.config,
                                           hidden_layers=(target.config.num_layers,))
  heads = head_logits(params, hidden[0])
  assert heads.shape == (1, 5, 2, 128)
  np.testing.assert_allclose(heads[:, :, 1], logits, rtol=1e-5, atol=1e-5)


def test_training_lowers_every_heads_loss(trained):
  _, records = trained
  first, last = records[0], records[-1]
  for k in (1, 2, 3):
    assert last[f"head{k}_nll"] < 0.6 * first[f"head{k}_nll"]
    assert last[f"head{k}_acc"] > 2 * first[f"head{k}_acc"]


def test_sparse_tree_follows_the_accuracy_table():
  sure = np.array([[0.9, 0.05], [0.9, 0.05], [0.9, 0.05]])
  assert sparse_tree(sure, 3) == ((0,), (0, 0), (0, 0, 0))  # Deep and narrow.
  flat = np.array([[0.4, 0.35, 0.2], [0.4, 0.35, 0.2]])
  assert sparse_tree(flat, 3) == ((0,), (1,), (2,))  # Shallow and wide.
  mixed = np.array([[0.6, 0.3], [0.5, 0.2]])
  tree = sparse_tree(mixed, 4)  # 0.6, 0.3 (1,), 0.6*0.5 = 0.3 (0,0), then 0.6*0.2 / 0.3*0.5 ties.
  assert tree[:3] == ((0,), (1,), (0, 0)) and len(tree) == 4
  assert expected_accepted(mixed, tree) == pytest.approx(0.6 + 0.3 + 0.3 + 0.15)
  with pytest.raises(ValueError, match="accuracy"):
    sparse_tree(np.array([0.5, 0.2]), 3)


def test_bad_heads_and_trees_raise(trained):
  params, _ = trained
  with pytest.raises(ValueError, match="only 3 heads"):
    Heads(params, ((0,), (0, 0), (0, 0, 0), (0, 0, 0, 0)))
  with pytest.raises(ValueError, match="with_choices"):
    Heads(params, ((0,), (1,)))  # Two heads the tree never reads.
  with pytest.raises(ValueError, match="no parent"):
    Heads(params, ((0,), (1, 0, 0)))
  with pytest.raises(TypeError, match="Heads.params must be a HeadsParams, got dict"):
    Heads({"w": params.w})
  with pytest.raises(TypeError, match="both mix and embed"):
    Heads(params.replace(mix=params.w[:, 0]))
  assert Heads(params).with_choices(((0,), (1,))).num_heads == 1
  other = tiny_model(seed=1, hidden_size=32, num_heads=2, num_kv_heads=1)
  with pytest.raises(ValueError, match="hidden size"):
    jaxdec.speculative_generate(other, [[3, 4]], Heads(params), max_new_tokens=4)


@pytest.mark.parametrize("kind", ["parallel", "sequential"])
@pytest.mark.parametrize("choices", [None, TREE])
def test_greedy_with_heads_equals_greedy_ar(target, rows, trained, sequential, choices, kind):
  params, _ = trained if kind == "parallel" else sequential
  drafter = Heads(params, choices)
  prompts = [rows[i, : 3 + i].tolist() for i in range(5)]  # Ragged.
  ref = jaxdec.generate(target, prompts, max_new_tokens=30, stop_tokens=())
  batch = jaxdec.speculative_generate(target, prompts, drafter, max_new_tokens=30, stop_tokens=())
  np.testing.assert_array_equal(batch.tokens, ref.tokens)
  np.testing.assert_array_equal(batch.lengths, ref.lengths)
  # The heads learned a random model's greedy dynamics in part (~30% top-1): accepted runs occur.
  assert float(np.mean(batch.stats["acceptance_length"])) > 1.15
  assert np.max(np.asarray(batch.stats["accepted"])) >= 2
  for i, p in enumerate(prompts[:2]):
    alone = jaxdec.speculative_generate(target, [p], drafter, max_new_tokens=30, stop_tokens=())
    np.testing.assert_array_equal(alone.tokens[0], batch.tokens[i])
    assert alone.stats["target_forwards"][0] == batch.stats["target_forwards"][i]


def test_head_accuracy_table_builds_a_tree_that_verifies(target, rows, trained):
  params, _ = trained
  accuracy = head_accuracy(params, target, rows[:8], ranks=3)
  assert accuracy.shape == (3, 3) and np.all(accuracy.sum(1) <= 1 + 1e-9)
  assert accuracy[0, 0] > accuracy[2, 0] > 0  # Nearer tokens are easier.
  choices = sparse_tree(accuracy, 6)
  out = jaxdec.speculative_generate(target, [rows[0, :4].tolist()],
                                    Heads(params).with_choices(choices), max_new_tokens=20,
                                    stop_tokens=())
  ref = jaxdec.generate(target, [rows[0, :4].tolist()], max_new_tokens=20, stop_tokens=())
  np.testing.assert_array_equal(out.tokens, ref.tokens)


@pytest.mark.parametrize("kind", ["parallel", "sequential"])
def test_medusa_layout_round_trips_and_loads_as_a_drafter(trained, sequential, tmp_path, kind):
  params, _ = trained if kind == "parallel" else sequential
  write_medusa(params, str(tmp_path), choices=TREE, accuracy=np.full((3, 2), 0.5), dtype="float32")
  read, config = read_medusa(str(tmp_path))
  assert config["medusa_num_heads"] == 3 and config["medusa_num_layers"] == 1
  assert jax.tree.structure(read) == jax.tree.structure(params)
  for a, b in zip(jax.tree.leaves(read), jax.tree.leaves(params)):
    np.testing.assert_array_equal(a, np.asarray(b))
  drafter = jaxdec.load_drafter(str(tmp_path))
  assert drafter.choices == tuple(sorted(TREE, key=lambda p: (len(p), p)))
  assert jaxdec.load_drafter(str(tmp_path), choices=((0,),)).num_heads == 1


def test_a_published_medusa_file_loads(tmp_path):
  """The FasterDecoding/Medusa names and (out, in) layout, written by hand, no jaxdec entry."""
  from safetensors.numpy import save_file
  import json

  rng = np.random.RandomState(0)
  d, v = 8, 16
  tensors = {}
  for i in range(2):
    tensors[f"medusa_head.{i}.0.linear.weight"] = rng.randn(d, d).astype(np.float16)
    tensors[f"medusa_head.{i}.0.linear.bias"] = rng.randn(d).astype(np.float16)
    tensors[f"medusa_head.{i}.1.weight"] = rng.randn(v, d).astype(np.float16)
  save_file(tensors, str(tmp_path / "medusa_lm_head.safetensors"))
  (tmp_path / "config.json").write_text(json.dumps({"medusa_num_heads": 2, "medusa_num_layers": 1,
                                                    "base_model_name_or_path": "some/base"}))
  heads = jaxdec.load_drafter(str(tmp_path))
  assert heads.choices == ((0,), (0, 0))
  h = rng.randn(d).astype(np.float32)
  x = h + jax.nn.silu(tensors["medusa_head.1.0.linear.weight"].astype(np.float32) @ h
                      + tensors["medusa_head.1.0.linear.bias"].astype(np.float32))
  want = tensors["medusa_head.1.1.weight"].astype(np.float32) @ x
  np.testing.assert_allclose(head_logits(heads.params, jnp.asarray(h))[1], want, rtol=1e-4, atol=1e-4)
  tensors["extra.weight"] = np.zeros(3, np.float16)
  save_file(tensors, str(tmp_path / "medusa_lm_head.safetensors"))
  with pytest.raises(ValueError, match="extra.weight"):
    jaxdec.load_drafter(str(tmp_path))


def test_entropy_boundaries_mask_predictions_across_a_surge():
  """A hand-made entropy profile: flat, one surge predicting token 4. Head k at t keeps its
  prediction only when none of tokens t + 2 .. t + k + 1 opens a segment."""
  vocab = 16
  sure, unsure = jnp.full((vocab,), -20.0).at[0].set(20.0), jnp.zeros((vocab,))
  logits = jnp.stack([sure, sure, sure, unsure, sure, sure, sure, sure])[None]  # Position 3 -> token 4.
  rule = EntropyBoundaries(surge=1.0, decay=0.5)
  np.testing.assert_array_equal(rule.opens(logits)[0], [0, 0, 0, 0, 1, 0, 0, 0])
  within = np.asarray(rule.within(logits, 2)[0])  # [L, K]
  # Head 1 at t predicts t + 2: crosses iff t + 2 == 4; head 2 also skips over t + 2: t + 2 or t + 3.
  np.testing.assert_array_equal(within[:, 0], [1, 1, 0, 1, 1, 1, 1, 1])
  np.testing.assert_array_equal(within[:, 1], [1, 0, 0, 1, 1, 1, 1, 1])


def test_boundaries_drop_crossing_predictions_from_the_loss(target, rows):
  objective = MultiToken(boundaries=EntropyBoundaries(surge=0.0, decay=0.5))
  params = MedusaHeads(num_heads=3).init(jax.random.key(0), target)
  _, plain = MultiToken().loss(params, jnp.asarray(rows[:4]), None, part=None, target=target)
  _, ada = objective.loss(params, jnp.asarray(rows[:4]), None, part=None, target=target)
  assert ada["kept_frac"] < plain["kept_frac"]


# ---- EntMTP -----------------------------------------------------------------------------------------

def _feedback(entropies, count, vocab=64):
  """A Feedback whose committed tokens' target distributions are uniform over e^h ids (entropy h)."""
  from jaxdec.spec.drafter import Feedback

  support = np.round(np.exp(np.asarray(entropies, np.float64))).astype(int)  # [B, D + 1]
  ids = np.arange(vocab)[None, None, :]
  logits = jnp.asarray(np.where(ids < support[..., None], 0.0, -1e9), jnp.float32)
  batch = logits.shape[0]
  return Feedback(draft=None, verdict=None, count=jnp.asarray(count, jnp.int32),
                  total=jnp.zeros((batch,), jnp.int32), active=jnp.ones((batch,), bool),
                  logits=logits)


def test_entmtp_switch_follows_the_running_entropy(trained):
  from jaxdec.spec.entmtp import EntropyTrees

  params, _ = trained
  drafter = EntropyTrees(params, (((0,), (0, 0), (0, 0, 0)), ((0,), (0, 0), (1,)), ((0,), (1,), (2,))),
                         thresholds=(0.5, 1.5), decay=0.5)
  assert [b.tree.max_depth for b in drafter.variants()] == [3, 2, 1]
  state = drafter.init(jnp.zeros((1, 3), jnp.int32), jnp.array([3]), 16, None)
  picks = [int(drafter.pick(state))]
  # Committed tokens' entropies (log of the support size), a step at a time: calm, then a burst.
  for entropies, count in [([0.0, 0.0, 0.0], 3), ([np.log(8)] * 3, 1), ([np.log(8)] * 3, 3),
                           ([np.log(32)] * 3, 2), ([0.0] * 3, 3), ([0.0] * 3, 3)]:
    state = drafter.update(state, _feedback([entropies], [count]))
    picks.append(int(drafter.pick(state)))
  # EMA with decay 0.5: 0 -> 0 -> 1.04 -> 1.82 -> 2.9 -> 0.36 -> 0.05.
  assert picks == [0, 0, 1, 2, 2, 0, 0]
  with pytest.raises(ValueError, match="ascending thresholds"):
    EntropyTrees(params, (((0,),), ((1,),)), thresholds=())
  with pytest.raises(ValueError, match="only 3 heads"):
    EntropyTrees(params, (((0,), (0, 0), (0, 0, 0), (0, 0, 0, 0)),), thresholds=())


def test_greedy_with_entmtp_equals_greedy_ar(target, rows, trained):
  from jaxdec.spec.entmtp import EntropyTrees

  params, _ = trained
  # Thresholds at the target's entropy quartiles here (2.5-3.1 nats), so the run switches.
  drafter = EntropyTrees(params, (((0,), (0, 0), (0, 0, 0)), TREE, ((0,), (1,), (2,), (3,))),
                         thresholds=(2.6, 2.9), decay=0.5)
  prompts = [rows[i, : 3 + i].tolist() for i in range(4)]
  ref = jaxdec.generate(target, prompts, max_new_tokens=30, stop_tokens=())
  # The running entropy over the first row's committed tokens visits every bucket.
  logits = jaxdec.forward(target, np.concatenate([prompts[0], ref.tokens[0]])[None])[0, 2:-1]
  entropy = np.asarray(-jnp.sum(jax.nn.softmax(logits) * jax.nn.log_softmax(logits), -1))
  running, seen = 0.0, set()
  for h in entropy:
    running = 0.5 * running + 0.5 * h
    seen.add(int(np.searchsorted(drafter.thresholds, running)))
  assert seen == {0, 1, 2}
  out = jaxdec.speculative_generate(target, prompts, drafter, max_new_tokens=30, stop_tokens=())
  np.testing.assert_array_equal(out.tokens, ref.tokens)
  alone = jaxdec.speculative_generate(target, prompts[:1], drafter, max_new_tokens=30, stop_tokens=())
  np.testing.assert_array_equal(alone.tokens[0], ref.tokens[0])


def test_joint_training_moves_the_backbone_and_exports_it_beside_the_heads(target, rows, tmp_path):
  """MTP training (the backbone trains too): the export holds the new backbone as an HF model,
  its heads are measured on it, and speculation with both equals the new backbone's greedy AR."""
  from jaxdec.train.zoo import _export_part

  cfg = TrainConfig(name="joint", part=MedusaHeads(num_heads=2, joint=True), objective=MultiToken(),
                    steps=20, batch_size=8, seq_len=rows.shape[1], learning_rate=3e-3,
                    warmup_steps=2, eval_every=20, eval_windows=4, checkpoint_every=20)
  with jax.numpy_dtype_promotion("standard"):
    trainer = Trainer(cfg, str(tmp_path / "run"), target=target)
    records = trainer.run(rows, rows[:4], progress=False)
    trainer.close()
    meta = _export_part(cfg, trainer, rows[:4], str(tmp_path / "out"), 1.0, 0, str(tmp_path / "run"),
                        plot=False)
  assert "backbone_nll" in records[-1] and records[-1]["head1_nll"] < records[0]["head1_nll"]
  assert meta["eval"]["backbone_nll"] != meta["eval"]["target_nll"]
  backbone = jaxdec.load(str(tmp_path / "out" / "backbone"), dtype=jnp.float32)
  assert not np.allclose(backbone.params.embed, target.params.embed, atol=1e-3)
  heads = jaxdec.load_drafter(str(tmp_path / "out"))
  prompts = [rows[i, :4].tolist() for i in range(3)]
  ref = jaxdec.generate(backbone, prompts, max_new_tokens=20, stop_tokens=())
  out = jaxdec.speculative_generate(backbone, prompts, heads, max_new_tokens=20, stop_tokens=())
  np.testing.assert_array_equal(out.tokens, ref.tokens)


def test_heads_training_resumes_exactly(target, rows, tmp_path):
  """Stopped after 4 steps and resumed from its checkpoint, a run ends with the params of one
  that never stopped."""
  def config(steps):
    return TrainConfig(name="heads", part=MedusaHeads(num_heads=2, sequential=True),
                       objective=MultiToken(), steps=8, batch_size=4, seq_len=rows.shape[1],
                       learning_rate=3e-2, warmup_steps=1, eval_every=8, eval_windows=2,
                       checkpoint_every=steps)

  with jax.numpy_dtype_promotion("standard"):
    whole = Trainer(config(8), str(tmp_path / "whole"), target=target)
    whole.run(rows, progress=False)
    whole.close()
    first = Trainer(config(4), str(tmp_path / "split"), target=target)
    first.run(rows, stop_at=4, progress=False)
    first.close()
    second = Trainer(config(4), str(tmp_path / "split"), target=target)
    assert second.step == 4
    second.run(rows, progress=False)
    second.close()
  jax.tree.map(np.testing.assert_array_equal, second.module.params(), whole.module.params())
