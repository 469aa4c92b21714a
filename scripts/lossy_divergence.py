"""Measure how far each verifier's output distribution is from the target's (AR sampling).

A small random target and a perturbed copy as draft (vocab 12, so the joint law of the 2nd and
3rd generated tokens is computable exactly). For each verifier: total variation and KL between
the sampled joint law of (t2, t3) and the exact AR-sampling law, plus tau. `Exact` is the
control (its distance is sampling noise only). Usage: python scripts/lossy_divergence.py
"""

import sys

import jax
import jax.numpy as jnp
import numpy as np

import jaxdec
from jaxdec import spec
from jaxdec.model import Model, ModelConfig, init_params
from jaxdec.spec.verify import target_probs

V, N = 12, 20000


def models():
  """A small random target and, as draft, a copy with every weight perturbed by noise."""
  config = ModelConfig(vocab_size=V, hidden_size=64, intermediate_size=128, num_layers=2,
                       num_heads=4, num_kv_heads=2, head_dim=16, max_position_embeddings=64)
  target = Model(config, init_params(config, jax.random.key(3), std=0.1))
  leaves, treedef = jax.tree.flatten(target.params)
  draft = target.replace(params=jax.tree.unflatten(treedef, [
      x + 0.5 * jnp.std(x) * jax.random.normal(jax.random.key(i), x.shape)
      for i, x in enumerate(leaves)]))
  return target, draft


def exact_joint23(target, prompt) -> np.ndarray:
  """The exact AR-sampling law of the 2nd and 3rd generated tokens, f64[V, V]."""
  def probs(seq):
    logits = jaxdec.forward(target, np.array([seq]))[:, -1:]
    return np.asarray(target_probs(logits, jaxdec.Sampling.create(1.0, batch=1)), np.float64)[0, 0]

  first = probs(prompt)
  joint23 = np.zeros((V, V))
  for a in range(V):
    second = probs(prompt + [a])
    for b in range(V):
      joint23[b] += first[a] * second[b] * probs(prompt + [a, b])
  return joint23


def main() -> None:
  target, draft = models()
  prompt = [3, 5] + jaxdec.generate(target, [[3, 5]], 6, stop_tokens=()).tokens[0].tolist() + [3, 5]
  sampling = jaxdec.Sampling.create(temperature=1.0)
  joint23 = exact_joint23(target, prompt)
  verifiers = {
      "Exact (control)": spec.Exact(),
      "Truncation top_k=3": spec.Truncation(top_k=jnp.asarray(3), top_p=jnp.asarray(1.0)),
      "Truncation top_p=0.9": spec.Truncation(top_k=jnp.asarray(0), top_p=jnp.asarray(0.9)),
      "Collaborative w=0.5, cap 1.5": spec.Collaborative(weight=jnp.asarray(0.5), max_overshoot=jnp.asarray(1.5)),
      "Collaborative w=0.5, cap 100 (no cap)": spec.Collaborative(weight=jnp.asarray(0.5), max_overshoot=jnp.asarray(100.0)),
      "Collaborative w=0.9, cap 100 (no cap)": spec.Collaborative(weight=jnp.asarray(0.9), max_overshoot=jnp.asarray(100.0)),
  }
  print(f"{'verifier':40s} {'TV':>7s} {'KL(p||q)':>9s} {'tau':>6s}")
  for name, verifier in verifiers.items():
    out = jaxdec.speculative_generate(target, [prompt] * N, spec.DraftModel(draft, 3), verifier,
                                      max_new_tokens=8, sampling=sampling, key=jax.random.key(0),
                                      stop_tokens=())
    pairs = np.asarray(out.tokens[:, 1]) * V + np.asarray(out.tokens[:, 2])
    empirical = np.bincount(pairs, minlength=V * V).reshape(V, V) / N
    tv = 0.5 * np.abs(empirical - joint23).sum()
    nz = joint23 > 0
    kl = np.sum(joint23[nz] * np.log(joint23[nz] / np.maximum(empirical[nz], 1e-6)))
    tau = float(np.sum(out.lengths) / np.sum(out.stats["target_forwards"]))
    print(f"{name:40s} {tv:7.3f} {kl:9.3f} {tau:6.2f}")
    sys.stdout.flush()


if __name__ == "__main__":
  main()
