"""Every decoding method and cache gives, on the zoo, exactly the outputs recorded before the
plug-in redesign (see zoo_cases.py for how the fixture was made). The default run checks
`zoo_cases.CI`, one case per code path nothing else pins; `-m slow` checks the rest."""

import os
import subprocess
import sys

import numpy as np
import pytest

import zoo_cases

ALL = sorted(zoo_cases.cases())
REST = [name for name in ALL if name not in zoo_cases.CI]


@pytest.fixture(scope="module")
def recorded():
  return zoo_cases.load(zoo_cases.FIXTURE)


def _current(tmp_path_factory, names):
  """Today's outputs of `names`, computed in a fresh interpreter. Inside the long test process
  the near-tied cache cases (a dual- or prefix-cache commit decided by the last bit of a float32
  confidence) flipped from run to run, one case or another, after other tests had run; in a fresh
  process they reproduce the fixture every time."""
  path = str(tmp_path_factory.mktemp("zoo") / "current.npz")
  subprocess.run([sys.executable, zoo_cases.__file__, "--out", path, *names], check=True,
                 env=dict(os.environ))
  return zoo_cases.load(path)


@pytest.fixture(scope="module")
def current(tmp_path_factory):
  return _current(tmp_path_factory, zoo_cases.CI)


@pytest.fixture(scope="module")
def current_rest(tmp_path_factory):
  return _current(tmp_path_factory, REST)


def test_every_case_is_recorded(recorded):
  assert set(recorded) == set(ALL)
  assert set(zoo_cases.CI) <= set(ALL) and len(set(zoo_cases.CI)) == len(zoo_cases.CI)


def _check(current, recorded, name):
  assert set(current[name]) == set(recorded[name]), name
  for field, want in recorded[name].items():
    np.testing.assert_array_equal(current[name][field], want, err_msg=f"{name}: {field}")


@pytest.mark.parametrize("name", zoo_cases.CI)
def test_outputs_are_unchanged(recorded, current, name):
  _check(current, recorded, name)


@pytest.mark.slow
@pytest.mark.parametrize("name", REST)
def test_the_other_outputs_are_unchanged(recorded, current_rest, name):
  _check(current_rest, recorded, name)


def test_the_cases_differ(recorded):
  """Guards the fixture's strength: sampling, caches and rules really change the outputs."""
  tokens = {name: r["tokens"].tobytes() for name, r in recorded.items()}
  assert tokens["ar greedy"] != tokens["ar sampled"]
  assert tokens["spec draft model greedy"] == tokens["ar greedy"]
  assert tokens["spec draft model exact"] != tokens["ar greedy"]
  assert tokens["diffusion threshold none"] != tokens["diffusion threshold dual"]
  assert tokens["diffusion llada none"] != tokens["diffusion llada random remasking"]
