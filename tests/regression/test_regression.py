"""Every decoding method and cache gives, on the zoo, exactly the outputs recorded before the
plug-in redesign (see zoo_cases.py for how the fixture was made)."""

import numpy as np
import pytest

import zoo_cases


@pytest.fixture(scope="module")
def recorded():
  with np.load(zoo_cases.FIXTURE) as data:
    out = {}
    for key in data.files:
      name, field = key.rsplit("/", 1)
      out.setdefault(name, {})[field] = data[key]
  return out


@pytest.fixture(scope="module")
def current():
  return zoo_cases.run()


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
