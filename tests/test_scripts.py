"""Scripts under scripts/ run only as programs: importing one defines `main` and does nothing."""

import glob
import importlib.util
import os
import sys

import pytest

import jaxdec

SCRIPTS = sorted(glob.glob(os.path.join(os.path.dirname(__file__), "..", "scripts", "*.py")))


def _refuse(*args, **kwargs):
  raise AssertionError("a script did work at import time")


@pytest.mark.parametrize("path", SCRIPTS, ids=os.path.basename)
def test_importing_a_script_runs_nothing(path, monkeypatch, capsys):
  for name in ("load", "load_tokenizer", "forward", "generate", "speculative_generate",
               "diffusion_generate"):
    monkeypatch.setattr(jaxdec, name, _refuse)
  monkeypatch.setattr(sys, "argv", [path, "zoo:does-not-exist"])
  spec = importlib.util.spec_from_file_location(f"script_{os.path.basename(path)[:-3]}", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  assert callable(module.main)
  assert capsys.readouterr().out == ""


def test_there_are_scripts():
  assert SCRIPTS
