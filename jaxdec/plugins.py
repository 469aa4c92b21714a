"""The command-line names of plug-ins, declared beside each class, so that offering a drafter,
verifier, scheduler or cache on the `jaxdec` command line is a change in its own file only:

  @register_cli("scheduler", "threshold", order=20, help="commit every mask this confident",
                params=(Param("threshold", float, "the confidence", arg="tau"),))
  @struct.dataclass
  class Threshold(Scheduler): ...

A declaration is plain data (no argparse): `jaxdec.cli` reads `registered(kind)` and builds its
choices, flags, help and the plug-in itself from it. This module imports nothing of jaxdec, so
every layer may declare.
"""

from __future__ import annotations

import dataclasses

KINDS = ("drafter", "verifier", "scheduler", "cache")
LOADS = ("model", "drafter")


@dataclasses.dataclass(frozen=True)
class Param:
  """A flag the plug-in reads: `--FLAG VALUE` passes VALUE as its constructor's keyword `arg`
  (left empty: `flag`). `type` int is a count (the CLI accepts positive ints), float any number;
  `help` says what it sets (the CLI adds the class's default)."""

  flag: str
  type: type
  help: str
  arg: str = ""

  def __post_init__(self):
    if not self.flag.isidentifier():
      raise ValueError(f"Param.flag must be an identifier (the flag's dest), got {self.flag!r}")
    if self.type not in (int, float):
      raise TypeError(f"Param {self.flag!r}: type must be int or float, got {self.type!r}")
    if not self.help:
      raise ValueError(f"Param {self.flag!r} needs a help text")

  @property
  def keyword(self) -> str:
    return self.arg or self.flag


@dataclasses.dataclass(frozen=True)
class Source:
  """A plug-in built from a path: `--drafter NAME:PATH`. `loads` "model": the CLI passes
  `jaxdec.load(PATH)` as the first argument; "drafter": `jaxdec.load_drafter(PATH)` must be an
  instance of the class. `needs` names PATH in the message for an empty one ("the draft model"),
  `example` is a PATH ("zoo:pycode-draft"), `noun` what a drafter of another class is not
  ("Medusa heads")."""

  metavar: str
  loads: str
  needs: str
  example: str
  noun: str = ""

  def __post_init__(self):
    if self.loads not in LOADS:
      raise ValueError(f"Source.loads must be one of {LOADS}, got {self.loads!r}")


@dataclasses.dataclass(frozen=True)
class CliSpec:
  """One plug-in's command-line declaration: `--KIND NAME` (with `source`: `--KIND NAME:PATH`)
  builds it; `order` places it in the CLI's lists (help, choices, messages); `help` is its phrase
  in the option's help; `params` the flags it reads."""

  kind: str
  name: str
  help: str
  order: int
  params: tuple[Param, ...] = ()
  source: Source | None = None

  def __post_init__(self):
    if self.kind not in KINDS:
      raise ValueError(f"CliSpec.kind must be one of {KINDS}, got {self.kind!r}")
    if not self.name or not self.name.replace("-", "").isalnum():
      raise ValueError(f"CliSpec.name must be a word (letters, digits, -), got {self.name!r}")
    if not all(isinstance(p, Param) for p in self.params):
      raise TypeError(f"{self.kind} {self.name}: params must be Param objects, got {self.params!r}")
    if self.source is not None and self.kind != "drafter":
      raise ValueError(f"{self.kind} {self.name}: only drafters are built from a path (source)")
    if self.source is not None and self.source.loads == "drafter" and self.params:
      raise ValueError(f"{self.kind} {self.name}: a drafter read from its directory takes no "
                       f"flags, got params {[p.flag for p in self.params]}")

  @property
  def label(self) -> str:
    """The name as the help writes it: "lookup", "draft:MODEL"."""
    return self.name if self.source is None else f"{self.name}:{self.source.metavar}"


@dataclasses.dataclass(frozen=True)
class Plugin:
  cls: type
  spec: CliSpec


_REGISTRY: dict[tuple[str, str], Plugin] = {}


def register_cli(kind: str, name: str, *, help: str, order: int, params: tuple[Param, ...] = (),
                 source: Source | None = None):
  """Class decorator: `cls` is `--KIND NAME` on the command line (see `CliSpec`)."""
  spec = CliSpec(kind, name, help, order, tuple(params), source)

  def register(cls: type) -> type:
    known = _REGISTRY.get((kind, name))
    same = known is not None and (known.cls.__module__, known.cls.__qualname__) == \
        (cls.__module__, cls.__qualname__)  # The same class again (a module reload).
    if known is not None and not same:
      raise ValueError(f"--{kind} {name} is already {known.cls.__module__}."
                       f"{known.cls.__qualname__}; {cls.__module__}.{cls.__qualname__} needs "
                       "another name")
    _REGISTRY[kind, name] = Plugin(cls, spec)
    return cls

  return register


def registered(kind: str) -> tuple[Plugin, ...]:
  """The plug-ins of `kind` declared so far (their modules imported), in CLI order."""
  if kind not in KINDS:
    raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
  found = [p for (k, _), p in _REGISTRY.items() if k == kind]
  return tuple(sorted(found, key=lambda p: (p.spec.order, p.spec.name)))
