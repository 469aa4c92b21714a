"""Plain-numpy references of the training-free decoders that publish no code (CAI-DLLM,
CORA-Diff), one row at a time with Python loops, written from our reading of their papers'
abstracts as the jaxdec docstrings state it. Nothing here comes from jaxdec.diffusion; the
conventions (float64 confidences, ties to the lower position) are dllm_reference's."""

from __future__ import annotations

import numpy as np

from dllm_reference import _canvas, num_transfer_tokens, softmax64, topk


def _propose(logits_fn, x, lo, hi, mask_id):
  """(raw argmax, confidence with -inf off the block's masks, the block's masks)."""
  mask_index = x == mask_id
  mask_index[hi:] = False
  mask_index[:lo] = False
  logits = logits_fn(x)
  x0 = np.argmax(logits, axis=-1)
  p = softmax64(logits)[np.arange(len(x)), x0]
  return x0, np.where(mask_index, p, -np.inf), mask_index


def cai_generate(logits_fn, prompt, gen_length, block_length, steps, *, mask_id, easy, budget):
  """CAI-DLLM: the block's first forward commits its top token and every token with confidence
  >= easy; its h hard tokens then get ceil(budget * per_block / masks * h) forwards of LLaDA
  quotas. Returns (tokens, nfe)."""
  x = _canvas(prompt, gen_length, mask_id)
  p_len, per_block, nfe = len(prompt), steps // (gen_length // block_length), 0
  for b in range(gen_length // block_length):
    lo, hi = p_len + b * block_length, p_len + (b + 1) * block_length
    x0, conf, mask_index = _propose(logits_fn, x, lo, hi, mask_id)
    nfe += 1
    masks = int(mask_index.sum())
    order = topk(conf, masks)
    chosen = [order[0]] + [j for j in order[1:] if conf[j] >= easy]
    x[chosen] = x0[chosen]
    hard = masks - len(chosen)
    if hard == 0:
      continue
    rate = np.float32(per_block) / np.float32(masks)
    forwards = int(np.ceil(np.float32(budget) * rate * np.float32(hard)))
    for quota in num_transfer_tokens(hard, min(max(forwards, 1), hard)):
      x0, conf, _ = _propose(logits_fn, x, lo, hi, mask_id)
      nfe += 1
      chosen = topk(conf, int(quota))
      x[chosen] = x0[chosen]
  return x[p_len:], nfe


def cora_generate(logits_fn, prompt, gen_length, block_length, steps, *, mask_id, tau,
                  persistence):
  """CORA-Diff: LLaDA's quotas, plus every masked position with confidence >= tau whose argmax
  has been the same for the last `persistence` forwards of the block; the block ends when it
  has no mask left or after LLaDA's per-block steps. Returns (tokens, nfe)."""
  x = _canvas(prompt, gen_length, mask_id)
  p_len, per_block, nfe = len(prompt), steps // (gen_length // block_length), 0
  for b in range(gen_length // block_length):
    lo, hi = p_len + b * block_length, p_len + (b + 1) * block_length
    quotas = num_transfer_tokens(int((x[lo:hi] == mask_id).sum()), per_block)
    previous, run = None, np.zeros(len(x), np.int64)
    for i in range(per_block):
      x0, conf, mask_index = _propose(logits_fn, x, lo, hi, mask_id)
      nfe += 1
      run = np.where(x0 == previous, run + 1, 1) if previous is not None else np.ones(len(x), np.int64)
      previous = x0
      chosen = np.zeros(len(x), bool)
      chosen[topk(conf, int(quotas[i]))] = True
      chosen |= mask_index & (conf >= tau) & (run >= persistence)
      chosen &= mask_index
      x[chosen] = x0[chosen]
      if not (x[lo:hi] == mask_id).any():
        break
  return x[p_len:], nfe


def said_stages(block_length, num_stages):
  """SAID-block's `said_stage_partition`: K sorted offset lists, generated first to last."""
  rest, stack = set(range(block_length)), []
  for k in range(1, num_stages):
    stage = {p for p in rest if p % 2 ** k == 2 ** (k - 1)}
    stack.append(sorted(stage))
    rest -= stage
  stack.append(sorted(rest))
  return stack[::-1]


def said_stage_steps(num_stages, per_block, rec_steps):
  """SAID-block's `compute_stage_steps`, but a lone generation stage gets at least one forward
  (upstream gives it none when steps per block <= rec_steps, leaving its masks undecoded)."""
  if num_stages == 1:
    return [per_block]
  budget, n = per_block - rec_steps, num_stages - 1
  if n == 1:
    return [max(budget, 1), rec_steps]  # Upstream: budget (a stage of 0 steps is skipped).
  s_min = max(1, budget // (n * 2))
  s_max = max(s_min, (2 * budget) // n - s_min)
  steps = np.maximum(np.round(np.linspace(s_max, s_min, n)).astype(int), 1)
  diff = budget - steps.sum()
  for i in range(abs(diff)):
    steps[i % n] += 1 if diff > 0 else -1
  return np.maximum(steps, 1).tolist() + [rec_steps]


def said_generate(logits_fn, prompt, gen_length, block_length, steps, *, mask_id, num_stages,
                  rec_steps, chlg_steps=0, chlg_level=0.9):
  """SAID-block's `generate_said` (stages and their LLaDA loops as upstream; an empty stage runs
  no forward), plus our reading of CHLG: with chlg_steps > 0 the reconstruction stage commits
  only the quota tokens with confidence >= chlg_level, and what it leaves gets up to chlg_steps
  more LLaDA-quota forwards, stopping once the block is filled. Returns (tokens, nfe)."""
  x = _canvas(prompt, gen_length, mask_id)
  p_len, per_block, nfe = len(prompt), steps // (gen_length // block_length), 0
  for b in range(gen_length // block_length):
    lo, hi = p_len + b * block_length, p_len + (b + 1) * block_length
    stages = said_stages(block_length, num_stages)
    budgets = said_stage_steps(num_stages, per_block, rec_steps)
    plan = list(zip(stages, budgets, [False] * (num_stages - 1) + [chlg_steps > 0]))
    if chlg_steps:
      plan.append((stages[-1], chlg_steps, False))
    for index, (offsets, stage_budget, gated) in enumerate(plan):
      if not offsets:
        continue
      in_stage = np.zeros(len(x), bool)
      in_stage[[lo + o for o in offsets]] = True
      quotas = num_transfer_tokens(int(((x == mask_id) & in_stage).sum()), stage_budget)
      for quota in quotas:
        if index == num_stages and not (x[lo:hi] == mask_id).any():
          break  # CHLG's extra forwards only while low-confidence tokens remain.
        x0, conf, mask_index = _propose(logits_fn, x, lo, hi, mask_id)
        nfe += 1
        conf = np.where(in_stage, conf, -np.inf)
        chosen = np.zeros(len(x), bool)
        chosen[topk(conf, int(quota))] = True
        chosen &= mask_index & in_stage
        if gated:
          chosen &= conf >= chlg_level
        x[chosen] = x0[chosen]
  return x[p_len:], nfe


def entropy64(logits):
  p = softmax64(logits)
  return -(p * np.log(np.where(p > 0, p, 1.0))).sum(-1)


def rps_generate(logits_fn, prompt, gen_length, block_length, *, mask_id, tau, low, high, pivots,
                 assignments, ripple):
  """Ripple-Pivot Search on a threshold base rule, one step at a time: threshold commits; the
  `pivots` lowest-entropy uncommitted masks with entropy in [low, high], each with its top
  `assignments` tokens, are tried by lookahead; the hypothesis leaving the least summed entropy
  wins (first on ties); with `ripple`, threshold commits again on its lookahead. Two forwards a
  step. Returns (tokens, nfe)."""
  x = _canvas(prompt, gen_length, mask_id)
  p_len, nfe = len(prompt), 0
  for b in range(gen_length // block_length):
    lo, hi = p_len + b * block_length, p_len + (b + 1) * block_length
    while (x[lo:hi] == mask_id).any():
      logits = logits_fn(x)
      nfe += 2
      masked = np.zeros(len(x), bool)
      masked[lo:hi] = x[lo:hi] == mask_id
      pick = logits.copy()
      pick[:, mask_id] = -np.inf
      x0 = np.argmax(pick, -1)
      conf = np.where(masked, softmax64(logits)[np.arange(len(x)), x0], -np.inf)
      order = topk(conf, int(masked.sum()))
      base = np.zeros(len(x), bool)
      base[order[0]] = True
      base |= masked & (conf >= tau)
      x[base] = x0[base]
      left = masked & ~base
      h = entropy64(logits)
      band = [j for j in np.argsort(h, kind="stable") if left[j] and low <= h[j] <= high][:pivots]
      trials = [(j, int(t)) for j in band for t in np.argsort(-pick[j], kind="stable")[:assignments]]
      if not trials:
        trials, chosen = [(None, None)], 0
      scores = []
      for j, t in trials:
        y = x.copy()
        rest = left.copy()
        if j is not None:
          y[j], rest[j] = t, False
        scores.append((entropy64(logits_fn(y))[rest].sum(), y, rest))
      _, y, rest = min(scores, key=lambda s: s[0])  # min keeps the first of equal scores
      x = y
      if ripple:
        ahead = logits_fn(x)
        pick = ahead.copy()
        pick[:, mask_id] = -np.inf
        x0 = np.argmax(pick, -1)
        sure = rest & (softmax64(ahead)[np.arange(len(x)), x0] >= tau)
        x[sure] = x0[sure]
  return x[p_len:], nfe


def async_lane_generate(logits_fn, prompt, gen_length, block_length, *, mask_id, tau, stable,
                        lanes, delimiters):
  """AsyncLane on a threshold rule: `lanes` blocks in flight; lane k + 1 opens when lane k is
  open and holds a committed delimiter with all of lane k before it committed, or a committed
  run from its start of >= stable * block_length; open lanes commit at confidence >= tau, lane 0
  always its most confident mask; a block ends when lane 0 is filled (one forward per step).
  Returns (tokens, nfe)."""
  x = _canvas(prompt, gen_length, mask_id)
  p_len, nfe, end = len(prompt), 0, len(prompt) + gen_length
  for b in range(gen_length // block_length):
    lo = p_len + b * block_length
    while True:
      logits = logits_fn(x)
      nfe += 1
      pick = logits.copy()
      pick[:, mask_id] = -np.inf
      x0 = np.argmax(pick, -1)
      conf = softmax64(logits)[np.arange(len(x)), x0]
      opened, chosen = True, np.zeros(len(x), bool)
      for k in range(lanes):
        a, z = lo + k * block_length, min(lo + (k + 1) * block_length, end)
        if a >= end or not opened:
          break
        masked = np.zeros(len(x), bool)
        masked[a:z] = x[a:z] == mask_id
        chosen |= masked & (conf >= tau)
        if k == 0 and masked.any():
          chosen[topk(np.where(masked, conf, -np.inf), 1)[0]] = True
        run = 0
        while a + run < z and x[a + run] != mask_id:
          run += 1
        boundary = any(x[a + j] in delimiters for j in range(run))
        opened = boundary or run >= stable * block_length
      x[chosen] = x0[chosen]
      if not (x[lo: lo + block_length] == mask_id).any():
        break
  return x[p_len:], nfe
