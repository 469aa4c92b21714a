"""Training a K-Forcing student (`spec.kforcing.PushForward`) by progressive self-forcing
distillation from its AR teacher.

Our reading of the method: the student starts as the teacher (plus a noise embedding). At A
random anchors t of each training row, the student sees the real tokens up to t and k - 1 noise
slots at positions t + 1 .. t + k - 1 carrying u_1 .. u_{k-1}; one forward gives q_1 .. q_k, and
its own samples x_i = F^-1(q_i, u_i) (self-forcing: the student's rollouts, not the data) are
scored by the teacher in one forward over the same layout with x in the slots, giving
p_i = p(. | prefix, x_1 .. x_{i-1}). The loss is sum_i KL(p_i || q_i), plus the KL at every real
position (the student's own next-token law, which slot 1 is, stays the teacher's). All anchors'
slots share one forward through an attention mask (real tokens causal, each anchor's slots see
the real prefix up to it and their own earlier slots).

Progressive: window w (slots trained: q_1 .. q_w) starts at 2 (window 1 is the teacher itself,
which the student starts as) and grows by one every `stage_steps` steps up to k; the trainer
hands the step to the objective. `stage_steps=0` trains the full window from the start (the
ablation).
"""

from __future__ import annotations

import dataclasses
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct
from safetensors.numpy import save_file

from jaxdec.convert import export_hf
from jaxdec.model import Model, decode_hidden, embed, unembed
from jaxdec.spec.kforcing import (CONFIG_FILE, NOISE_FILE, NoiseParams, PushForward, inverse_cdf,
                                  noise_embed)
from jaxdec.train.mtp import next_token_nll
from jaxdec.train.objectives import _mean

@dataclasses.dataclass(frozen=True)
class PushForwardStudent:
  """The trainable K-Forcing student: the whole decoder (from the frozen target's weights) and a
  noise embedding of `features` thresholds. It learns the teacher's law at `temperature`."""

  num_tokens: int = 4
  features: int = 64
  temperature: float = 1.0

  def init(self, key: jax.Array, target: Model | None) -> dict:
    self.check(target)
    backbone = jax.tree.map(lambda x: x.astype(jnp.float32), target.params)
    d = target.config.hidden_size
    # The base starts at the mean token embedding: a slot first reads as "some token here".
    noise = NoiseParams(w=0.02 * jax.random.normal(key, (self.features, d), jnp.float32),
                        base=jnp.mean(backbone.embed, axis=0))
    return {"backbone": backbone, "noise": noise}

  def describe(self) -> dict:
    return {"kind": "PushForwardStudent", "num_tokens": self.num_tokens,
            "features": self.features, "temperature": self.temperature}

  def check(self, target: Model | None) -> None:
    for name in ("num_tokens", "features"):
      value = getattr(self, name)
      if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"PushForwardStudent.{name} must be an int >= 1, got {value!r}")
    if not self.temperature > 0:
      raise ValueError(f"PushForwardStudent.temperature must be > 0, got {self.temperature!r}")
    if not isinstance(target, Model):
      raise ValueError("a push-forward student distils a frozen AR teacher: set TrainConfig.target")
    if not target.config.is_causal:
      raise ValueError(f"the teacher must be autoregressive, got attention {target.config.attention}")

  def to_push_forward(self, params: dict, target: Model) -> PushForward:
    return PushForward(target.replace(params=params["backbone"]), params["noise"],
                       num_tokens=self.num_tokens, temperature=self.temperature)

  def export(self, params: dict, target: Model, windows, out_dir: str | None, *,
             dtype: str = "float16", extra: dict | None = None, tokenizer=None) -> dict:
    """The student's next-token loss on `windows` beside the teacher's (how much the shared
    backbone moved) and, with `out_dir`, the student as an HF model (with `tokenizer`, the
    teacher's) plus its noise embedding (`jaxdec.load_push_forward` / `jaxdec.load_drafter`)."""
    student = target.replace(params=params["backbone"])
    evals = {"teacher_nll": next_token_nll(target, windows),
             "student_nll": next_token_nll(student, windows)}
    if out_dir:
      export_hf(student.replace(params=jax.tree.map(lambda x: x.astype(dtype), student.params)),
                tokenizer, out_dir)
      noise = params["noise"]
      save_file({k: np.asarray(getattr(noise, k), np.float32) for k in ("w", "base")},
                os.path.join(out_dir, NOISE_FILE))
      with open(os.path.join(out_dir, CONFIG_FILE), "w") as f:
        json.dump({"num_tokens": self.num_tokens, "temperature": self.temperature,
                   **(extra or {})}, f, indent=2)
    return evals


