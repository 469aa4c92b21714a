"""Plain-numpy references of the diffusion samplers, one row at a time with Python loops, written
from the published reference implementations (LLaDA `generate`, Dream `_sample`, Fast-dLLM
threshold / factor, Fast-dLLM++ Frechet). Nothing here comes from jaxdec.diffusion; the tests share only the
logits function and, for sampled runs, the noise draws.

Deliberate, documented choices: ties go to the lower position (torch.topk's order is
unspecified); confidences are float64 softmaxes of float32 logits; Gumbel sampling is written as
argmax(logits / T + g), the same distribution as LLaDA's exp(logits) / (-log u)^T.
"""

from __future__ import annotations

import numpy as np


def softmax64(logits: np.ndarray) -> np.ndarray:
  x = logits.astype(np.float64)
  x = x - x.max(axis=-1, keepdims=True)
  e = np.exp(x)
  return e / e.sum(axis=-1, keepdims=True)


def topk(conf: np.ndarray, k: int) -> np.ndarray:
  """Indices of the k largest entries, lower index first on ties."""
  return np.argsort(-conf, kind="stable")[:k]


def num_transfer_tokens(masks: int, steps: int) -> np.ndarray:
  """LLaDA `get_num_transfer_tokens` for one row."""
  out = np.full(steps, masks // steps, np.int64)
  out[: masks % steps] += 1
  return out


def _canvas(prompt, gen_length, mask_id):
  return np.concatenate([np.asarray(prompt, np.int64), np.full(gen_length, mask_id, np.int64)])


def llada_generate(logits_fn, prompt, gen_length, block_length, steps, *, mask_id,
                   remasking="low_confidence", temperature=0.0, cfg_scale=0.0,
                   logits_eos_inf=False, confidence_eos_eot_inf=False, eos_id=None, eot_id=None,
                   noise=None):
  """LLaDA `generate` (HEAD). `noise(positions, nfe)` -> (gumbel f32[N, V], uniform f32[N]) for the
  positions of the current block; needed when temperature > 0 or remasking is random."""
  x = _canvas(prompt, gen_length, mask_id)
  p_len = len(prompt)
  prompt_index = x != mask_id
  assert gen_length % block_length == 0
  num_blocks = gen_length // block_length
  assert steps % num_blocks == 0
  per_block = steps // num_blocks
  nfe = 0
  for b in range(num_blocks):
    lo, hi = p_len + b * block_length, p_len + (b + 1) * block_length
    quota = num_transfer_tokens(int((x[lo:hi] == mask_id).sum()), per_block)
    for i in range(per_block):
      mask_index = x == mask_id
      if cfg_scale > 0:
        un_x = x.copy()
        un_x[prompt_index] = mask_id
        cond, uncond = logits_fn(x), logits_fn(un_x)
        logits = uncond + (np.float32(cfg_scale) + np.float32(1.0)) * (cond - uncond)
      else:
        logits = logits_fn(x).copy()
      if logits_eos_inf:
        logits[:, eos_id] = -np.inf
      window = np.arange(lo, hi)
      drawn = noise(window, nfe) if noise is not None else None
      if temperature > 0:
        noisy = logits / np.float32(temperature)
        noisy[window] = noisy[window] + drawn[0]
      else:
        noisy = logits
      x0 = np.argmax(noisy, axis=-1)
      conf_logits = logits.copy()
      if confidence_eos_eot_inf:
        conf_logits[:, eot_id] = -np.inf
        if temperature == 0:  # logits_with_noise *is* logits: the EOS write lands in it too.
          conf_logits[:, eos_id] = -np.inf
      if remasking == "low_confidence":
        x0_p = softmax64(conf_logits)[np.arange(len(x)), x0]
      else:
        x0_p = np.zeros(len(x))
        x0_p[window] = drawn[1]
      x0_p[hi:] = -np.inf
      x0 = np.where(mask_index, x0, x)
      confidence = np.where(mask_index, x0_p, -np.inf)
      chosen = topk(confidence, int(quota[i]))
      x[chosen] = x0[chosen]
      nfe += 1
  return x[p_len:], nfe


def select_threshold(conf, mask_index, tau):
  """Fast-dLLM `get_transfer_index(threshold=tau)`."""
  n = int(mask_index.sum())
  order = topk(conf, n)
  transfer = np.zeros(len(conf), bool)
  transfer[order] = True
  for k in range(1, n):
    if conf[order[k]] < tau:
      transfer[order[k]] = False
  return transfer


def select_factor(conf, mask_index, factor):
  """Fast-dLLM `get_transfer_index_dynamic(factor=f)`, including its off-by-one."""
  n = int(mask_index.sum())
  threshs = [1 - factor / (m + 1) for m in range(1, n + 1)]
  threshs[0] = -1
  ordered = np.sort(conf[mask_index])[::-1]
  for top_i in range(n):
    if ordered[top_i] < threshs[top_i]:
      break
  if top_i == 0 or top_i == n - 1:
    top_i += 1
  transfer = np.zeros(len(conf), bool)
  transfer[topk(conf, top_i)] = True
  return transfer


def select_frechet(conf, mask_index, delta):
  """Fast-dLLM++ Frechet profile rule: the top count(G_n > delta) (at least one)."""
  c = np.sort(conf[mask_index])[::-1]
  count = 0
  for m in range(1, len(c) + 1):
    score = np.inf if m == 1 else (c[:m].sum() - (m - 1)) - (1 - c[m - 1])
    count += score > delta
  transfer = np.zeros(len(conf), bool)
  transfer[topk(conf, max(count, 1))] = True
  return transfer


SELECTORS = {"threshold": select_threshold, "factor": select_factor, "frechet": select_frechet}


def fast_dllm_generate(logits_fn, prompt, gen_length, block_length, *, mask_id, rule, value):
  """Fast-dLLM `generate` (no cache) with a threshold / factor / Frechet selector: each block
  runs until it has no mask left. Returns (tokens, nfe)."""
  x = _canvas(prompt, gen_length, mask_id)
  p_len = len(prompt)
  nfe = 0
  for b in range(gen_length // block_length):
    lo, hi = p_len + b * block_length, p_len + (b + 1) * block_length
    while True:
      nfe += 1
      mask_index = x == mask_id
      mask_index[hi:] = False
      logits = logits_fn(x)
      x0 = np.argmax(logits, axis=-1)
      x0_p = softmax64(logits)[np.arange(len(x)), x0]
      x0 = np.where(mask_index, x0, x)
      confidence = np.where(mask_index, x0_p, -np.inf)
      transfer = SELECTORS[rule](confidence, mask_index, value)
      x[transfer] = x0[transfer]
      if not (x[lo:hi] == mask_id).any():
        break
  return x[p_len:], nfe


def linspace32(start: float, end: float, num: int) -> np.ndarray:
  """torch.linspace(start, end, num) in float32 on the CPU: a fused multiply-add per element,
  start + step * i in the first half and end - step * (num - 1 - i) in the second."""
  f = np.float32
  step = f((f(end) - f(start)) / f(num - 1))
  out = np.empty(num, np.float32)
  for i in range(num):
    if i < num // 2:
      out[i] = f(np.float64(f(start)) + np.float64(step) * np.float64(i))
    else:
      out[i] = f(np.float64(f(end)) - np.float64(step) * np.float64(num - 1 - i))
  return out


def dream_count(masked: int, ts: np.ndarray, i: int, steps: int) -> int:
  f = np.float32
  if i == steps - 1:
    return masked
  return int(f(masked) * (f(1.0) - ts[i + 1] / ts[i]))


def dream_generate(logits_fn, prompt, gen_length, steps, *, mask_id, alg, eps=1e-3,
                   temperature=0.0, noise=None):
  """Dream `_sample` (alg maskgit_plus / topk_margin / entropy, alg_temp 0), one row.
  `noise(positions, nfe)` -> (gumbel f32[N, V], _) for the masked positions when temperature > 0."""
  x = _canvas(prompt, gen_length, mask_id)
  ts = linspace32(1.0, eps, steps + 1)
  for i in range(steps):
    mask_index = x == mask_id
    logits = logits_fn(x)
    logits = np.concatenate([logits[:1], logits[:-1]])  # Shifted: output i - 1 predicts i.
    masked_logits = logits[mask_index]
    if temperature > 0:
      masked_logits = masked_logits / np.float32(temperature)
    probs = softmax64(masked_logits)
    if temperature > 0:
      x0 = np.argmax(masked_logits + noise(np.flatnonzero(mask_index), i)[0], axis=-1)
      confidence = probs[np.arange(len(x0)), x0]
    else:
      confidence, x0 = probs.max(axis=-1), probs.argmax(axis=-1)
    if alg == "topk_margin":
      ordered = np.sort(probs, axis=-1)[:, ::-1]
      confidence = ordered[:, 0] - ordered[:, 1]
    elif alg == "entropy":
      confidence = np.sum(probs * np.log(probs + 1e-10), axis=-1)
    k = dream_count(int(mask_index.sum()), ts, i, steps)
    full = np.full(len(x), -np.inf)
    full[mask_index] = confidence
    if k > 0:
      chosen = topk(full, k)
      proposal = np.full(len(x), mask_id)
      proposal[mask_index] = x0
      x[chosen] = proposal[chosen]
  return x[len(prompt):], steps
