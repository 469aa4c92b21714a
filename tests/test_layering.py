"""Imports point one way. Every module of jaxdec/ and pallas_kernels/ sits in a layer of the table
in docs/architecture.md ("Modules"), the one place the layering is written down; it imports only
from its own layer or lower ones, and no modules import each other, directly or round a loop.
Imports are read with `ast`, function-local ones and `from . import` forms included: a local
import hides a dependency, it does not remove it."""

import ast
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("jaxdec", "pallas_kernels")
DOC = ROOT / "docs" / "architecture.md"
# (importer, imported) -> why it is tolerated for now. Empty: every known violation is fixed.
KNOWN: dict[tuple[str, str], str] = {}


def layer_table(text: str) -> dict[str, int]:
  """{path: layer} from the "Modules" section's table headed `| layer | module |`; a path ending
  in "/" covers the folder."""
  found = re.search(r"^## Modules\n(.*?)(?=^## |\Z)", text, re.M | re.S)
  if found is None:
    raise ValueError("no '## Modules' section to read the layer table from")
  section = found.group(1)
  rows = [line for line in section.splitlines() if line.startswith("|")]
  header = [cell.strip() for cell in rows[0].strip("|").split("|")]
  if header[:2] != ["layer", "module"]:
    raise ValueError(f"the Modules table must start with columns layer | module, got {header}")
  table = {}
  for row in rows[2:]:
    layer, modules = [cell.strip() for cell in row.strip("|").split("|")][:2]
    for path in re.findall(r"`([^`]+)`", modules):
      table[path] = int(layer)
  return table


def module_files(root: pathlib.Path) -> dict[str, str]:
  """{dotted module name: its path relative to root} for every module of PACKAGES."""
  modules = {}
  for package in PACKAGES:
    for path in sorted((root / package).rglob("*.py")):
      parts = path.relative_to(root).with_suffix("").parts
      name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
      modules[name] = path.relative_to(root).as_posix()
  return modules


def layer_of(path: str, table: dict[str, int]) -> int | None:
  """The layer of the longest table entry covering `path` (None: no row covers it)."""
  covering = [entry for entry in table
              if entry == path or (entry.endswith("/") and path.startswith(entry))]
  return table[max(covering, key=len)] if covering else None


def _known_module(name: str, modules: dict) -> str | None:
  """`name`, or its longest prefix that is a module ('jaxdec.model.X' for a name X in it)."""
  parts = name.split(".")
  for end in range(len(parts), 0, -1):
    if ".".join(parts[:end]) in modules:
      return ".".join(parts[:end])
  return None


def _targets(node, importer: str, is_package: bool, modules: dict) -> list[str]:
  """The modules of PACKAGES that one import statement names."""
  if isinstance(node, ast.Import):
    names = [alias.name for alias in node.names]
  else:
    base = node.module or ""
    if node.level:
      package = importer.split(".") if is_package else importer.split(".")[:-1]
      package = package[:len(package) - (node.level - 1)]
      base = ".".join(package + ([base] if base else []))
    names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
             for alias in node.names]
  found = (_known_module(n, modules) for n in names if n.split(".")[0] in PACKAGES)
  return sorted({m for m in found if m is not None})


def import_edges(root: pathlib.Path, modules: dict) -> list[tuple[str, str, int]]:
  """(importer, imported, line) for every import between modules of PACKAGES, anywhere in a
  file (top level, functions, classes)."""
  edges = []
  for name, path in modules.items():
    tree = ast.parse((root / path).read_text(), filename=path)
    is_package = path.endswith("__init__.py")
    for node in ast.walk(tree):
      if isinstance(node, (ast.Import, ast.ImportFrom)):
        edges += [(name, target, node.lineno)
                  for target in _targets(node, name, is_package, modules) if target != name]
  return sorted(set(edges))


def layer_violations(edges, modules: dict, table: dict) -> list[str]:
  """One line per import of a higher layer, naming importer, imported module and line."""
  out = []
  for importer, imported, line in edges:
    low, high = layer_of(modules[importer], table), layer_of(modules[imported], table)
    if low is not None and high is not None and high > low and (importer, imported) not in KNOWN:
      out.append(f"{modules[importer]}:{line}: {importer} (layer {low}) imports {imported} "
                 f"(layer {high})")
  return out


def import_cycles(edges) -> list[str]:
  """One line per strongly connected group of modules: a shortest loop through it, each step
  with the line that imports."""
  graph, lines = {}, {}
  for importer, imported, line in edges:
    graph.setdefault(importer, set()).add(imported)
    lines.setdefault((importer, imported), line)
  out = []
  for group in _strongly_connected(graph):
    if len(group) > 1:
      loop = _shortest_loop(min(group), graph, group)
      steps = " -> ".join(f"{b} (line {lines[a, b]} of {a})" for a, b in zip(loop, loop[1:]))
      out.append(f"{loop[0]} -> {steps}")
  return out


