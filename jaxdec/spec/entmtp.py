"""EntMTP: entropy-guided switching among candidate trees for multi-token-prediction heads.

Paper (abstract): keep a set of Pareto-optimal tree topologies, from shallow and wide to deep and
narrow; a running estimate of the local generation entropy picks one each step (low entropy:
speculate deep; high: conservatively), with thresholds from offline profiling. We read it as:
the estimate is an EMA (`decay`) of the target's entropy at each committed token, in committed
order; `thresholds` (ascending, nats) cut it into len(trees) buckets, bucket i drafting
`trees[i]`; the profile (`jaxdec.train.mtp.entropy_profile`) measures the heads' per-rank
accuracy in each bucket and builds each bucket's best tree of one size from it, so every tree
costs the same target forward and only its shape changes. The loop compiles one step per tree
and switches with `lax.switch`; the choice is one per batch (the mean of the rows' estimates),
so a batch of rows in different regimes shares a tree.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxdec.model import ModelConfig
from jaxdec.spec.drafter import Context, Feedback, Switching
from jaxdec.spec.heads import Heads, check_choices, choices_tree, draft_from
from jaxdec.spec.tree import Tree


@struct.dataclass
class EntropyTrees(Switching):
  """Medusa heads (`params` as `spec.heads.head_logits`) drafting `trees[i]` while the running
  entropy lies in bucket i of `thresholds`. `initial` is the estimate before any token is
  committed; `active` is the branch this instance drafts (set by `variants()`)."""

  params: HeadsParams
  trees: tuple = struct.field(pytree_node=False)
  thresholds: tuple = struct.field(pytree_node=False)
  decay: float = struct.field(pytree_node=False, default=0.8)
  initial: float = struct.field(pytree_node=False, default=0.0)
  active: int = struct.field(pytree_node=False, default=0)
  forwards = 0

  def __post_init__(self):
    heads = Heads(self.params, None)  # Checks the params.
    if not isinstance(self.trees, (tuple, list)) or not self.trees:
      raise ValueError(f"EntropyTrees needs at least one tree, got {self.trees!r}")
    trees = tuple(check_choices(t, heads.num_heads) for t in self.trees)
    thresholds = tuple(float(t) for t in self.thresholds)
    if len(thresholds) != len(trees) - 1 or list(thresholds) != sorted(thresholds):
      raise ValueError(f"{len(trees)} trees need {len(trees) - 1} ascending thresholds, got "
                       f"{self.thresholds!r}")
    if not 0.0 <= self.decay < 1.0:
      raise ValueError(f"EntropyTrees.decay must be in [0, 1), got {self.decay!r}")
    if not 0 <= self.active < len(trees):
      raise ValueError(f"EntropyTrees.active must index the trees, got {self.active!r}")
    object.__setattr__(self, "trees", trees)
    object.__setattr__(self, "thresholds", thresholds)

  @property
  def tree(self) -> Tree:
    return choices_tree(self.trees[self.active])

  def check(self, target: ModelConfig) -> None:
    Heads(self.params, None).check(target)

  def hidden_layers(self, target: ModelConfig) -> tuple[int, ...]:
    return (target.num_layers,)

  def init(self, prompt, prompt_lengths, capacity, hidden):
    return jnp.full(prompt.shape[:1], self.initial, jnp.float32)  # The running entropy, per row.

  def propose(self, state, ctx: Context):
    return draft_from(self.params, ctx, self.trees[self.active]), state

  def update(self, state, feedback: Feedback):
    entropy = -jnp.sum(jax.nn.softmax(feedback.logits) * jax.nn.log_softmax(feedback.logits), -1)
    for j in range(entropy.shape[1]):  # The committed tokens in order.
      state = jnp.where(j < feedback.count, self.decay * state + (1.0 - self.decay) * entropy[:, j],
                        state)
    return state

  def variants(self) -> tuple["EntropyTrees", ...]:
    return tuple(self.replace(active=i) for i in range(len(self.trees)))

  def pick(self, state):
    return jnp.searchsorted(jnp.asarray(self.thresholds, jnp.float32), jnp.mean(state)).astype(jnp.int32)


def bucket_of(entropy: np.ndarray, thresholds) -> np.ndarray:
  """The bucket index of each running-entropy value, as `EntropyTrees.pick` assigns them."""
  return np.searchsorted(np.asarray(thresholds, np.float32), np.asarray(entropy, np.float32),
                         side="left")
