"""Training EAGLE-3 drafters (`jaxdec.spec.eagle`): the training-time test (TTT), and
Verification-Aware Training (VAT).

The part is `Eagle3Drafter` (a `Trainable` over a frozen target: the fc fusion, one draft layer
and a final norm; the target's embedding and LM head stay frozen and are not part of the params),
the objective `TrainingTimeTest`.

TTT (EAGLE-3): the drafter is unrolled `steps` times over every position of a row at once. Step
0 feeds pair t = (fused target features at t, token t + 1); step j feeds pair t = (its own output
at pair t - 1 of step j - 1, token t + 1), so step j at pair t is exactly what the drafter computes
at depth j + 1 of a chain rooted at token t - j + 1. Attention follows inference: at step j pair t
sees the step-0 keys of pairs <= t - j (the committed context) and, from each step i = 1..j, the
one key of pair t - j + i (the chain's earlier drafted nodes). Every step is scored by soft
cross-entropy against the target's distribution of token t + 2, weighted decay^j.

VAT (our reading of the abstract, which gives no formulas): at every training step, simulate
greedy verification of each chain (the chain rooted at pair s accepts step j's draft when the
drafter's argmax equals the target's and every earlier step of that chain was accepted). (i)
Verification-adaptive weighting: a chain's steps get weight 1 up to and including its first
rejection r, and decay^(j - r) after it (the decay clock restarts at the first rejection instead
of at the root). (ii) A verification head (a linear probe on the drafter's normed output)
learns, by BCE weighted `head_weight`, whether each step survives; it is trained jointly and
exported, but decoding does not read it (the abstract leaves inference unchanged).
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import optax
from flax import struct

from jaxdec.convert.eagle3 import write_eagle3
from jaxdec.corpus import Rows
from jaxdec.decoding import positions
from jaxdec.model import Model, ModelConfig, forward, project_qkv
from jaxdec.model.layers import rms_norm, rope_cos_sin
from jaxdec.spec.eagle import (REUSE, Eagle3, Eagle3Params, EagleLayer, VerifyHead, attend,
                               default_layers, draft_config, draft_logp, fuse, pair_output,
                               pair_qkv, target_head)


@dataclasses.dataclass(frozen=True)
class Eagle3Drafter:
  """An EAGLE-3 drafter over a frozen target. `layers`: the target hidden states fused (default
  `spec.eagle.default_layers`); `reuse`/`kv_layer`: KVShot's variants (`spec.eagle`; kv_layer
  defaults to the target's last layer); `verification_head`: VAT's classifier (trained with
  `TrainingTimeTest(vat=True)`). The layer starts from the target's last layer (its weights on the
  feature half of the input, small random ones on the token half), the norm from its final norm,
  fc from picking the highest fused layer. `top_k`, `depth`, `size`: the dynamic tree the exported
  drafter grows by default."""

  layers: tuple[int, ...] | None = None
  reuse: str = "hidden"
  kv_layer: int | None = None
  verification_head: bool = False
  top_k: int = 4
  depth: int = 5
  size: int = 16

  def feature_layers(self, config: ModelConfig) -> tuple[int, ...]:
    if self.reuse == "kv":
      return ()
    return tuple(self.layers) if self.layers is not None else default_layers(config.num_layers)

  def target_kv_layer(self, config: ModelConfig) -> int | None:
    if self.reuse == "hidden":
      return None
    return config.num_layers - 1 if self.kv_layer is None else self.kv_layer

  def init(self, key: jax.Array, target: Model | None) -> Eagle3Params:
    self.check(target)
    config = target.config
    d = config.hidden_size
    last = jax.tree.map(lambda x: x[-1].astype(jnp.float32), target.params.layers)
    keys = jax.random.split(key, 3)
    # [2D, heads, hd]: small random weights on the token half, the last layer's on the feature half.
    wide = {name: jnp.concatenate([0.02 * jax.random.normal(keys[i], getattr(last, name).shape,
                                                            jnp.float32), getattr(last, name)])
            for i, name in enumerate(("wq", "wk", "wv"))}
    layer = EagleLayer(input_norm=jnp.ones((d,), jnp.float32), hidden_norm=last.attn_norm,
                       wo=last.wo, mlp_norm=last.mlp_norm, w_gate=last.w_gate, w_up=last.w_up,
                       w_down=last.w_down, bq=last.bq, bk=last.bk, bv=last.bv,
                       q_norm=last.q_norm, k_norm=last.k_norm, **wide)
    params = Eagle3Params(layer=layer, norm=target.params.final_norm.astype(jnp.float32))
    n = len(self.feature_layers(config))
    if n:
      params = params.replace(fc=jnp.concatenate([jnp.zeros(((n - 1) * d, d), jnp.float32),
                                                  jnp.eye(d, dtype=jnp.float32)]))
    if self.verification_head:
      params = params.replace(verify=VerifyHead(w=jnp.zeros((d,), jnp.float32),
                                                b=jnp.zeros((), jnp.float32)))
    return params

  def describe(self) -> dict:
    return {"kind": "Eagle3Drafter", "layers": None if self.layers is None else list(self.layers),
            "reuse": self.reuse, "kv_layer": self.kv_layer,
            "verification_head": self.verification_head}

  def check(self, target: Model | None) -> None:
    if not isinstance(target, Model):
      raise ValueError("Eagle3Drafter trains over a frozen target: set TrainConfig.target")
    config = target.config
    if not config.is_causal:
      raise ValueError(f"EAGLE drafts for an autoregressive target, got attention {config.attention}")
    if self.reuse not in REUSE:
      raise ValueError(f"Eagle3Drafter.reuse must be one of {REUSE}, got {self.reuse!r}")
    for layer in self.feature_layers(config):
      if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer <= config.num_layers:
        raise ValueError(f"feature layer {layer!r} is outside the target's [0, {config.num_layers}]")
    kv = self.target_kv_layer(config)
    if kv is not None and (isinstance(kv, bool) or not isinstance(kv, int)
                           or not 0 <= kv < config.num_layers):
      raise ValueError(f"kv_layer {kv!r} is not a layer of the target (0..{config.num_layers - 1})")

  def to_drafter(self, params: Eagle3Params, target: Model) -> Eagle3:
    config = target.config
    return Eagle3(params.replace(verify=None),
                  embed=target.params.embed, head=target_head(target),
                  config=draft_config(config), layers=self.feature_layers(config),
                  reuse=self.reuse, kv_layer=self.target_kv_layer(config), top_k=self.top_k,
                  depth=self.depth, size=self.size)

  def export(self, params: Eagle3Params, target: Model, windows, out_dir: str | None, *,
             dtype: str = "float16", extra: dict | None = None, tokenizer=None) -> dict:
    """Measure the simulated chain acceptance on `windows` and, with `out_dir`, write the drafter
    in EAGLE-3's layout (`jaxdec.convert.eagle3`) naming the target as its base model. The
    drafter uses its target's tokenizer: `tokenizer` is not written."""
    del tokenizer
    evals = chain_acceptance(params, self, target, windows)
    if out_dir:
      write_eagle3(self.to_drafter(params, target), out_dir, dtype=dtype,
                   extra=dict(extra or {}, evaluation=evals), lm_head=False)
    return evals


