"""Every decoding method and cache gives, on the zoo, exactly the outputs recorded before the
plug-in redesign (see zoo_cases.py for how the fixture was made)."""

import os
import subprocess
import sys

import numpy as np
import pytest

import zoo_cases


@pytest.fixture(scope="module")
def recorded():
  return zoo_cases.load(zoo_cases.FIXTURE)


@pytest.fixture(scope="module")
def current(tmp_path_factory):
  """Today's outputs, computed in a fresh interpreter. Inside the long test process the
  near-tied cache cases (a dual- or prefix-cache commit decided by the last bit of a float32
  confidence) flipped from run to run, one case or another, after other tests had run; in a fresh
  process they reproduce the fixture every time."""
  path = str(tmp_path_factory.mktemp("zoo") / "current.npz")
  subprocess.run([sys.executable, zoo_cases.__file__, "--out", path], check=True,
                 env=dict(os.environ))
  return zoo_cases.load(path)


def test_every_case_is_recorded(recorded):
  assert set(recorded) == set(zoo_cases.cases())


@pytest.mark.parametrize("name", sorted(zoo_cases.cases()))
def test_outputs_are_unchanged(recorded, current, name):
  for field, want in recorded[name].items():
    np.testing.assert_array_equal(current[name][field], want, err_msg=f"{name}: {field}")


def test_the_cases_differ(recorded):
  """Guards the fixture's strength: sampling, caches and rules really change the outputs."""
  tokens = {name: r["tokens"].tobytes() for name, r in recorded.items()}
  assert tokens["ar greedy"] != tokens["ar sampled"]
  assert tokens["spec draft model greedy"] == tokens["ar greedy"]
  assert tokens["spec draft model exact"] != tokens["ar greedy"]
  assert tokens["diffusion threshold none"] != tokens["diffusion threshold dual"]
  assert tokens["diffusion llada none"] != tokens["diffusion llada random remasking"]