@struct.dataclass
class SelfForcing:
  """Progressive self-forcing distillation (module docstring). `anchors` per row; a
  `greedy_fraction` of them feed u = 0 everywhere (the greedy rollout, which
  `push_forward_generate` without a key runs)."""

  anchors: int = struct.field(pytree_node=False, default=32)
  stage_steps: int = struct.field(pytree_node=False, default=100)
  greedy_fraction: float = struct.field(pytree_node=False, default=0.25)

  def window(self, step, k: int):
    """i32[]: slots trained at `step` (None: all k)."""
    if step is None or self.stage_steps == 0:
      return jnp.asarray(k, jnp.int32)
    return jnp.minimum(2 + jnp.asarray(step, jnp.int32) // self.stage_steps, k)

  def loss(self, params, tokens, key, *, part, target=None, scored=None, step=None):
    k, a = part.num_tokens, self.anchors
    batch, length = tokens.shape
    config, teacher = target.config, target.params
    scored = jnp.ones(tokens.shape, bool) if scored is None else scored
    key_anchor, key_u, key_greedy = jax.random.split(key, 3)
    # Anchor t (prefix up to t) where token t + 1 is scored; rows scoring nothing: anywhere.
    ok = scored[:, 1:] | ~jnp.any(scored[:, 1:], axis=1, keepdims=True)
    anchor = jax.random.categorical(key_anchor, jnp.where(ok, 0.0, -jnp.inf), shape=(a, batch)).T
    u = jax.random.uniform(key_u, (batch, a, k))
    u = jnp.where(jax.random.bernoulli(key_greedy, self.greedy_fraction, (batch, a, 1)), 0.0, u)
    pos, visible = _layout(anchor, length, k)

    def run(weights, x):
      hidden = decode_hidden(weights, x, pos, None, config=config, tree=visible)[0]
      return unembed(weights, hidden, config)

    def per_anchor(logits):  # [B, L + A(k-1), V] -> real [B, L, V], per anchor [B, A, k, V]
      real = logits[:, :length]
      first = jnp.take_along_axis(real, anchor[:, :, None], axis=1)[:, :, None]
      slots = logits[:, length:].reshape(batch, a, k - 1, config.vocab_size)
      return real, jnp.concatenate([first, slots], axis=2)

    student = params["backbone"]
    slot_inputs = noise_embed(params["noise"], u[:, :, :k - 1]).reshape(batch, a * (k - 1),
                                                                     config.hidden_size)
    q_real, q = per_anchor(run(student, jnp.concatenate([embed(student, tokens), slot_inputs], 1)))
    drawn = inverse_cdf(jax.lax.stop_gradient(q), u)  # [B, A, k]: the student's own rollout.
    teacher_in = jnp.concatenate([tokens, drawn[:, :, :k - 1].reshape(batch, a * (k - 1))], axis=1)
    p_real, p = per_anchor(jax.lax.stop_gradient(run(teacher, embed(teacher, teacher_in))))
    kl_real = _mean(_kl(p_real[:, :-1], q_real[:, :-1], part.temperature), scored[:, 1:])
    kl_slots = jnp.mean(_kl(p, q, part.temperature), axis=(0, 1))  # [k]
    window = self.window(step, k)
    loss = kl_real + jnp.sum(jnp.where(jnp.arange(1, k) < window, kl_slots[1:], 0.0))
    agree = jnp.mean(jnp.argmax(p, -1) == jnp.argmax(q, -1), axis=(0, 1))
    metrics = {"kl_real": kl_real, "window": window.astype(jnp.float32)}
    metrics.update({f"kl_{i + 1}": kl_slots[i] for i in range(1, k)})
    metrics.update({f"agree_{i + 1}": agree[i] for i in range(1, k)})
    return loss, metrics


def _layout(anchor: jax.Array, length: int, k: int):
  """Positions i32[B, L + A(k-1)] and visibility bool[B, T, T] of [L real tokens | each anchor's
  k - 1 slots]: real tokens causal; anchor a's slot s at position t_a + 1 + s sees the real
  tokens up to t_a and its own slots up to s."""
  batch, a = anchor.shape
  offset = jnp.arange(1, k, dtype=jnp.int32)
  real = jnp.broadcast_to(jnp.arange(length, dtype=jnp.int32)[None, :], (batch, length))
  slot_pos = (anchor[:, :, None] + offset[None, None, :]).reshape(batch, -1)
  pos = jnp.concatenate([real, slot_pos], axis=1)
  owner = jnp.concatenate([jnp.full((length,), -1), jnp.repeat(jnp.arange(a), k - 1)])
  is_real = owner < 0
  limit = jnp.concatenate([real, jnp.repeat(anchor, k - 1, axis=1)], axis=1)  # Last real seen.
  sees_real = is_real[None, None, :] & (pos[:, None, :] <= limit[:, :, None])
  sees_slot = (~is_real[None, :] & (owner[None, :] == owner[:, None]))[None] & (pos[:, None, :] <= pos[:, :, None])
  return pos, sees_real | sees_slot


def _kl(p_logits, q_logits, temperature: float):
  """KL(softmax(p / temperature) || softmax(q)) over the last axis."""
  log_p = jax.nn.log_softmax(p_logits / temperature, axis=-1)
  log_q = jax.nn.log_softmax(q_logits, axis=-1)
  return jnp.sum(jnp.exp(log_p) * (log_p - log_q), axis=-1)