def _shift(x: jax.Array, n: int, axis: int = 1) -> jax.Array:
  """x moved n places along `axis` (n > 0: to later indices), zero-filled."""
  if n == 0:
    return x
  size = x.shape[axis]
  pad = [(0, 0)] * x.ndim
  if n > 0:
    pad[axis] = (n, 0)
    return jnp.pad(jax.lax.slice_in_dim(x, 0, size - n, axis=axis), pad)
  pad[axis] = (0, -n)
  return jnp.pad(jax.lax.slice_in_dim(x, -n, size, axis=axis), pad)


def unroll(params: Eagle3Params, part: Eagle3Drafter, target: Model, tokens: jax.Array, steps: int):
  """The training-time test on rows tokens i32[B, T]: (outputs h f[steps, B, T, D] (step j, pair
  t), the target's log-probabilities f32[B, T, V] of token t + 2 at pair t). Everything read
  from the target is outside the gradient."""
  config = target.config
  dconf = draft_config(config)
  batch, length = tokens.shape
  layers = part.feature_layers(config)
  kv_layer = part.target_kv_layer(config)
  wanted = layers + (() if kv_layer is None else (kv_layer,))
  logits, hidden, _ = forward(target.params, tokens, positions(batch, length), config=config,
                              hidden_layers=wanted)
  logits, hidden = jax.lax.stop_gradient((logits, hidden))
  teacher = jax.nn.log_softmax(_shift(logits, -1), axis=-1)  # Pair t: token t + 2's law.
  embedded = jax.lax.stop_gradient(target.params.embed[_shift(tokens, -1)])  # Token t + 1.
  dtype = params.layer.wk.dtype
  feats = (fuse(params, hidden[:len(layers)]) if layers
           else jnp.zeros((batch, length, config.hidden_size), dtype))
  pair_pos = positions(batch, length) + 1
  index = jnp.arange(length, dtype=jnp.int32)
  shared_target = None
  if kv_layer is not None:  # The target's K/V of kv_layer at tokens 0..T-1.
    p = jax.tree.map(lambda x: x[kv_layer], target.params.layers)
    cos, sin = rope_cos_sin(positions(batch, length), config)
    normed = rms_norm(hidden[-1], p.attn_norm, config.layer.norm_eps, config.layer.norm_unit_offset)
    _, k_t, v_t = jax.lax.stop_gradient(project_qkv(normed, p, cos, sin, config))
    shared_target = (k_t.astype(dtype), v_t.astype(dtype))
  outputs, own = [], []
  for j in range(steps):
    if j:
      feats = _shift(outputs[-1], 1)
    q, k, v = pair_qkv(params, dconf, embedded, feats, pair_pos)
    own.append((k, v))
    context = (index[None, :] <= index[:, None] - j)[None]  # Pair t sees context s <= t - j.
    # Own keys: committed pairs are shared context (absent with reuse "kv", where the root
    # pair's step-0 key is one more diagonal key), then one key per earlier unrolled step.
    shared = [] if part.reuse == "kv" else [own[0] + (context,)]
    if shared_target is not None:
      shared.append(shared_target + (context,))
    first = 0 if part.reuse == "kv" else 1
    diagonal = [(_shift(own[i][0], j - i), _shift(own[i][1], j - i)) for i in range(first, j + 1)]
    outputs.append(pair_output(params, dconf, feats, attend(q, shared, diagonal)))
  return jnp.stack(outputs), teacher


