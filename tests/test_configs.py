"""The training recipes ship inside the package and load without the CLI."""

import os
import subprocess
import sys

import pytest

from jaxdec import configs
from jaxdec.train.trainer import TrainConfig


def test_every_zoo_recipe_loads_by_name_and_by_path():
  assert configs.available() == ["zoo:gsm-ar", "zoo:gsm-dlm", "zoo:gsm-dlm-confidence",
                                 "zoo:gsm-dlm-draft", "zoo:gsm-dlm-refine", "zoo:gsm-draft", "zoo:gsm-eagle3",
                                 "zoo:gsm-kforcing", "zoo:gsm-mtp", "zoo:pycode-ar",
                                 "zoo:pycode-dlm", "zoo:pycode-dlm-long", "zoo:pycode-dlm-refine", "zoo:pycode-draft",
                                 "zoo:pycode-eagle3", "zoo:pycode-mtp"]
  for name in configs.available():
    cfg = configs.load_config(name)
    assert isinstance(cfg, TrainConfig)
    assert configs.load_config(configs.config_path(name)) == cfg
  for stage in ("zoo:pycode-dlm-refine", "zoo:pycode-dlm-long", "zoo:gsm-dlm-refine",
                "zoo:gsm-dlm-confidence"):
    assert configs.load_config(stage).init_from == stage.rsplit("-", 1)[0]


def test_recipes_live_in_the_package_and_never_import_the_cli():
  """Before: pycode_dlm.py imported `jaxdec.cli.load_config_file`, and recipes sat outside the
  package (`jaxdec train` had nothing to read after a pip install)."""
  from setuptools import find_packages

  import jaxdec

  package_dir = os.path.dirname(os.path.abspath(jaxdec.__file__))
  assert os.path.dirname(configs.config_path("zoo:pycode-ar")).startswith(package_dir)
  assert "jaxdec.configs.zoo" in find_packages(os.path.dirname(package_dir), include=["jaxdec*"])
  code = ("import sys\nfrom jaxdec import configs\n"
          "[configs.load_config(n) for n in configs.available()]\n"
          "assert 'jaxdec.cli' not in sys.modules, 'a recipe imported the CLI'\n")
  subprocess.run([sys.executable, "-c", code], check=True, env=dict(os.environ, JAX_PLATFORMS="cpu"))


def test_bad_config_arguments_are_named(tmp_path):
  with pytest.raises(ValueError, match="unknown zoo config 'zoo:pycode-xl'; available"):
    configs.load_config("zoo:pycode-xl")
  with pytest.raises(FileNotFoundError, match="config file not found: nowhere.py"):
    configs.load_config("nowhere.py")
  (tmp_path / "empty.py").write_text("x = 1\n")
  with pytest.raises(ValueError, match="defines no get_config"):
    configs.load_config(str(tmp_path / "empty.py"))
  with pytest.raises(TypeError, match="config must be 'zoo:NAME' or a path, got int"):
    configs.load_config(3)
