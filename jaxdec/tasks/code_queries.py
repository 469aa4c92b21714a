"""Code testbed for decoding many queries of one context: a Python module's header (its imports
and constants, up to the first function) is the shared context, and the signature lines of its
top-level functions are the queries, so `context + query` asks the model for that function's
body. Held-out modules come from the CPython standard library's validation split
(`jaxdec.corpus`), the part the pycode zoo models never trained on.
"""

from __future__ import annotations

import ast
import dataclasses
import random
import warnings

from jaxdec import corpus


@dataclasses.dataclass(frozen=True)
class CodeQueries:
  """One module: `context` (the header's last characters, whole lines) and `queries` (signature
  lines of the functions `names`, in source order, without the final line break: the model
  writes it, and a small tokenizer merges it with the body's indentation)."""

  name: str
  context: str
  queries: tuple[str, ...]
  names: tuple[str, ...]


def _signatures(source: str, max_chars: int) -> tuple[int, list[tuple[str, str]]]:
  """(index of the first top-level function's first line, [(name, signature lines)]) for the
  functions whose body starts on a line of its own, signature at most `max_chars` characters;
  raises SyntaxError for bad source."""
  lines = source.splitlines(keepends=True)
  found, first = [], None
  with warnings.catch_warnings():  # Old modules' invalid escapes are not ours to report.
    warnings.simplefilter("ignore", SyntaxWarning)
    warnings.simplefilter("ignore", DeprecationWarning)
    tree = ast.parse(source)
  for node in tree.body:
    if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      continue
    start = min([node.lineno] + [d.lineno for d in node.decorator_list]) - 1
    first = start if first is None else first
    body = node.body[0].lineno - 1
    signature = "".join(lines[start:body])
    # `def f(): pass` on one line has no body to ask for.
    if body > node.lineno - 1 and len(signature) <= max_chars:
      found.append((node.name, signature.rstrip("\n")))
  return (len(lines) if first is None else first), found


def function_queries(source: str, k: int, *, context_chars: int = 300,
                     max_signature_chars: int = 80, name: str = "") -> CodeQueries:
  """The header of `source` (cut to its last `context_chars` characters at a line start) and
  the signatures of its first `k` top-level functions (those of at most `max_signature_chars`
  characters: a query should leave room for its body in a small model's positions)."""
  if not isinstance(k, int) or isinstance(k, bool) or k < 1:
    raise ValueError(f"k must be an int >= 1, got {k!r}")
  if not isinstance(context_chars, int) or context_chars < 1:
    raise ValueError(f"context_chars must be an int >= 1, got {context_chars!r}")
  first, found = _signatures(source, max_signature_chars)
  if len(found) < k:
    raise ValueError(f"module {name or '<source>'} has {len(found)} top-level functions with a "
                     f"body, fewer than k={k}")
  header = "".join(source.splitlines(keepends=True)[:first])
  if len(header) > context_chars:
    cut = header[-context_chars:]
    header = cut[cut.index("\n") + 1:] if "\n" in cut else ""
  if not header.strip():
    raise ValueError(f"module {name or '<source>'} has no header before its first function "
                     f"within context_chars={context_chars}")
  return CodeQueries(name, header, tuple(s for _, s in found[:k]),
                     tuple(n for n, _ in found[:k]))


def stdlib_queries(k: int, modules: int = 1, *, seed: int = 0, context_chars: int = 300,
                   max_signature_chars: int = 80, min_header_chars: int = 100) -> list[CodeQueries]:
  """`modules` held-out standard-library modules (validation split, order shuffled by `seed`)
  with at least `k` functions and a header of at least `min_header_chars` characters."""
  if not isinstance(modules, int) or isinstance(modules, bool) or modules < 1:
    raise ValueError(f"modules must be an int >= 1, got {modules!r}")
  files = sorted(corpus.stdlib_split("validation"), key=lambda f: f.relpath)
  random.Random(seed).shuffle(files)
  out = []
  for file, text in zip(files, corpus.read_texts(files)[0]):
    try:
      found = function_queries(text, k, context_chars=context_chars,
                               max_signature_chars=max_signature_chars, name=file.relpath)
    except (SyntaxError, ValueError):
      continue
    if len(found.context) >= min_header_chars:
      out.append(found)
      if len(out) == modules:
        return out
  raise ValueError(f"only {len(out)} held-out modules have {k} functions and a header of "
                   f"{min_header_chars} characters; asked for {modules}")
