"""Draft-tree topologies: the batched `Topology` arrays, and per-row dynamic trees (EAGLE-2
style) through the speculative loop, lossless against plain decoding."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import jaxdec
import test_spec as ref
from jaxdec import spec
from jaxdec.model import forward
from jaxdec.spec.tree import Topology

small = ref.small  # (target, draft, prompt) for the distribution test.


def _reference(parents):
  """Depths, ancestor mask, paths and children of one tree, by the definitions."""
  n = len(parents)
  up = lambda i: [] if i == 0 else [i] + up(parents[i - 1])
  chains = [up(i)[::-1] for i in range(n + 1)]  # Root excluded, by depth.
  depths = np.array([len(c) for c in chains], np.int32)
  mask = np.eye(n + 1, dtype=bool)
  for i, c in enumerate(chains):
    mask[i, [0] + c] = True
  paths = np.zeros((n + 1, max(depths.max(), 1)), np.int32)
  for i, c in enumerate(chains):
    paths[i, : len(c)] = c
  kids = [[j for j in range(1, n + 1) if parents[j - 1] == i] for i in range(n + 1)]
  children = np.full((n + 1, max(map(len, kids))), -1, np.int32)
  for i, k in enumerate(kids):
    children[i, : len(k)] = k
  return depths, mask, paths, children


def _random_tree(rng, n):
  """Chains, bushes and everything between: each node hangs off the previous one or a random
  earlier one."""
  chainy = rng.rand()
  return tuple(int(i if rng.rand() < chainy else rng.randint(0, i + 1)) for i in range(n))


def test_from_parents_matches_static_trees():
  rng = np.random.RandomState(0)
  n = 7
  trees = [tuple(range(n)), (0,) * n, (0, 0, 1, 1, 2, 2, 3), (0, 1, 0, 3, 2, 5, 5)]
  trees += [_random_tree(rng, n) for _ in range(12)]
  for tree in trees:  # The static tree against the definitions.
    static = spec.Tree(tree)
    for name, want in zip(("depths", "ancestor_mask", "paths", "children"), _reference(tree)):
      np.testing.assert_array_equal(getattr(static, name), want, err_msg=f"{tree} {name}")
  max_depth = max(spec.Tree(t).max_depth for t in trees)
  max_children = max(spec.Tree(t).children.shape[1] for t in trees)
  topo = jax.jit(Topology.from_parents, static_argnums=(1, 2))(
      jnp.asarray(trees, jnp.int32), max_depth, max_children)
  for row, tree in enumerate(trees):  # One tree per row, padded out to the batch's bounds.
    static = Topology.of(spec.Tree(tree), 1)
    np.testing.assert_array_equal(topo.parents[row], static.parents[0])
    np.testing.assert_array_equal(topo.depths[row], static.depths[0])
    np.testing.assert_array_equal(topo.ancestor_mask[row], static.ancestor_mask[0])
    width, fan = static.paths.shape[2], static.children.shape[2]
    np.testing.assert_array_equal(topo.paths[row, :, :width], static.paths[0])
    np.testing.assert_array_equal(topo.paths[row, :, width:], 0)
    np.testing.assert_array_equal(topo.children[row, :, :fan], static.children[0])
    np.testing.assert_array_equal(topo.children[row, :, fan:], -1)


# ---- a drafter with a different tree per row and step ------------------------------------------

# Per-row shapes (size 6, depth <= 4, fan-out <= 3): a long branch and a short one, a bush, a
# forked chain, interleaved branches.
SHAPES = ((0, 1, 2, 3, 0, 5), (0, 0, 0, 1, 2, 4), (0, 1, 1, 2, 3, 4), (0, 1, 0, 3, 2, 5))
SHAPE_DEPTHS = np.stack([spec.Tree(s).depths[1:] for s in SHAPES])


@struct.dataclass
class Bushes(spec.Drafter):
  """Row b drafts shape (b + total) % 4 of SHAPES: at each node the target's own greedy token at
  that depth of its continuation, corrupted at some (row, step, node)s (and one node marked
  invalid at some steps), so siblings differ and acceptance stops at various depths."""

  target: jaxdec.Model
  parents_none: bool = struct.field(pytree_node=False, default=False)
  tree = spec.DynamicTree(size=6, max_depth=4, max_children=3)
  forwards = 4

  def propose(self, state, ctx):
    params, config = self.target.params, self.target.config
    token = jnp.take_along_axis(ctx.seq, (ctx.total - 1)[:, None], axis=1)
    cache, greedy = ctx.cache, []
    for i in range(self.tree.max_depth):
      logits, _, cache = forward(params, token, (ctx.total - 1 + i)[:, None], cache, config=config)
      token = jnp.argmax(logits, -1).astype(jnp.int32)
      greedy.append(token)
    shape = (ctx.rows + ctx.total) % len(SHAPES)
    depths = jnp.asarray(SHAPE_DEPTHS)[shape]
    tokens = jnp.take_along_axis(jnp.concatenate(greedy, axis=1), depths - 1, axis=1)
    node = jnp.arange(1, self.tree.size + 1, dtype=jnp.int32)[None, :]
    mix = ctx.rows[:, None] * 5 + ctx.total[:, None] * 3 + node * 7
    tokens = jnp.where(mix % 4 == 0, (tokens + node) % config.vocab_size, tokens)
    valid = mix % 9 != 1
    parents = None if self.parents_none else jnp.asarray(SHAPES, jnp.int32)[shape]
    return spec.Draft(tokens=tokens, valid=valid, parents=parents), state


def _prompts(seed, lengths, vocab=128):
  rng = np.random.RandomState(seed)
  return [rng.randint(2, vocab, n).tolist() for n in lengths]


@pytest.mark.parametrize("verifier", [spec.Greedy(), spec.Exact()])
def test_dynamic_trees_greedy_equal_greedy_ar(model, verifier):
  drafter = Bushes(model)
  for prompts in (_prompts(0, [3]), _prompts(1, [1, 5, 2, 4])):
    want = jaxdec.generate(model, prompts, max_new_tokens=24)
    out = jaxdec.speculative_generate(model, prompts, drafter, verifier, max_new_tokens=24)
    np.testing.assert_array_equal(out.lengths, want.lengths)
    np.testing.assert_array_equal(out.tokens, want.tokens)
    accepted = np.asarray(out.stats["accepted"])
    assert accepted.max() <= 4 and len(set(accepted[accepted >= 0].tolist())) >= 3
    assert float(np.mean(out.stats["acceptance_length"])) > 1.5


def test_dynamic_trees_with_logits_rules(model):
  """Controls see each node's own ancestors (the per-row pending tokens)."""
  prompts = _prompts(2, [4, 2, 6])
  kw = dict(max_new_tokens=20, repetition_penalty=1.5, min_new_tokens=8)
  want = jaxdec.generate(model, prompts, **kw)
  out = jaxdec.speculative_generate(model, prompts, Bushes(model), **kw)
  np.testing.assert_array_equal(out.tokens, want.tokens)


