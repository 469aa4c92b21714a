"""Checkpoint conversion: Hugging Face directories and orbax checkpoints."""

from jaxdec.convert.hf import export_hf, load_hf
from jaxdec.convert.hf_config import config_from_hf, config_to_hf, read_hf_config
from jaxdec.convert.orbax import is_orbax_dir, load_orbax, save_orbax

__all__ = ["load_hf", "export_hf", "config_from_hf", "config_to_hf", "read_hf_config",
           "save_orbax", "load_orbax", "is_orbax_dir"]
