"""The zoo's training recipes (`jaxdec train --config zoo:NAME`); see `jaxdec.configs`."""