@struct.dataclass
class TrainingTimeTest:
  """EAGLE-3's loss: `steps` unrolled steps, step j weighted decay^j, soft cross-entropy to the
  target. With `vat` the weights are verification-adaptive and the part's verification head
  (`Eagle3Drafter(verification_head=True)`) trains by BCE weighted `head_weight` (module
  docstring). Metrics: each step's top-1 agreement with the target and the simulated greedy
  chain length `sim_tau` (1 + leading accepted steps, averaged over chain roots)."""

  steps: int = struct.field(pytree_node=False, default=7)
  decay: float = struct.field(pytree_node=False, default=0.8)
  vat: bool = struct.field(pytree_node=False, default=False)
  head_weight: float = struct.field(pytree_node=False, default=0.1)

  def loss(self, params, tokens, key, *, part, target=None, scored=None, step=None):
    del key, step
    if self.vat and params.verify is None:
      raise ValueError("TrainingTimeTest(vat=True) trains the verification head: use "
                       "Eagle3Drafter(verification_head=True)")
    out = chain_terms(params, part, target, tokens, scored, self.steps)
    ce, valid, accepted = out["ce"], out["valid"], out["accepted"]  # [S, B, T] at (step, pair).
    steps = ce.shape[0]
    depth = jnp.arange(steps, dtype=jnp.float32)[:, None, None]
    if self.vat:  # Re-anchor the decay at each chain's first simulated rejection.
      first_reject = _by_pair(out["leading"], steps).astype(jnp.float32)  # [S, B, T]
      weights = jnp.where(depth <= first_reject, 1.0, self.decay ** (depth - first_reject))
    else:
      weights = jnp.broadcast_to(self.decay ** depth, ce.shape)
    count = jnp.maximum(jnp.sum(valid, axis=(1, 2)), 1).astype(jnp.float32)
    per_step = jnp.sum(jnp.where(valid, weights * ce, 0.0), axis=(1, 2)) / count
    agree = jnp.sum(valid & accepted, axis=(1, 2)).astype(jnp.float32) / count
    loss = jnp.sum(per_step)
    metrics = {f"step{j}_acc": agree[j] for j in range(steps)}
    metrics["step0_nll"] = jnp.sum(jnp.where(valid[0], ce[0], 0.0)) / count[0]
    metrics["sim_tau"] = out["sim_tau"]
    if self.vat:
      bce = optax.sigmoid_binary_cross_entropy(out["verify_logits"], out["survives"].astype(jnp.float32))
      head = jnp.sum(jnp.where(valid, bce, 0.0)) / jnp.sum(count)
      metrics["verify_bce"] = head
      loss = loss + self.head_weight * head
    return loss, metrics


