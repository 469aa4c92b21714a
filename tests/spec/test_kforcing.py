"""K-Forcing: the push-forward student's forward, standalone decoding, the verified drafter,
progressive self-forcing training, saving and loading."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from scipy import stats

import jaxdec
from jaxdec import spec
from jaxdec.spec.kforcing import NoiseParams, PushForward, inverse_cdf
from jaxdec.train.kforcing import PushForwardStudent, SelfForcing
from jaxdec.train.trainer import TrainConfig, Trainer
from tiny import jit_forward, tiny_model

PROMPTS = [[5, 6, 7, 8, 9, 10, 11, 12], [3, 4], [9], [20, 21, 22, 23, 24]]


@pytest.fixture(scope="module")
def target():
  return tiny_model(seed=5, std=0.3, tokens=dict(eos=(), pad=None))


def _student(model, k=4, seed=0):
  """A push-forward student whose decoder is `model` and whose noise embedding is untrained."""
  d = model.config.hidden_size
  noise = NoiseParams(w=0.3 * jax.random.normal(jax.random.key(seed), (16, d)),
                      base=jnp.zeros((d,)))
  return PushForward(model, noise, num_tokens=k)


def test_inverse_cdf_zero_is_the_argmax_and_uniforms_sample_the_law():
  logits = jnp.log(jnp.array([0.1, 0.45, 0.05, 0.4]))
  assert int(inverse_cdf(logits, jnp.zeros(()))) == 1
  u = jax.random.uniform(jax.random.key(0), (20000,))
  drawn = np.asarray(inverse_cdf(jnp.broadcast_to(logits, (20000, 4)), u))
  counts = np.bincount(drawn, minlength=4)
  assert stats.chisquare(counts, 20000 * np.array([0.1, 0.45, 0.05, 0.4])).pvalue > 1e-3


def test_first_slot_is_the_decoders_own_next_token_law(target):
  """Whatever the noise, q_1 is the decoder's next-token distribution after the committed
  tokens: the re-fed window gives them exact K/V, also for prompts shorter than the window."""
  student = _student(target)
  prompt, lengths = jaxdec.decoding.prepare_prompts(PROMPTS, None, 128)
  prompt, lengths = jnp.asarray(prompt), jnp.asarray(lengths)
  cache = student.init_cache(prompt, lengths, 32)
  seq = jnp.concatenate([prompt, jnp.zeros((len(PROMPTS), 32), jnp.int32)], 1)
  u = jax.random.uniform(jax.random.key(1), (len(PROMPTS), 4))
  logits, _ = student.step(seq, lengths, cache, u)
  for row, p in enumerate(PROMPTS):
    ref = jit_forward(target.params, jnp.asarray([p]), jnp.arange(len(p))[None],
                      config=target.config)[0][0, -1]
    np.testing.assert_allclose(logits[row, 0], ref, atol=1e-4)


def test_one_token_push_forward_is_greedy_ar(target):
  out = jaxdec.push_forward_generate(_student(target, k=1), PROMPTS, max_new_tokens=13)
  ar = jaxdec.generate(target, PROMPTS, max_new_tokens=13)
  np.testing.assert_array_equal(out.tokens, ar.tokens)
  np.testing.assert_array_equal(out.stats["nfe"], [14] * 4)  # The prefill emits no token.


def test_standalone_budgets_stops_and_tokens_per_forward(target):
  student = _student(target)
  free = jaxdec.push_forward_generate(student, PROMPTS, max_new_tokens=14)
  np.testing.assert_array_equal(free.lengths, [14] * 4)
  np.testing.assert_array_equal(free.stats["nfe"], [5] * 4)  # Prefill + ceil(14 / 4).
  # Each row alone gives the same tokens (ragged batch).
  alone = jaxdec.push_forward_generate(student, PROMPTS[1:2], max_new_tokens=14)
  np.testing.assert_array_equal(alone.tokens[0], free.tokens[1])
  # A stop token ends its row where it first appears; earlier tokens are unchanged.
  row = np.asarray(free.tokens[0])
  stop = int(row[5])
  first = int(np.argmax(row == stop))
  out = jaxdec.push_forward_generate(student, PROMPTS, max_new_tokens=14, stop_tokens=[stop])
  assert int(out.lengths[0]) == first + 1
  np.testing.assert_array_equal(out.tokens[0, :first + 1], row[:first + 1])
  assert np.all(np.asarray(out.tokens[0, first + 1:]) == 0)
  # Sampling with a key is reproducible and differs from greedy.
  a = jaxdec.push_forward_generate(student, PROMPTS, 14, key=jax.random.key(3))
  b = jaxdec.push_forward_generate(student, PROMPTS, 14, key=jax.random.key(3))
  np.testing.assert_array_equal(a.tokens, b.tokens)
  assert not np.array_equal(a.tokens, free.tokens)


def test_kforcing_drafter_greedy_equals_ar(target):
  other = tiny_model(seed=6, std=0.3, tokens=dict(eos=(), pad=None))
  ar = jaxdec.generate(target, PROMPTS, max_new_tokens=20)
  for student in (_student(target), _student(other, k=3)):
    out = jaxdec.speculative_generate(target, PROMPTS, spec.KForcing(student), max_new_tokens=20)
    np.testing.assert_array_equal(out.tokens, ar.tokens)
  # Its own decoder as the student: the first draft is always right.
  same = jaxdec.speculative_generate(target, PROMPTS, spec.KForcing(_student(target)),
                                     max_new_tokens=20)
  accepted = np.asarray(same.stats["accepted"])
  assert np.all((accepted == -1) | (accepted >= 1)) and np.any(accepted >= 1)


def _rows(target, count=32, length=36):
  prompts = np.random.RandomState(0).randint(2, 128, size=(count, 4))
  sampling = jaxdec.Sampling.create(temperature=0.7)
  out = jaxdec.generate(target, prompts, max_new_tokens=length - 4, sampling=sampling,
                        key=jax.random.key(0))
  return np.concatenate([prompts, np.asarray(out.tokens)], axis=1).astype(np.int32)


def test_self_forcing_training_learns_the_later_slots(target, tmp_path):
  """Progressive windows: 2 then 3, and the later slots' KL to the teacher's law given the
  student's own samples falls. (A random teacher's next token depends on the previous one in a
  way 40 steps cannot teach, so the argmax agreement stays low here; the zoo student shows it.)"""
  rows = _rows(target)
  cfg = TrainConfig(name="kforcing", part=PushForwardStudent(num_tokens=3, features=16),
                    objective=SelfForcing(anchors=8, stage_steps=20), steps=40, batch_size=8,
                    seq_len=rows.shape[1], learning_rate=1e-2, warmup_steps=2, eval_every=40,
                    eval_windows=4, checkpoint_every=40)
  with jax.numpy_dtype_promotion("standard"):  # optax's bias correction mixes int and float.
    trainer = Trainer(cfg, str(tmp_path / "run"), target=target)
    records = trainer.run(rows, rows[:4], progress=False)
    trainer.close()
  assert [r["window"] for r in records[:20]] == [2.0] * 20
  assert [r["window"] for r in records[20:]] == [3.0] * 20
  first, last = records[:5], records[-5:]
  mean = lambda rs, name: np.mean([r[name] for r in rs])
  for name in ("kl_2", "kl_3"):
    assert mean(last, name) < 0.7 * mean(first, name)
  # Saved and loaded: the same student, as a push-forward model and as a drafter.
  part, params = cfg.part, trainer.module.params()
  evals = part.export(params, target, rows[:4], str(tmp_path / "out"), dtype="float32")
  assert set(evals) == {"teacher_nll", "student_nll"}
  loaded = jaxdec.load_push_forward(str(tmp_path / "out"))
  assert loaded.num_tokens == 3 and loaded.temperature == 1.0
  np.testing.assert_allclose(loaded.noise.w, params["noise"].w)
  drafter = jaxdec.load_drafter(str(tmp_path / "out"))
  assert isinstance(drafter, spec.KForcing)
  out = jaxdec.speculative_generate(target, PROMPTS, drafter, max_new_tokens=16)
  np.testing.assert_array_equal(out.tokens, jaxdec.generate(target, PROMPTS, 16).tokens)
  with pytest.raises(ValueError, match="K-Forcing student, which drafts a chain"):
    jaxdec.load_drafter(str(tmp_path / "out"), tree_size=4)


def test_bad_inputs(target, tmp_path):
  with pytest.raises(ValueError, match="num_tokens must be an int >= 1, got 0"):
    _student(target, k=0)
  d = target.config.hidden_size
  with pytest.raises(ValueError, match=r"noise must be w \[F, 64\], base \[64\]"):
    PushForward(target, NoiseParams(w=jnp.zeros((4, d + 1)), base=jnp.zeros((d,))))
  with pytest.raises(TypeError, match="PushForward.noise must be a NoiseParams, got dict"):
    PushForward(target, {"w": jnp.zeros((4, d)), "base": jnp.zeros((d,))})
  with pytest.raises(TypeError, match="PushForward.model must be a jaxdec Model, got str"):
    PushForward("zoo:gsm-ar", {})
  with pytest.raises(ValueError, match="student vocabulary 64 != target vocabulary 128"):
    jaxdec.speculative_generate(target, PROMPTS, spec.KForcing(_student(tiny_model(vocab_size=64))))
  with pytest.raises(TypeError, match="student must be a jaxdec.spec.kforcing.PushForward"):
    jaxdec.push_forward_generate(target, PROMPTS)
  with pytest.raises(ValueError, match="distils a frozen AR teacher: set TrainConfig.target"):
    PushForwardStudent().init(jax.random.key(0), None)
  with pytest.raises(ValueError, match="PushForwardStudent.temperature must be > 0, got 0"):
    PushForwardStudent(temperature=0).check(target)
  with pytest.raises(FileNotFoundError, match="holds no K-Forcing student"):
    jaxdec.load_push_forward(str(tmp_path))
