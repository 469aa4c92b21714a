"""The Colab notebooks run: each colab/*.ipynb executes top to bottom in a fresh kernel, headless,
in its small configuration (JAXDEC_NOTEBOOK_SMALL=1), in a temporary working directory, as a
user's runtime would run it; a failing cell fails the test with its source and error. Notebooks
are stored without outputs, so a diff shows only what changed in the code.
"""

from __future__ import annotations

import glob
import os
import re
import sys
import time

import nbclient
import nbformat
import pytest
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NOTEBOOKS = sorted(glob.glob(os.path.join(ROOT, "colab", "*.ipynb")))
CELL_TIMEOUT_S = 480  # A zoo model's first compile takes ~10 s alone, minutes on a busy CPU.
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# A shell line or a command list that starts with the console script (the kernel's PATH has it;
# a Colab runtime's need not).
CONSOLE_SCRIPT = re.compile(r"""^\s*!\s*jaxdec\b|[\[(]\s*["']jaxdec["']\s*,""", re.M)


def _name(path: str) -> str:
  return os.path.relpath(path, ROOT) if path.startswith(ROOT) else os.path.basename(path)


def kernel_env(workdir: str) -> dict:
  """The kernel's environment: the small sizes, CPU, this interpreter's scripts (`jaxdec`) on
  PATH, data under `workdir`, the run's compile flags and cache (conftest; the `jaxdec` CLI's
  cache too), and no simulated device count (conftest's 8 devices are this test process's; a
  notebook sets its own, as on a fresh runtime)."""
  env = dict(os.environ)
  env["JAXDEC_NOTEBOOK_SMALL"] = "1"
  env.setdefault("JAX_PLATFORMS", "cpu")
  env["PATH"] = os.path.dirname(sys.executable) + os.pathsep + env.get("PATH", "")
  env["JAXDEC_CACHE_DIR"] = env["JAX_COMPILATION_CACHE_DIR"]
  env["JAXDEC_DATA_DIR"] = os.path.join(workdir, ".cache", "corpus")
  env["XLA_FLAGS"] = " ".join(f for f in env.get("XLA_FLAGS", "").split()
                              if not f.startswith("--xla_force_host_platform_device_count"))
  return env


def _failed_cell(nb) -> int | None:
  """Index of the code cell whose output is an error, else None."""
  for index, cell in enumerate(nb.cells):
    if cell.cell_type == "code" and any(o.get("output_type") == "error" for o in cell.outputs):
      return index
  return None


def run_notebook(path: str, workdir: str, timeout: int = CELL_TIMEOUT_S):
  """Execute the notebook at `path` with cwd `workdir`; returns it executed (the file is left
  as it is). A failing cell, a cell over `timeout` or a dead kernel fails the calling test with
  the cell's source and the error."""
  nb = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(nb, timeout=timeout, kernel_name="python3",
                                   resources={"metadata": {"path": workdir}})
  try:
    client.execute(env=kernel_env(workdir))
  except CellExecutionError as e:
    index = _failed_cell(nb)
    where = f"cell {index}" if index is not None else "a cell"
    pytest.fail(f"{_name(path)}: {where} failed ({e.ename}: {e.evalue})\n{ANSI.sub('', str(e))}",
                pytrace=False)
  except (CellTimeoutError, DeadKernelError) as e:
    pytest.fail(f"{_name(path)}: {type(e).__name__}: {ANSI.sub('', str(e))}", pytrace=False)
  return nb


def test_the_notebooks_are_collected():
  """The parametrization below is the glob: every notebook in colab/ runs; the README names
  each one, so users can find them."""
  names = {os.path.basename(p) for p in NOTEBOOKS}
  assert {"quickstart.ipynb", "bring_your_own_hf.ipynb", "train_and_eval.ipynb"} <= names
  with open(os.path.join(ROOT, "README.md")) as f:
    readme = f.read()
  assert not [n for n in names if f"colab/{n}" not in readme], "a notebook the README does not list"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_stored_without_outputs(path):
  nb = nbformat.read(path, as_version=4)
  nbformat.validate(nb)
  assert nb.metadata.kernelspec.name == "python3"
  for index, cell in enumerate(nb.cells):
    if cell.cell_type == "code":
      assert cell.outputs == [] and cell.execution_count is None, (
          f"{_name(path)}: cell {index} is stored with outputs; clear them before committing")
  code = [c.source for c in nb.cells if c.cell_type == "code"]
  assert "REPO_URL" in code[0] and "jax.default_backend()" in code[0], "the setup cell comes first"
  assert sum("JAXDEC_NOTEBOOK_SMALL" in c for c in code) == 1, "one parameters cell sets the sizes"
  by_name = [c for c in code if CONSOLE_SCRIPT.search(c)]
  assert not by_name, (f"{_name(path)} runs the `jaxdec` console script by name, which is not on "
                       f"PATH on every runtime: run `sys.executable, '-m', 'jaxdec'`\n{by_name[0]}")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[os.path.basename(p) for p in NOTEBOOKS])
def test_notebook_runs(path, tmp_path):
  start = time.perf_counter()
  run_notebook(path, str(tmp_path))
  seconds = time.perf_counter() - start
  print(f"{_name(path)}: {seconds:.1f} s")


def test_a_failing_cell_fails_with_its_source_and_error(tmp_path):
  nb = nbformat.v4.new_notebook()
  nb.metadata.kernelspec = {"name": "python3", "display_name": "Python 3", "language": "python"}
  nb.cells = [nbformat.v4.new_code_cell("x = 1"),
              nbformat.v4.new_code_cell("y = x / 0  # the broken cell")]
  path = tmp_path / "broken.ipynb"
  nbformat.write(nb, str(path))
  with pytest.raises(pytest.fail.Exception) as failure:
    run_notebook(str(path), str(tmp_path), timeout=60)
  message = str(failure.value)
  assert "broken.ipynb: cell 1 failed (ZeroDivisionError: division by zero)" in message
  assert "y = x / 0  # the broken cell" in message