@pytest.mark.slow  # test_spec's eagle_dynamic_tree case checks dynamic trees' law in CI
def test_dynamic_trees_exact_matches_ar_sampling_in_distribution(small):
  target, _, prompt = small
  sampling = jaxdec.Sampling.create(temperature=1.0, top_k=8, top_p=0.95)
  out = jaxdec.speculative_generate(target, [prompt] * ref.N_SAMPLES, Bushes(target), spec.Exact(),
                                    max_new_tokens=3, sampling=sampling, key=jax.random.key(0))
  accepted = np.asarray(out.stats["accepted"][:, 0])
  assert (accepted > 1).mean() > 0.05 and (accepted == 0).mean() > 0.05  # Paths of all kinds.
  joint12, joint23 = ref._joint_reference(target, prompt,
                                          jaxdec.Sampling.create(1.0, 8, 0.95, batch=1))
  assert ref._pvalue(ref._pairs(out, 0), joint12) > 1e-3
  assert ref._pvalue(ref._pairs(out, 1), joint23) > 1e-3


# ---- errors ----------------------------------------------------------------------------------------

def test_bad_dynamic_trees_raise(model):
  for args, message in [((0, 1, 1), "DynamicTree.size must be an int >= 1, got 0"),
                        ((4, 0, 1), "DynamicTree.max_depth must be an int >= 1, got 0"),
                        ((4, 2, -1), "DynamicTree.max_children must be an int >= 1, got -1"),
                        ((4, 2.0, 1), "DynamicTree.max_depth must be an int >= 1, got 2.0"),
                        ((4, 5, 1), "DynamicTree.max_depth must be <= size 4, got 5"),
                        ((4, 2, 6), "DynamicTree.max_children must be <= size 4, got 6")]:
    with pytest.raises(ValueError, match=message):
      spec.DynamicTree(*args)
  with pytest.raises(TypeError, match=r"DynamicTree of 6 nodes but returned Draft.parents=None"):
    jaxdec.speculative_generate(model, [[5, 6]], Bushes(model, parents_none=True), max_new_tokens=4)
  with pytest.raises(ValueError, match="Collaborative verification needs a chain drafter"):
    jaxdec.speculative_generate(model, [[5, 6]], Bushes(model), spec.Collaborative())


@struct.dataclass
class _ChainWithParents(spec.Drafter):
  tree = spec.Tree.chain(2)
  forwards = 0

  def propose(self, state, ctx):
    zeros = jnp.zeros((ctx.seq.shape[0], 2), jnp.int32)
    return spec.Draft(tokens=zeros, valid=zeros == 0, parents=zeros), state


def test_static_tree_with_parents_raises(model):
  with pytest.raises(TypeError, match="static Tree of 2 nodes but returned Draft.parents"):
    jaxdec.speculative_generate(model, [[5, 6]], _ChainWithParents(), max_new_tokens=4)
