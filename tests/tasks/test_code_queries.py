import pytest

from jaxdec.tasks import code_queries

MODULE = '''"""A module."""

import os
import sys

LIMIT = 10


@decorated
def first(a, b):
    """Docstring."""
    return a + b

def one_liner(): pass

class Skipped:
    def method(self):
        return 1

async def second(
        x,
        y=2):
    return x

def third():
    return LIMIT
'''


def test_header_and_signatures_in_source_order():
  found = code_queries.function_queries(MODULE, 3, context_chars=1000, name="m")
  assert found.context == MODULE[: MODULE.index("@decorated")]
  assert found.names == ("first", "second", "third")  # One-liners and methods are not queries.
  assert found.queries == ("@decorated\ndef first(a, b):", "async def second(\n        x,\n"
                           "        y=2):", "def third():")
  assert found.context.endswith("\n")


def test_context_is_cut_at_a_line_start():
  found = code_queries.function_queries(MODULE, 1, context_chars=30)
  assert len(found.context) <= 30 and found.context.startswith("import sys\n")
  assert MODULE.startswith(MODULE[: MODULE.index("@decorated")]) and \
      MODULE[: MODULE.index("@decorated")].endswith(found.context)


def test_long_signatures_are_skipped():
  found = code_queries.function_queries(MODULE, 2, context_chars=1000, max_signature_chars=30)
  assert found.names == ("first", "third")


def test_bad_inputs():
  with pytest.raises(ValueError, match="k must be"):
    code_queries.function_queries(MODULE, 0)
  with pytest.raises(ValueError, match="fewer than k=4"):
    code_queries.function_queries(MODULE, 4, name="m")
  with pytest.raises(ValueError, match="no header"):
    code_queries.function_queries("def f():\n    return 1\n", 1)
  with pytest.raises(SyntaxError):
    code_queries.function_queries("def (:\n", 1)
  with pytest.raises(ValueError, match="modules must be"):
    code_queries.stdlib_queries(2, 0)


def test_stdlib_modules_are_held_out_and_deterministic():
  from jaxdec import corpus

  docs = code_queries.stdlib_queries(4, 2, seed=0)
  assert docs == code_queries.stdlib_queries(4, 2, seed=0)
  assert len({d.name for d in docs}) == 2
  assert all(corpus.is_validation(d.name) and len(d.queries) == 4 for d in docs)
  with pytest.raises(ValueError, match="held-out modules"):
    code_queries.stdlib_queries(200, 1)
