"""Autoregressive decoding, un-jitted, for use inside a caller's own jit.

`jaxdec.generate` (api.py) is the jitted entry point; this package is `jaxdec.ar` rather than
`jaxdec.generate` so the public function and the package do not shadow each other.
"""

from jaxdec.ar.loop import generate, prepare

__all__ = ["generate", "prepare"]
