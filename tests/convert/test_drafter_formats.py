"""`jaxdec.load_drafter` dispatches on a registry of drafter formats, one module each in
`jaxdec.convert.drafters`: a new format is one new file, a directory no format (or several)
recognises is an error naming them."""

import json
import sys

import pytest

import jaxdec
from jaxdec.convert import drafters

TOY = '''import os

NAME = "toy drafter"
LOOKS_LIKE = "toy.json"


def recognise(directory):
  return os.path.exists(os.path.join(directory, "toy.json"))


def read(directory, *, load, target, **options):
  return ("toy", options)
'''


@pytest.fixture
def with_toy_format(tmp_path, monkeypatch):
  """A format module dropped beside the shipped ones (an extra folder on the package's path)."""
  folder = tmp_path / "formats"
  folder.mkdir()
  (folder / "toy.py").write_text(TOY)
  monkeypatch.setattr(drafters, "__path__", list(drafters.__path__) + [str(folder)])
  yield
  sys.modules.pop(f"{drafters.__name__}.toy", None)


def test_the_shipped_formats():
  assert [f.NAME for f in drafters.formats()] == ["EAGLE-3 drafter", "K-Forcing student",
                                                  "Medusa heads"]


def test_a_new_format_is_one_new_file(with_toy_format, tmp_path):
  directory = tmp_path / "toy"
  directory.mkdir()
  (directory / "toy.json").write_text("{}")
  assert jaxdec.load_drafter(str(directory), tree_size=3) == (
      "toy", {"choices": None, "tree_size": 3, "entropy_switching": False})
  (directory / "config.json").write_text(json.dumps({"medusa_num_heads": 2}))
  with pytest.raises(ValueError, match=r"several drafter formats: \['Medusa heads', 'toy drafter'\]"):
    jaxdec.load_drafter(str(directory))


def test_a_directory_no_format_reads_is_named_with_the_formats(tmp_path):
  with pytest.raises(ValueError, match="not a drafter directory jaxdec reads .*EAGLE-3 drafter: "
                                       ".*K-Forcing student: .*Medusa heads: "):
    jaxdec.load_drafter(str(tmp_path))
  with pytest.raises(FileNotFoundError, match="drafter directory not found"):
    jaxdec.load_drafter(str(tmp_path / "missing"))