def _by_pair(per_root: jax.Array, steps: int) -> jax.Array:
  """A per-chain-root value [B, T] (root pair s) -> [S, B, T] at (step j, pair s + j)."""
  return jnp.stack([_shift(per_root, j) for j in range(steps)])


def chain_terms(params, part: Eagle3Drafter, target: Model, tokens, scored, steps: int) -> dict:
  """Per (step j, pair t), f[S, B, T]: `ce` soft cross-entropy to the target, `valid` (the chain
  root t - j exists and token t + 2 is scored), `accepted` (drafter argmax == target argmax);
  per chain root: `leading` [B, T] accepted steps before the first rejection; `survives` [S, B, T]
  (this and every earlier step of its chain accepted), `verify_logits` (with a head), `sim_tau`."""
  h, teacher = unroll(params, part, target, tokens, steps)
  head = target_head(target)
  logp = draft_logp(params, draft_config(target.config), jax.lax.stop_gradient(head), h)
  ce = -jnp.sum(jnp.exp(teacher)[None] * logp, axis=-1)
  length = tokens.shape[1]
  t = jnp.arange(length, dtype=jnp.int32)[None, None, :]
  j = jnp.arange(steps, dtype=jnp.int32)[:, None, None]
  label_scored = jnp.ones(tokens.shape, bool) if scored is None else scored
  valid = (t >= j) & (t + 2 < length) & _shift(label_scored, -2)[None]
  accepted = jnp.argmax(logp, -1) == jnp.argmax(teacher, -1)[None]
  # Along each chain (root s): step j sits at pair s + j.
  chain_ok = jnp.stack([_shift(accepted[i] & valid[i], -i) for i in range(steps)])  # [S, B, roots]
  chain_valid = jnp.stack([_shift(valid[i], -i) for i in range(steps)])
  survives_root = jnp.cumprod(chain_ok.astype(jnp.int32), axis=0)
  leading = jnp.sum(survives_root, axis=0)
  root_valid = chain_valid[0]
  out = {"ce": ce, "valid": valid, "accepted": accepted, "leading": leading,
         "survives": jnp.stack([_shift(survives_root[i], i) for i in range(steps)]) > 0,
         "sim_tau": jnp.sum(jnp.where(root_valid, 1.0 + leading, 0.0))
                    / jnp.maximum(jnp.sum(root_valid), 1).astype(jnp.float32)}
  if params.verify is not None:
    layer = target.config.layer
    normed = rms_norm(h, params.norm, layer.norm_eps, layer.norm_unit_offset)
    out["verify_logits"] = jnp.einsum("sbtd,d->sbt", normed, params.verify.w) + params.verify.b
  return out


def chain_acceptance(params: Eagle3Params, part: Eagle3Drafter, target: Model,
                     windows: np.ndarray | Rows, steps: int = 8) -> dict:
  """The drafter's conditional acceptance rate at each depth 1..steps of a greedy chain (EAGLE's
  n-alpha: accepted at depth d given accepted up to d - 1), simulated by the training-time test
  on `windows` (teacher-forced), and the implied tokens per step of a chain of `steps`."""
  tokens, scored = ((windows.tokens, windows.scored) if isinstance(windows, Rows)
                    else (np.asarray(windows), None))

  @jax.jit
  def run(t, s):
    out = chain_terms(params, part, target, t, s, steps)
    chain_ok = jnp.stack([_shift(out["accepted"][i] & out["valid"][i], -i) for i in range(steps)])
    root = _shift(out["valid"][steps - 1], -(steps - 1))  # Roots with a full chain ahead.
    reached = jnp.cumprod(chain_ok.astype(jnp.int32), axis=0)
    return jnp.sum(jnp.where(root[None], reached, 0), axis=(1, 2)), jnp.sum(root)

  reached, roots = np.zeros(steps), 0
  for i in range(len(tokens)):
    r, n = run(jnp.asarray(tokens[i: i + 1]), None if scored is None else jnp.asarray(scored[i: i + 1]))
    reached += np.asarray(r)
    roots += int(n)
  before = np.concatenate([[roots], reached[:-1]])
  alpha = reached / np.maximum(before, 1)
  return {"alpha": alpha.round(4).tolist(), "sim_tau": round(1.0 + float(reached.sum()) / max(roots, 1), 3),
          "roots": roots}
