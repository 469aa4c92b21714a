"""jaxdec on several processes: 2 processes on this machine (4 CPU devices each, JAX's gloo
collectives, a localhost coordinator) decode and train on one (data 4, model 2) mesh over all
8 devices, and get what one process gets without a mesh: tokens exactly, losses to 1e-5.

The quick test (generate only) runs in CI; the full one (every decoding method, training with
an orbax checkpoint and a resume) compiles a dozen programs in each process and is marked slow.
"""

import os
import socket
import subprocess
import sys
import tempfile

import numpy as np
import pytest

import multihost_worker

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "multihost_worker.py")
TIMEOUT_S = 300  # A hang (a lost peer, a collective one process never joins) fails, not blocks.


def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("localhost", 0))
    return s.getsockname()[1]


def _run_processes(command, num_processes: int = 2, **env) -> list[str]:
  """Run `command(process_id, port)` (an argv) in `num_processes` processes of 4 CPU devices
  each; their outputs (stdout), after checking that every one exited with 0. Output goes to
  files, not pipes: a process blocked on a full pipe would stall the others' collectives."""
  env = dict(os.environ, JAX_PLATFORMS="cpu",
             XLA_FLAGS="--xla_force_host_platform_device_count=4 --xla_cpu_multi_thread_eigen=false",
             **env)
  port = str(_free_port())
  files = [(tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")) for _ in range(num_processes)]
  procs = [subprocess.Popen(command(i, port), env=env, stdout=out, stderr=err, text=True)
           for i, (out, err) in enumerate(files)]
  read = lambda f: (f.seek(0), f.read())[1]
  try:
    for p in procs:
      p.wait(timeout=TIMEOUT_S)
  except subprocess.TimeoutExpired:
    for p in procs:
      p.kill()  # SIGKILL: JAX's preemption notifier catches SIGTERM.
      p.wait()
    tails = "\n".join(f"process {i}:\n{read(err)[-2000:]}" for i, (_, err) in enumerate(files))
    pytest.fail(f"the {num_processes} processes did not finish within {TIMEOUT_S} s\n{tails}")
  for i, (p, (_, err)) in enumerate(zip(procs, files)):
    assert p.returncode == 0, f"process {i} exited with {p.returncode}:\n{read(err)[-4000:]}"
  return [read(out) for out, _ in files]


def _launch(out_dir, which: str) -> list[dict]:
  """The worker's results from each of 2 processes ('quick' or 'full' cases)."""
  _run_processes(lambda i, port: [sys.executable, WORKER, str(i), "2", port, str(out_dir), which])
  return [dict(np.load(os.path.join(out_dir, f"process-{i}.npz"))) for i in range(2)]


def _assert_equal_results(runs, reference):
  for run in runs:
    assert set(reference) <= set(run)
    for name, want in reference.items():
      got = run[name]
      assert got.shape == want.shape, name
      if np.issubdtype(want.dtype, np.floating):
        np.testing.assert_allclose(got, want, rtol=1e-6, err_msg=name)
      else:
        np.testing.assert_array_equal(got, want, err_msg=name)


def _assert_mesh_spans_both_processes(runs):
  for run in runs:
    np.testing.assert_array_equal(run["devices"], [8, 4])  # Global, local.
    np.testing.assert_array_equal(run["mesh/process"], [[0, 0], [0, 0], [1, 1], [1, 1]])


def test_generate_on_two_processes_equals_one_device(tmp_path):
  """Sampled rows and a greedy one, 3 rows padded to the data axis of 4 and split over both
  processes (each holding whole rows of the mesh); every process gets the full result. Processes
  that pass different prompts are refused with a ValueError."""
  runs = _launch(tmp_path, "quick")
  _assert_mesh_spans_both_processes(runs)
  assert all(bool(run["different_batches_refused"]) for run in runs)
  _assert_equal_results(runs, multihost_worker.decode_cases(mesh=None, names=("generate",)))


@pytest.fixture(scope="module")
def full_runs(tmp_path_factory):
  return _launch(tmp_path_factory.mktemp("multihost"), "full")


@pytest.mark.slow
def test_every_decoding_method_on_two_processes_equals_one_device(full_runs):
  """generate and speculative_generate with a DraftModel (sampled rows and a greedy one),
  speculative_generate with PromptLookup (greedy), diffusion_generate (Threshold, temperature
  0.7): tokens, lengths and every stat."""
  _assert_mesh_spans_both_processes(full_runs)
  _assert_equal_results(full_runs, multihost_worker.decode_cases(mesh=None))


@pytest.mark.slow
def test_training_on_two_processes_equals_one_process(full_runs, tmp_path):
  """Data parallel over 4 devices, params sharded over 2, a checkpoint written and restored by
  both processes with orbax: the losses and final params of one process without a mesh, and
  one metrics row per step."""
  reference = multihost_worker.train_case(str(tmp_path), mesh=None)
  np.testing.assert_array_equal(reference["train/logged_steps"], [1, 2, 3, 4])
  for run in full_runs:
    np.testing.assert_allclose(run["train/losses"], reference["train/losses"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(run["train/params_norm"], reference["train/params_norm"], rtol=1e-5)
    assert int(run["train/resumed_from"]) == 2
    np.testing.assert_array_equal(run["train/logged_steps"], [1, 2, 3, 4])


def _is_gloo_log(line: str) -> bool:
  """Gloo, the processes' CPU collectives, logs its connections to stdout: "[Gloo] Rank 0 is
  connected to 1 peer ranks...", at times split after the prefix onto a line of its own."""
  return line.startswith("[Gloo]") or "peer ranks" in line


@pytest.mark.slow
def test_jaxdec_generate_distributed_prints_what_one_process_prints(tmp_path, capsys):
  """`jaxdec generate --distributed` on 2 processes, the model an orbax dir: sharded over both
  (data 2 x model 4, the one prompt padded to 2 rows); each process prints the one-process
  completion."""
  import jaxdec
  from jaxdec import cli
  from tiny import tiny_model

  path = jaxdec.save(tiny_model(0), str(tmp_path / "model"))
  flags = ["generate", "--model", path, "--prompt-ids", "5 9 11", "--max-new-tokens", "12"]
  assert cli.main(flags) == 0
  expected = capsys.readouterr().out
  outs = _run_processes(lambda i, port: [
      sys.executable, "-m", "jaxdec.cli", *flags, "--distributed", "--coordinator",
      f"localhost:{port}", "--num-processes", "2", "--process-id", str(i)],
      JAXDEC_CACHE_DIR=str(tmp_path / "xla"))
  printed = ["".join(line for line in out.splitlines(keepends=True)
                     if not _is_gloo_log(line)) for out in outs]
  assert len(expected.split()) == 12 and printed == [expected, expected]


def test_distributed_flags_and_arguments_are_checked_before_joining(capsys):
  from jaxdec import cli, sharding

  assert cli.main(["generate", "--model", "m", "--coordinator", "localhost:1234"]) == 2
  assert "only act with --distributed" in capsys.readouterr().err
  assert cli.main(["train", "--config", "c", "--distributed", "--num-processes", "2"]) == 2
  assert "pass all of --coordinator, --num-processes and --process-id" in capsys.readouterr().err
  with pytest.raises(ValueError, match="coordinator must be 'host:port'"):
    sharding.initialize("localhost", 2, 0)
  with pytest.raises(ValueError, match="process_id=2 must be below num_processes=2"):
    sharding.initialize("localhost:1234", 2, 2)
  with pytest.raises(ValueError, match="num_processes must be an int >= 1, got 0"):
    sharding.initialize("localhost:1234", 0, 0)
