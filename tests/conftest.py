"""Strict JAX for every test, 8 simulated CPU devices for the sharding tests, cheap compiles and
one compilation cache for the run."""

import atexit
import os
import shutil
import sys
import tempfile

# Single-threaded Eigen makes XLA:CPU's matmuls bit-reproducible inside a long test process: with
# its thread pool, a few float32 sums came out rounded differently after other tests had run,
# which flipped near-tied commits in the zoo regression cases (the dual-cache ones) and in the
# knife-edge reference comparisons, one case or another per run.
DEVICE_FLAGS = ("--xla_force_host_platform_device_count=8", "--xla_cpu_multi_thread_eigen=false")
# Compiling dominates the suite (a test's own computation takes milliseconds on tiny models), so
# the run compiles cheaply and each program once. XLA:CPU's expensive backend passes are off
# (compiles about a quarter faster; tests check tokens and equalities, never speed), and one
# persistent compilation cache serves the run's processes (both workers, the notebook kernels, the
# regression subprocess): a program compiled in one module or process is read back, not compiled
# again, after `_release_compiled_programs` or in another process. The controller makes the
# directory before it starts the workers, which inherit it, and removes it when it exits.
FAST_COMPILE_FLAGS = ("--xla_backend_optimization_level=0",
                      "--xla_llvm_disable_expensive_passes=true")
for _flag in DEVICE_FLAGS + FAST_COMPILE_FLAGS:
  if _flag.split("=")[0] not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _flag).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "JAX_COMPILATION_CACHE_DIR" not in os.environ:
  os.environ["JAX_COMPILATION_CACHE_DIR"] = tempfile.mkdtemp(prefix="jaxdec-tests-xla-")
  atexit.register(shutil.rmtree, os.environ["JAX_COMPILATION_CACHE_DIR"], ignore_errors=True)
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS", "0")
os.environ.setdefault("JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES", "0")

import jax  # noqa: E402
import pytest  # noqa: E402

jax.config.update("jax_numpy_rank_promotion", "raise")
jax.config.update("jax_numpy_dtype_promotion", "strict")

sys.path.insert(0, os.path.dirname(__file__))  # tests/hf_models.py, tests/tiny.py
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "regression"))

from tiny import tiny_model  # noqa: E402


# Tests that a worker may take one by one; the rest go to workers a test file at a time (`--dist
# loadfile`), so that a file builds its module-level models and compiled programs once. The
# notebooks are the longest tests: as one file they would hold a worker for much of the run.
ONE_BY_ONE = ("tests/test_notebooks.py::test_notebook_runs[",)


# The longest units, run first, longest first: the two workers then finish together instead of
# one waiting out a long unit picked up last. A stable sort moves whole files (and the notebook
# runs); the rest keep their collection order.
FIRST = ("tests/regression/", "tests/test_notebooks.py::test_notebook_runs[diffusion_schedulers",
         "tests/test_notebooks.py::test_notebook_runs[pallas_kernels",
         "tests/test_notebooks.py::test_notebook_runs[eagle3",
         "tests/test_notebooks.py::test_notebook_runs[mtp_heads",
         "tests/test_notebooks.py::test_notebook_runs[kforcing", "tests/zoo/",
         "tests/test_notebooks.py::test_notebook_runs[")


def pytest_collection_modifyitems(config, items):
  def rank(item):
    return next((i for i, prefix in enumerate(FIRST) if item.nodeid.startswith(prefix)), len(FIRST))

  items.sort(key=rank)


def pytest_xdist_make_scheduler(config, log):
  """`--dist loadfile`, except that each test of `ONE_BY_ONE` is a unit of its own, handed out in
  collection order (`FIRST` first) instead of xdist's default, most tests first, which queued the
  notebook runs (one test each, the longest units) last."""
  from xdist.scheduler import LoadScopeScheduling

  config.option.loadscopereorder = False

  class FilesAndNotebooks(LoadScopeScheduling):
    def _split_scope(self, nodeid: str) -> str:
      return nodeid if nodeid.startswith(ONE_BY_ONE) else nodeid.split("::", 1)[0]

  return FilesAndNotebooks(config, log)


@pytest.fixture(scope="session")
def model():
  """A tiny random Llama-style model with peaked logits (no near-ties for greedy tests)."""
  return tiny_model()


@pytest.fixture(autouse=True)
def _keep_the_runs_compile_cache(monkeypatch):
  """`jaxdec.cli.main` points JAX's persistent compilation cache at the user's directory for the
  whole process; in the test process that would move every later test's cache there. CLI tests
  keep the run's cache."""
  import jaxdec.cli

  monkeypatch.setattr(jaxdec.cli, "_enable_compile_cache", lambda: None)


@pytest.fixture(autouse=True, scope="module")
def _release_compiled_programs():
  """Drop every compiled program after each test module. A full run compiles several hundred
  programs; kept alive together, they grew the process until XLA crashed compiling the last ones
  (a segfault in the zoo tests, only in full runs)."""
  yield
  jax.clear_caches()
