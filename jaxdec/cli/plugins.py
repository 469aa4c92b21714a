"""The plug-ins the command line offers, read from their declarations (`jaxdec.plugins`): the
choices, flags and help of --drafter, --verifier, --scheduler and --cache, and the plug-in that a
command line asks for. Nothing here names a plug-in class."""

from __future__ import annotations

import dataclasses

from jaxdec import plugins
from jaxdec.cli.common import flag, given, positive_int

DEFAULT_DRAFTER = "lookup"


def registered(kind: str) -> tuple[plugins.Plugin, ...]:
  """Every declared plug-in of `kind`, in CLI order (importing spec and diffusion declares them)."""
  import jaxdec.diffusion  # noqa: F401
  import jaxdec.spec  # noqa: F401

  return plugins.registered(kind)


def _named(kind: str, name: str) -> plugins.Plugin | None:
  return next((p for p in registered(kind) if p.spec.name == name), None)


def params(kind: str) -> list[str]:
  """The dests of the flags that plug-ins of `kind` read, each once, in CLI order."""
  return list(dict.fromkeys(p.flag for plugin in registered(kind) for p in plugin.spec.params))


def names(kind: str) -> list[str]:
  return [p.spec.name for p in registered(kind)]


def _default(cls: type, keyword: str):
  """The class's default for `keyword`, or None when it has none."""
  fields = {f.name: f for f in dataclasses.fields(cls)} if dataclasses.is_dataclass(cls) else {}
  field = fields.get(keyword)
  return None if field is None or field.default is dataclasses.MISSING else field.default


def _param_help(kind: str, dest: str) -> str:
  """A flag's help from its readers' phrases and defaults: "--scheduler threshold: commit every
  mask this confident (left out: 0.9)", or per phrase "draft tokens a step (left out: lookup 6,
  draft 4)" when several plug-ins read it."""
  readers = [(plugin.spec.name, p.help, _default(plugin.cls, p.keyword))
             for plugin in registered(kind) for p in plugin.spec.params if p.flag == dest]
  if len(readers) == 1:
    name, phrase, default = readers[0]
    return f"--{kind} {name}: {phrase}" + ("" if default is None else f" (left out: {default})")
  phrases: dict[str, list[str]] = {}
  for name, phrase, default in readers:
    phrases.setdefault(phrase, []).append(name if default is None else f"{name} {default}")
  return "; ".join(f"{phrase} (left out: {', '.join(owners)})"
                   for phrase, owners in phrases.items())


def add_param_flags(group, kind: str) -> None:
  """One flag per parameter that plug-ins of `kind` read (int: a positive count)."""
  for dest in params(kind):
    types = {p.type for plugin in registered(kind) for p in plugin.spec.params if p.flag == dest}
    if len(types) > 1:
      raise TypeError(f"{kind} plug-ins read {flag(dest)} as different types: "
                      f"{sorted(t.__name__ for t in types)}")
    parse = positive_int if types == {int} else float
    group.add_argument(flag(dest), type=parse, help=_param_help(kind, dest))


def choices_help(kind: str) -> str:
  """Each plug-in of `kind` with its phrase, its example path and its flags."""
  items = []
  for plugin in registered(kind):
    spec, source = plugin.spec, plugin.spec.source
    example = "" if source is None else f", e.g. {spec.name}:{source.example}"
    flags = "" if not spec.params else "; " + ", ".join(flag(p.flag) for p in spec.params)
    items.append(f"{spec.label} ({spec.help}{example}{flags})")
  return ", ".join(items)


def metavar(kind: str) -> str:
  return "{" + ",".join(p.spec.label for p in registered(kind)) + "}"


def _refuse_others(args, kind: str, plugin: plugins.Plugin | None, shown: str) -> None:
  """ValueError naming a parameter flag that the chosen plug-in does not read."""
  own = set() if plugin is None else {p.flag for p in plugin.spec.params}
  for dest in given(args, params(kind)):
    if dest not in own:
      raise ValueError(f"{flag(dest)} does not act on --{kind} {shown}")


def _build(plugin: plugins.Plugin, args, *first):
  """The plug-in with the parameters the command line gave (the class's defaults otherwise)."""
  values = {p.keyword: getattr(args, p.flag) for p in plugin.spec.params
            if getattr(args, p.flag) is not None}
  return plugin.cls(*first, **values)


def drafter(args):
  """--drafter NAME or NAME:PATH (left out: lookup) with its flags; ValueError naming an unknown
  name, an empty PATH, a flag it does not read, or a PATH holding another kind of drafter."""
  name = args.drafter or DEFAULT_DRAFTER
  head, colon, path = name.partition(":")
  plugin = _named("drafter", head)
  if plugin is None or (colon and plugin.spec.source is None):
    listed = [p.spec.label + ("" if p.spec.source is None else
                              f" (e.g. {p.spec.name}:{p.spec.source.example})")
              for p in registered("drafter")]
    raise ValueError(f"--drafter must be {', '.join(listed[:-1])} or {listed[-1]}, got {name!r}")
  _refuse_others(args, "drafter", plugin, name)
  source = plugin.spec.source
  if source is None:
    return _build(plugin, args)
  if not path:
    raise ValueError(f"--drafter {head}:... needs {source.needs}, e.g. {head}:{source.example}")
  import jaxdec

  if source.loads == "model":
    return _build(plugin, args, jaxdec.load(path))
  loaded = jaxdec.load_drafter(path)
  if not isinstance(loaded, plugin.cls):
    raise ValueError(f"--drafter {name}: {path} holds a {type(loaded).__name__} drafter, not "
                     f"{source.noun}")
  return loaded


def verifier(args):
  """The --verifier plug-in, or None: the API's default (greedy without sampling, else exact)."""
  plugin = None if args.verifier is None else _named("verifier", args.verifier)
  _refuse_others(args, "verifier", plugin, args.verifier)
  return None if plugin is None else _build(plugin, args)


def scheduler(args):
  """The --scheduler plug-in with its values (a value's flag alone picks the scheduler that
  reads it), or None: the API's default for the model."""
  values = given(args, params("scheduler"))
  readers = {d: [p.spec.name for p in registered("scheduler")
                 if d in {q.flag for q in p.spec.params}] for d in values}
  common = [n for n in names("scheduler") if all(n in readers[d] for d in values)]
  if values and not common:
    other = next((d for d in values[1:] if not set(readers[d]) & set(readers[values[0]])),
                 values[-1])
    raise ValueError(f"{flag(values[0])} and {flag(other)} are values of two schedulers: pass one")
  name = args.scheduler
  if name is None and values:
    if len(common) > 1:
      raise ValueError(f"{flag(values[0])} is a value of --scheduler {' and '.join(common)}: pass "
                       "--scheduler")
    name = common[0]
  if name is None:
    return None
  for dest in values:
    if name not in readers[dest]:
      raise ValueError(f"{flag(dest)} is the value of --scheduler {' / '.join(readers[dest])}, "
                       f"not of --scheduler {name}")
  return _build(_named("scheduler", name), args)


def cache(args):
  """The --cache plug-in, or None for none (exact) or left out."""
  plugin = None if args.cache in (None, "none") else _named("cache", args.cache)
  _refuse_others(args, "cache", plugin, args.cache or "none")
  return None if plugin is None else _build(plugin, args)
