"""Nothing the repository ships may point outside it: a clone (or a pip install, or a Colab
runtime) has only these files, so a path into the author's machine or a planning folder is a dead
end for every reader, and a markdown link to a moved file is one too.

Scans the docs, notebooks, package, kernels, tests and pyproject.toml line by line; each finding
names file:line. The patterns are spelled so that this file does not match itself.
"""

from __future__ import annotations

import os
import re

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCANNED = ("README.md", "docs", "colab", "jaxdec", "tests", "pallas_kernels", "pyproject.toml")
SKIP_DIRS = {"__pycache__", ".pytest_cache", ".ipynb_checkpoints"}

# (what it is, pattern). Character classes like [k] keep each pattern from matching its own text.
OUTSIDE = (
    ("a path into the sibling shared folder", re.compile(r"\.\./share[d]")),
    ("an absolute path into the work tree", re.compile(r"/wor[k]/")),
    ("the design notes outside the repository", re.compile(r"shared/DESIG[N]")),
    ("a research note outside the repository", re.compile(r"\bresearc[h]/[\w.-]+\.md")),
    ("an absolute home path", re.compile(r"/home/\w|/User[s]/\w|/roo[t]/|[A-Za-z]:\\User[s]\\")),
)
# [text](target) in markdown (README, docs, notebooks' markdown cells); images too.
MARKDOWN_LINK = re.compile(r"!?\[[^\]\n]*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
# `jaxdec/io.py`-style code spans in markdown: a path under one of the repository's folders.
REPO_PATH_SPAN = re.compile(r"`((?:jaxdec|tests|docs|colab|pallas_kernels|scripts)/[\w./-]*)`")
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:|#)", re.IGNORECASE)  # https:, mailto:, #anchor.


def scanned_files(root: str, entries=SCANNED) -> list[str]:
  """Repository-relative paths of the text files under `entries` (binary files are skipped)."""
  found = []
  for entry in entries:
    path = os.path.join(root, entry)
    if os.path.isfile(path):
      found.append(entry)
      continue
    for directory, subdirs, files in os.walk(path):
      subdirs[:] = sorted(d for d in subdirs if d not in SKIP_DIRS)
      found += [os.path.relpath(os.path.join(directory, f), root) for f in sorted(files)]
  return found


def _text(path: str) -> str | None:
  with open(path, "rb") as f:
    data = f.read()
  if b"\0" in data:
    return None
  try:
    return data.decode("utf-8")
  except UnicodeDecodeError:
    return None


def _link_problem(root: str, relpath: str, target: str) -> str | None:
  """Why a markdown link target is bad (outside the repository, or missing), or None."""
  if EXTERNAL.match(target):
    return None
  target = target.split("#", 1)[0].split("?", 1)[0]
  if not target:
    return None
  base = root if target.startswith("/") else os.path.dirname(os.path.join(root, relpath))
  resolved = os.path.normpath(os.path.join(base, target.lstrip("/")))
  if os.path.relpath(resolved, root).startswith(os.pardir):
    return f"a markdown link outside the repository ({target})"
  if not os.path.exists(resolved):
    return f"a markdown link to a file that does not exist ({target})"
  return None


def outside_references(root: str, relpaths: list[str]) -> list[str]:
  """'file:line: what (the text)' for every reference that leaves the repository."""
  findings = []
  for relpath in relpaths:
    text = _text(os.path.join(root, relpath))
    if text is None:
      continue
    markdown = relpath.endswith((".md", ".ipynb"))
    for number, line in enumerate(text.splitlines(), 1):
      where = f"{relpath}:{number}"
      for what, pattern in OUTSIDE:
        match = pattern.search(line)
        if match:
          findings.append(f"{where}: {what} ({line.strip()[:120]})")
      if not markdown:
        continue
      for match in MARKDOWN_LINK.finditer(line):
        problem = _link_problem(root, relpath, match.group(1))
        if problem:
          findings.append(f"{where}: {problem}")
      for match in REPO_PATH_SPAN.finditer(line):
        if not os.path.exists(os.path.join(root, match.group(1))):
          findings.append(f"{where}: a repository path that does not exist ({match.group(1)})")
  return findings


def test_the_scan_covers_the_repository():
  files = scanned_files(ROOT)
  for expected in ("README.md", "pyproject.toml", "jaxdec/__init__.py", "tests/conftest.py"):
    assert expected in files
  assert not any(f.endswith(".pyc") for f in files)


def test_nothing_points_outside_the_repository():
  findings = outside_references(ROOT, scanned_files(ROOT))
  assert not findings, ("references that leave the repository:\n  " + "\n  ".join(findings))


@pytest.mark.parametrize("line, what", [
    ("see ../" + "shared/notes.txt", "sibling shared folder"),
    ("open('/" + "work/main/x.py')", "absolute path into the work tree"),
    ("as shared/" + "DESIGN.md says", "design notes"),
    ("the algorithm in research/" + "spec.md", "research note"),
    ("data in /home" + "/alice/corpus", "absolute home path"),
    ("data in /Users" + "/alice/corpus", "absolute home path"),
])
def test_each_outside_pattern_is_found(tmp_path, line, what):
  (tmp_path / "mod.py").write_text(f"x = 1\n# {line}\n")
  findings = outside_references(str(tmp_path), ["mod.py"])
  assert len(findings) == 1 and findings[0].startswith("mod.py:2: ") and what in findings[0]


def test_markdown_links_and_paths_must_resolve_inside(tmp_path):
  (tmp_path / "docs").mkdir()
  (tmp_path / "jaxdec").mkdir()
  (tmp_path / "jaxdec" / "io.py").write_text("")
  (tmp_path / "docs" / "a.md").write_text(
      "[ok](../jaxdec/io.py) [web](https://example.org/x.md) [anchor](#top) `jaxdec/io.py`\n"
      "[gone](missing.md)\n"
      "[up](../../elsewhere/notes.md)\n"
      "moved: `jaxdec/old.py`\n")
  findings = outside_references(str(tmp_path), ["docs/a.md"])
  assert findings == [
      "docs/a.md:2: a markdown link to a file that does not exist (missing.md)",
      "docs/a.md:3: a markdown link outside the repository (../../elsewhere/notes.md)",
      "docs/a.md:4: a repository path that does not exist (jaxdec/old.py)",
  ]