def _strongly_connected(graph: dict) -> list[set]:
  """Tarjan's algorithm, iterative (no recursion limit)."""
  index, low, on_stack, stack, groups = {}, {}, set(), [], []
  for root in sorted(graph):
    if root in index:
      continue
    work = [(root, iter(sorted(graph.get(root, ()))))]
    index[root] = low[root] = len(index)
    stack.append(root)
    on_stack.add(root)
    while work:
      node, children = work[-1]
      child = next(children, None)
      if child is None:
        work.pop()
        if work:
          low[work[-1][0]] = min(low[work[-1][0]], low[node])
        if low[node] == index[node]:
          group = set()
          while True:
            member = stack.pop()
            on_stack.discard(member)
            group.add(member)
            if member == node:
              break
          groups.append(group)
      elif child not in index:
        index[child] = low[child] = len(index)
        stack.append(child)
        on_stack.add(child)
        work.append((child, iter(sorted(graph.get(child, ())))))
      elif child in on_stack:
        low[node] = min(low[node], index[child])
  return groups


def _shortest_loop(start: str, graph: dict, group: set) -> list[str]:
  """start -> ... -> start inside `group`, by breadth-first search."""
  parents, frontier = {}, [start]
  while frontier:
    following = []
    for node in frontier:
      for child in sorted(graph.get(node, ())):
        if child == start:
          path = [node]
          while path[-1] != start:
            path.append(parents[path[-1]])
          return path[::-1] + [start]
        if child in group and child not in parents:
          parents[child] = node
          following.append(child)
    frontier = following
  raise ValueError(f"no loop through {start}")


def _repo():
  modules = module_files(ROOT)
  return modules, layer_table(DOC.read_text()), import_edges(ROOT, modules)


def test_every_module_has_a_layer_and_every_row_a_module():
  modules, table, _ = _repo()
  unplaced = [path for path in modules.values() if layer_of(path, table) is None]
  assert not unplaced, f"modules without a row in {DOC.name}'s Modules table: {unplaced}"
  stale = [entry for entry in table
           if not any(p == entry or (entry.endswith("/") and p.startswith(entry))
                      for p in modules.values())]
  assert not stale, f"rows of {DOC.name}'s Modules table naming no module: {stale}"


def test_imports_point_down_the_layers():
  modules, table, edges = _repo()
  bad = layer_violations(edges, modules, table)
  assert not bad, "imports against the layer order (docs/architecture.md):\n" + "\n".join(bad)


def test_no_import_cycles():
  _, _, edges = _repo()
  loops = import_cycles(edges)
  assert not loops, "modules importing each other:\n" + "\n".join(loops)


def test_known_violations_still_exist():
  """A tolerated violation that is gone must leave KNOWN too."""
  _, _, edges = _repo()
  present = {(a, b) for a, b, _ in edges}
  assert not set(KNOWN) - present, f"fixed, remove from KNOWN: {sorted(set(KNOWN) - present)}"


def test_the_checks_catch_a_hidden_upward_import_and_a_cycle(tmp_path):
  """A function-local `from . import` of a higher layer, and the loop it closes, are reported
  with importer, imported module and line; a module no row covers is found."""
  files = {"jaxdec/__init__.py": "", "jaxdec/low.py": "import os\n\n\ndef f():\n  from . import high\n",
           "jaxdec/high.py": "from jaxdec.low import f\n", "jaxdec/stray.py": "",
           "pallas_kernels/__init__.py": ""}
  for path, text in files.items():
    (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
    (tmp_path / path).write_text(text)
  table = layer_table("## Modules\n\n| layer | module | holds |\n|---|---|---|\n"
                      "| 0 | `jaxdec/low.py` | x |\n| 1 | `jaxdec/high.py`, `pallas_kernels/` | y |\n"
                      "| 2 | `jaxdec/__init__.py` | z |\n\n## Next\n")
  modules = module_files(tmp_path)
  edges = import_edges(tmp_path, modules)
  assert edges == [("jaxdec.high", "jaxdec.low", 1), ("jaxdec.low", "jaxdec.high", 5)]
  assert layer_violations(edges, modules, table) == [
      "jaxdec/low.py:5: jaxdec.low (layer 0) imports jaxdec.high (layer 1)"]
  assert import_cycles(edges) == [
      "jaxdec.high -> jaxdec.low (line 1 of jaxdec.high) -> jaxdec.high (line 5 of jaxdec.low)"]
  assert layer_of("jaxdec/stray.py", table) is None
  assert layer_of("pallas_kernels/__init__.py", table) == 1
