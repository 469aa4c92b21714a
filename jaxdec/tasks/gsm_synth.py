"""gsm-synth: templated grade-school word problems with a digit-by-digit scratchpad and an exact
answer, the task on which diffusion decoders show speed *and* accuracy.

A problem is a question (people, objects, shops, rates; 1 to 4 steps of +, -, x by one small
factor, exact / by one small divisor), then a `<think>` scratchpad, `</think>`, a long-form
answer that restates the reasoning in sentences, and `#### N`:

  Question: Each of the 7 trays that Zoe bakes holds 95 cupcakes. If she sells 94 cupcakes, how
  many cupcakes are left?
  <think>
  95*7
  95*7:5*7+0=35->5
  9*7:9*7+3=66->65
  carry 6->665
  95*7=665
  665-94
  665-094:5-4-0=1->1
  66-09:16-9-0=7->71
  6-0:6-0-1=5->571
  665-94=571
  </think>
  Zoe bakes 95 * 7 = 665 cupcakes. After selling 94, 665 - 94 = 571 cupcakes are left.
  #### 571

(the question is one line; `Problem.prompt` ends after `<think>` and a newline).

Scratchpad format. A 3M-parameter model that wrote one equation per line ("198 / 9 = 22") learned
every template and got the arithmetic wrong; small models compute reliably only when each token
follows from a few tokens at fixed places nearby. So every step gets a header line `A op B`, then
one line per digit that restates what it still needs, then `A op B=C`:
- `+` and `-`: both operands zero-padded to one width; a line restates the digits not yet used
  (so the column's digits are the last ones before `+` / `:`), then the column, least-significant
  first: `x+y+carry=s` (carry: the previous line's tens digit), or `x-y-borrow=z`, written
  `1x-y-borrow=z` when it borrows ten (the next line's borrow is then 1). After `->` comes the
  result so far: the new digit, then a copy of the previous line's result.
- `*` by a factor 2..9: `x*f+carry=p` the same way; a carry left after the last digit gets a
  `carry c->...` line.
- `/` (exact, by 2..9): long division, most significant digit first,
  `rest/d rR:lead/d=q rR'->quotient so far`, where `lead` is the remainder R then the first
  digit of `rest`.
Every line can be checked on its own (the tests parse and recompute each one). Most tokens are
copies (restated digits, results so far, the long-form answer), the predictable text on which
parallel decoders commit many tokens per forward.

`problems(split, n, seed, difficulty)` is deterministic (hashlib-seeded, no salted `hash()`):
the same arguments give the same problems in every process, and a longer list extends a shorter
one. Splits: `train` and `validation` and `test` use the training templates and are disjoint by
a SHA-256 of the question text; `test-unseen-templates` uses only the held-out templates, which
no other split (and no tokenizer or model trained on `train`) ever sees.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import random
import re
from typing import Callable, ClassVar

SPLITS = ("train", "validation", "test", "test-unseen-templates")
OPERATIONS = ("+", "-", "*", "/")
_BUCKETS = {"test": (0, 5), "validation": (5, 10), "train": (10, 100)}  # sha256(question) % 100.
_ATTEMPTS = 1000  # Draws per problem before a template is declared impossible at a difficulty.


@dataclasses.dataclass(frozen=True)
class Difficulty:
  """Which problems to draw: numbers in the question are in [2, max_operand]; a problem takes
  min_steps..max_steps arithmetic steps, each one of `operations`; x and / use one small factor
  in [2, max_factor] (intermediate results may exceed max_operand)."""

  max_operand: int = 99
  min_steps: int = 1
  max_steps: int = 4
  operations: tuple[str, ...] = OPERATIONS
  max_factor: int = 9

  def __post_init__(self):
    for field in ("max_operand", "min_steps", "max_steps", "max_factor"):
      value = getattr(self, field)
      if not isinstance(value, int) or isinstance(value, bool):
        raise TypeError(f"Difficulty.{field} must be an int, got {value!r}")
    if self.max_operand < 2:
      raise ValueError(f"Difficulty.max_operand must be >= 2, got {self.max_operand}")
    if not 1 <= self.min_steps <= self.max_steps <= 4:
      raise ValueError(f"Difficulty steps must satisfy 1 <= min_steps <= max_steps <= 4, got "
                       f"min_steps={self.min_steps}, max_steps={self.max_steps}")
    if not 2 <= self.max_factor <= 9:
      raise ValueError(f"Difficulty.max_factor must be in [2, 9] (one digit), got "
                       f"{self.max_factor}")
    if (not isinstance(self.operations, tuple) or not self.operations
        or any(op not in OPERATIONS for op in self.operations)):
      raise ValueError(f"Difficulty.operations must be a non-empty tuple of {OPERATIONS}, got "
                       f"{self.operations!r}")


@dataclasses.dataclass(frozen=True)
class Step:
  """One arithmetic step of a solution: `a op b = result`."""

  a: int
  op: str
  b: int
  result: int


@dataclasses.dataclass(frozen=True)
class Problem:
  """`prompt` is what the model is given (the question and the opening `<think>`); `solution`
  the reference completion (scratchpad, `</think>`, long-form answer, `#### N`); `answer` the
  exact integer answer."""

  question: str
  prompt: str
  solution: str
  answer: int
  template: str
  steps: tuple[Step, ...]

  @property
  def text(self) -> str:
    """The whole document a model trains on: prompt + solution."""
    return self.prompt + self.solution


# ----------------------------------------------------------------------------------------------
# The scratchpad.


def _add_lines(a: int, b: int) -> list[str]:
  width = max(len(str(a)), len(str(b)))
  top, bottom = str(a).zfill(width), str(b).zfill(width)
  lines, carry, acc = [f"{a}+{b}"], 0, ""
  for k in range(width, 0, -1):
    x, y = int(top[k - 1]), int(bottom[k - 1])
    s = x + y + carry
    acc = str(s % 10) + acc
    lines.append(f"{top[:k]}+{bottom[:k]}:{x}+{y}+{carry}={s}->{acc}")
    carry = s // 10
  if carry:
    lines.append(f"carry {carry}->{carry}{acc}")
  return lines + [f"{a}+{b}={a + b}"]


def _sub_lines(a: int, b: int) -> list[str]:
  width = len(str(a))
  top, bottom = str(a), str(b).zfill(width)
  lines, borrow, acc = [f"{a}-{b}"], 0, ""
  for k in range(width, 0, -1):
    x, y = int(top[k - 1]), int(bottom[k - 1])
    lent = x - y - borrow < 0
    z = x + 10 * lent - y - borrow
    acc = str(z) + acc
    lines.append(f"{top[:k]}-{bottom[:k]}:{'1' if lent else ''}{x}-{y}-{borrow}={z}->{acc}")
    borrow = int(lent)
  return lines + [f"{a}-{b}={a - b}"]


def _mul_lines(a: int, f: int) -> list[str]:
  digits = str(a)
  lines, carry, acc = [f"{a}*{f}"], 0, ""
  for k in range(len(digits), 0, -1):
    x = int(digits[k - 1])
    p = x * f + carry
    acc = str(p % 10) + acc
    lines.append(f"{digits[:k]}*{f}:{x}*{f}+{carry}={p}->{acc}")
    carry = p // 10
  if carry:
    lines.append(f"carry {carry}->{carry}{acc}")
  return lines + [f"{a}*{f}={a * f}"]


def _div_lines(a: int, d: int) -> list[str]:
  digits = str(a)
  lines, rem, acc = [f"{a}/{d}"], 0, ""
  for k in range(len(digits)):
    lead = 10 * rem + int(digits[k])
    q, new_rem = divmod(lead, d)
    acc += str(q)
    lines.append(f"{digits[k:]}/{d} r{rem}:{lead}/{d}={q} r{new_rem}->{acc}")
    rem = new_rem
  return lines + [f"{a}/{d}={a // d}"]


_LINES = {"+": _add_lines, "-": _sub_lines, "*": _mul_lines, "/": _div_lines}


def scratchpad(steps) -> str:
  """The scratchpad lines of `steps` (`Step`s), joined by newlines (no `<think>` tags)."""
  return "\n".join(line for s in steps for line in _LINES[s.op](s.a, s.b))


# ----------------------------------------------------------------------------------------------
# Drawing numbers and words for a template.


class _Retry(Exception):
  """This draw broke a constraint (a negative difference, an inexact division): draw again."""


_PEOPLE = (("Mia", "she"), ("Liam", "he"), ("Emma", "she"), ("Noah", "he"), ("Ava", "she"),
           ("Omar", "he"), ("Sofia", "she"), ("Leo", "he"), ("Lily", "she"), ("Ethan", "he"),
           ("Chloe", "she"), ("Ben", "he"), ("Zoe", "she"), ("Max", "he"), ("Nora", "she"),
           ("Sam", "he"), ("Ruby", "she"), ("Jack", "he"), ("Grace", "she"), ("Ravi", "he"),
           ("Hana", "she"), ("Kenji", "he"), ("Leila", "she"), ("Diego", "he"))
_PRONOUNS = {"she": ("she", "her", "her"), "he": ("he", "his", "him")}
FRUIT = ("apples", "oranges", "pears", "plums", "lemons", "peaches", "mangoes")
BAKED = ("cookies", "muffins", "cupcakes", "bagels", "rolls")
TRINKETS = ("marbles", "stickers", "stamps", "cards", "shells", "beads", "buttons")
SUPPLIES = ("notebooks", "pens", "pencils", "erasers", "folders", "markers")
PLANTS = ("carrots", "tomatoes", "potatoes", "onions", "beans")
FLOWERS = ("roses", "tulips", "daisies", "lilies")
THINGS = ("book", "game", "hat", "lamp", "backpack", "scarf")


class _Slots(dict):
  """format_map slots: `{He}` is `{he}` capitalised, `{Item}` is `{item}` capitalised."""

  def __missing__(self, key):
    lower = key[:1].lower() + key[1:]
    if key[:1].isupper() and lower in self:
      value = str(self[lower])
      return value[:1].upper() + value[1:]
    raise KeyError(key)


class _Draw:
  """The random choices of one problem: numbers under the difficulty's limits, the steps they
  make (in order), people and words for the text."""

  def __init__(self, rng: random.Random, difficulty: Difficulty):
    self.rng, self.difficulty = rng, difficulty
    self.steps: list[Step] = []
    self.slots = _Slots()
    self._people: set[str] = set()

  @property
  def max(self) -> int:
    return self.difficulty.max_operand

  def num(self, lo: int = 2, hi: int | None = None) -> int:
    """A number of the question in [lo, min(hi, max_operand)]."""
    hi = self.max if hi is None else min(hi, self.max)
    if hi < lo:
      raise _Retry
    return self.rng.randint(lo, hi)

  def factor(self) -> int:
    """A small factor / divisor of the question."""
    return self.rng.randint(2, min(self.difficulty.max_factor, self.max))

  def multiple(self, f: int, lo: int = 2, hi: int | None = None) -> int:
    """A number of the question in [lo, min(hi, max_operand)] that `f` divides."""
    hi = self.max if hi is None else min(hi, self.max)
    k_lo, k_hi = max(1, -(-lo // f)), hi // f
    if k_hi < k_lo:
      raise _Retry
    return self.rng.randint(k_lo, k_hi) * f

  def _step(self, a: int, op: str, b: int, result: int) -> int:
    self.steps.append(Step(a, op, b, result))
    return result

  def add(self, a: int, b: int) -> int:
    return self._step(a, "+", b, a + b)

  def sub(self, a: int, b: int) -> int:
    if a - b < 2:  # Results of at least 2 keep the text plural ("1 plums").
      raise _Retry
    return self._step(a, "-", b, a - b)

  def mul(self, a: int, f: int) -> int:
    if not 2 <= f <= self.difficulty.max_factor:
      raise _Retry
    return self._step(a, "*", f, a * f)

  def div(self, a: int, f: int) -> int:
    if not 2 <= f <= self.difficulty.max_factor or a % f or a // f < 2:
      raise _Retry
    return self._step(a, "/", f, a // f)

  def person(self, suffix: str = "") -> str:
    """A name not used yet in this problem; sets {name<suffix>}, {he<suffix>}, {his..}, {him..}."""
    name, kind = self.rng.choice([p for p in _PEOPLE if p[0] not in self._people])
    self._people.add(name)
    he, his, him = _PRONOUNS[kind]
    self.slots.update({f"name{suffix}": name, f"he{suffix}": he, f"his{suffix}": his,
                       f"him{suffix}": him})
    return name

  def pick(self, key: str, pool: tuple[str, ...]) -> str:
    """A word of `pool` not used yet for another slot; sets {key}."""
    used = set(self.slots.values())
    self.slots[key] = self.rng.choice([w for w in pool if w not in used])
    return self.slots[key]


@dataclasses.dataclass(frozen=True)
class Template:
  """One kind of problem: `draw(d)` makes the numbers and steps through `d` and returns the
  slots of the text; `forms` are the question's surface forms, `explain` the long-form answer."""

  name: str
  ops: str  # The operations of its steps, in order ("*-": a product, then a difference).
  forms: tuple[str, ...]
  explain: str
  draw: Callable[[_Draw], dict]
  held_out: bool = False


TEMPLATES: dict[str, Template] = {}


def _template(name: str, ops: str, forms, explain: str, held_out: bool = False):
  def register(draw):
    TEMPLATES[name] = Template(name, ops, tuple(forms), explain, draw, held_out)
    return draw
  return register


def templates(split: str, difficulty: Difficulty = Difficulty()) -> list[Template]:
  """The templates a split draws from at a difficulty (held-out ones only for
  'test-unseen-templates', never for the others)."""
  if split not in SPLITS:
    raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
  unseen = split == "test-unseen-templates"
  return [t for t in TEMPLATES.values() if t.held_out == unseen
          and difficulty.min_steps <= len(t.ops) <= difficulty.max_steps
          and set(t.ops) <= set(difficulty.operations)]


def _render(template: Template, rng: random.Random, difficulty: Difficulty) -> Problem | None:
  """A problem of `template`, or None when no draw in _ATTEMPTS meets its constraints (a
  difficulty too small for it: numbers up to 9 leave no change from a four-item purchase)."""
  for _ in range(_ATTEMPTS):
    d = _Draw(rng, difficulty)
    try:
      slots = template.draw(d)
    except _Retry:
      continue
    break
  else:
    return None
  if "".join(s.op for s in d.steps) != template.ops:
    raise AssertionError(f"template {template.name!r} declares {template.ops!r} but drew "
                         f"{[s.op for s in d.steps]}")
  d.slots.update(slots)
  question = rng.choice(template.forms).format_map(d.slots)
  answer = d.steps[-1].result
  prompt = f"Question: {question}\n<think>\n"
  solution = (f"{scratchpad(d.steps)}\n</think>\n{template.explain.format_map(d.slots)}\n"
              f"#### {answer}")
  return Problem(question, prompt, solution, answer, template.name, tuple(d.steps))


def _bucket(question: str) -> int:
  return int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big") % 100


def problems(split: str, n: int, seed: int = 0,
             difficulty: Difficulty = Difficulty()) -> list[Problem]:
  """`n` distinct problems of `split` ('train', 'validation', 'test' or
  'test-unseen-templates'), a pure function of (split, seed, difficulty): the first k of
  `problems(split, n, seed)` are `problems(split, k, seed)`. Templates are drawn uniformly from
  `templates(split, difficulty)`, less any whose constraints the difficulty cannot meet (below
  max_operand=20 a few long ones)."""
  if split not in SPLITS:
    raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
  if not isinstance(n, int) or isinstance(n, bool) or n < 0:
    raise ValueError(f"n must be an int >= 0, got {n!r}")
  if not isinstance(seed, int) or isinstance(seed, bool):
    raise TypeError(f"seed must be an int, got {seed!r}")
  if not isinstance(difficulty, Difficulty):
    raise TypeError(f"difficulty must be a Difficulty, got {type(difficulty).__name__}")
  pool = templates(split, difficulty)
  if not pool:
    raise ValueError(f"no {split} template fits {difficulty}")
  lo, hi = _BUCKETS.get(split, (0, 100))
  digest = hashlib.sha256(f"gsm-synth/{split}/{seed}".encode()).digest()
  rng = random.Random(int.from_bytes(digest, "big"))
  out, seen = [], set()
  for _ in range(200 * n + 1000):
    if len(out) == n:
      return out
    template = rng.choice(pool)
    problem = _render(template, rng, difficulty)
    if problem is None:
      pool = [t for t in pool if t is not template]
      if not pool:
        raise ValueError(f"no {split} template can draw a problem at {difficulty}")
      continue
    if problem.question not in seen and lo <= _bucket(problem.question) < hi:
      seen.add(problem.question)
      out.append(problem)
  if len(out) < n:
    raise ValueError(f"found only {len(out)} distinct {split} problems of {n} at {difficulty}")
  return out


# ----------------------------------------------------------------------------------------------
# Scoring.

_ANSWER = re.compile(r"####[ \t]*([+-]?)(\d[\d,]*)")


def extract_answer(text: str) -> int | None:
  """The integer after the first `####` in `text` (sign and thousands commas allowed, anything
  may follow), or None when there is none or it is malformed (`#### 1,23`)."""
  if not isinstance(text, str):
    raise TypeError(f"text must be a str, got {type(text).__name__}")
  match = _ANSWER.search(text)
  if match is None:
    return None
  sign, digits = match.groups()
  digits = digits.rstrip(",")  # "#### 12, which" ends the number at the comma.
  if "," in digits and not re.fullmatch(r"\d{1,3}(,\d{3})+", digits):
    return None
  value = int(digits.replace(",", ""))
  return -value if sign == "-" else value


def score(texts, problems_) -> float:
  """Exact-match accuracy: the fraction of `texts` (model completions, one per problem) whose
  `extract_answer` equals the problem's answer."""
  texts, problems_ = list(texts), list(problems_)
  if len(texts) != len(problems_):
    raise ValueError(f"got {len(texts)} texts for {len(problems_)} problems")
  if not problems_:
    raise ValueError("score needs at least one problem")
  return sum(extract_answer(t) == p.answer for t, p in zip(texts, problems_)) / len(problems_)


# ----------------------------------------------------------------------------------------------
# gsm-synth as a training corpus.


@dataclasses.dataclass(frozen=True)
class Corpus:
  """gsm-synth as a zoo training corpus (`jaxdec.corpus.Windows(gsm_synth.Corpus(...))`):
  documents are `Problem.text`, train from the 'train' split, validation from 'validation'; its
  tokenizer splits digits one by one."""

  difficulty: Difficulty = Difficulty()
  train_problems: int = 50_000
  validation_problems: int = 500
  seed: int = 0
  vocab_size: int = 1024

  name: ClassVar[str] = "gsm-synth"
  individual_digits: ClassVar[bool] = True

  def documents(self, split: str) -> list[str]:
    """The texts of 'train' or 'validation'."""
    if split not in ("train", "validation"):
      raise ValueError(f"split must be 'train' or 'validation', got {split!r}")
    return list(_documents(self, split))

  def key(self) -> str:
    """A fingerprint of the documents themselves, so caches follow any change of the generator."""
    digest = hashlib.sha1()
    for split in ("train", "validation"):
      for text in _documents(self, split):
        digest.update(text.encode() + b"\0")
    return digest.hexdigest()[:12]


@functools.lru_cache(maxsize=4)
def _documents(source: Corpus, split: str) -> tuple[str, ...]:
  n = source.train_problems if split == "train" else source.validation_problems
  return tuple(p.text for p in problems(split, n, source.seed, source.difficulty))


# ----------------------------------------------------------------------------------------------
# The templates: 50, of which 12 (held_out=True) only 'test-unseen-templates' uses. Each draw
# function records its steps in order through `d` and returns the numbers the text names.

# One step.

@_template("gift", "+", [
    "{name} has {a} {item}. {His} friend gives {him} {b} more {item}. How many {item} does {name} "
    "have now?",
    "{name} had {a} {item}, and then a friend gave {him} {b} more. How many {item} does {he} have "
    "now?",
    "A friend gives {name} {b} {item}. If {name} already had {a} {item}, how many {item} does {he} "
    "have now?"],
    "{name} had {a} {item} and got {b} more, so {he} has {a} + {b} = {c} {item} now.")
def _(d):
  d.person(), d.pick("item", TRINKETS)
  a, b = d.num(), d.num()
  return dict(a=a, b=b, c=d.add(a, b))


@_template("two-baskets", "+", [
    "One basket holds {a} {item} and another basket holds {b} {item}. How many {item} are in "
    "both baskets?",
    "There are {a} {item} in the first basket and {b} {item} in the second basket. How many "
    "{item} are there in all?"],
    "The two baskets hold {a} + {b} = {c} {item} in all.")
def _(d):
  d.pick("item", FRUIT)
  a, b = d.num(), d.num()
  return dict(a=a, b=b, c=d.add(a, b))


@_template("eat", "-", [
    "{name} baked {a} {item} and ate {b} of them. How many {item} are left?",
    "There were {a} {item} on a plate. {name} ate {b} of them. How many {item} are still on the "
    "plate?"],
    "{name} ate {b} of the {a} {item}, so {a} - {b} = {c} {item} are left.")
def _(d):
  d.person(), d.pick("item", BAKED)
  a = d.num(lo=3)
  b = d.num(hi=a - 1)
  return dict(a=a, b=b, c=d.sub(a, b))


@_template("bus-stop", "-", [
    "A bus is carrying {a} people. At the next stop, {b} people get off. How many people are "
    "still on the bus?",
    "There are {a} people on a bus. If {b} of them get off at a stop, how many people stay on "
    "the bus?"],
    "{b} of the {a} people get off, so {a} - {b} = {c} people are still on the bus.")
def _(d):
  a = d.num(lo=3)
  b = d.num(hi=a - 1)
  return dict(a=a, b=b, c=d.sub(a, b))


@_template("packs", "*", [
    "{name} buys {f} packs of {item}. Each pack has {a} {item}. How many {item} does {he} buy?",
    "A pack of {item} holds {a} {item}. How many {item} are in {f} packs?",
    "Each pack of {item} has {a} {item} in it, and {name} buys {f} packs. How many {item} does "
    "{he} get?"],
    "Each pack has {a} {item}, so {f} packs have {a} * {f} = {c} {item}.")
def _(d):
  d.person(), d.pick("item", TRINKETS)
  a, f = d.num(), d.factor()
  return dict(a=a, f=f, c=d.mul(a, f))


@_template("share", "/", [
    "{name} shares {a} {item} equally among {f} friends. How many {item} does each friend get?",
    "{f} friends split {a} {item} equally. How many {item} does each friend get?"],
    "{a} {item} shared by {f} friends is {a} / {f} = {c} {item} each.")
def _(d):
  d.person(), d.pick("item", BAKED)
  f = d.factor()
  a = d.multiple(f, lo=2 * f)
  return dict(a=a, f=f, c=d.div(a, f))


@_template("drive", "*", [
    "A car drives at {a} miles per hour for {f} hours. How many miles does it travel?",
    "{name} drives for {f} hours at a speed of {a} miles per hour. How many miles does {he} "
    "drive?"],
    "In {f} hours at {a} miles per hour, the car goes {a} * {f} = {c} miles.")
def _(d):
  d.person()
  a, f = d.num(), d.factor()
  return dict(a=a, f=f, c=d.mul(a, f))


@_template("savings", "+", [
    "{name} saved {a} dollars in May and {b} dollars in June. How many dollars did {he} save in "
    "the two months?",
    "In May {name} saved {a} dollars, and in June {he} saved {b} dollars. How many dollars did "
    "{he} save in total?"],
    "{name} saved {a} + {b} = {c} dollars in the two months.")
def _(d):
  d.person()
  a, b = d.num(), d.num()
  return dict(a=a, b=b, c=d.add(a, b))


@_template("taller", "-", [
    "A tree is {a} feet tall and a fence is {b} feet tall. How many feet taller is the tree than "
    "the fence?",
    "How many feet taller is a tree of {a} feet than a fence of {b} feet?"],
    "The tree is {a} - {b} = {c} feet taller than the fence.")
def _(d):
  a = d.num(lo=3)
  b = d.num(hi=a - 1)
  return dict(a=a, b=b, c=d.sub(a, b))


@_template("daily-pages", "/", [
    "{name} read a book of {a} pages in {f} days, reading the same number of pages each day. How "
    "many pages did {he} read each day?",
    "A book of {a} pages is read in {f} days, with the same number of pages every day. How many "
    "pages are read each day?"],
    "{a} pages over {f} days is {a} / {f} = {c} pages a day.")
def _(d):
  d.person()
  f = d.factor()
  a = d.multiple(f, lo=2 * f)
  return dict(a=a, f=f, c=d.div(a, f))


@_template("spend", "-", [
    "{name} had {a} dollars and spent {b} dollars on a {thing}. How many dollars does {he} have "
    "left?",
    "After buying a {thing} for {b} dollars, how many dollars does {name} have left if {he} "
    "started with {a} dollars?"],
    "{name} spent {b} of {his} {a} dollars, so {he} has {a} - {b} = {c} dollars left.")
def _(d):
  d.person(), d.pick("thing", THINGS)
  a = d.num(lo=3)
  b = d.num(hi=a - 1)
  return dict(a=a, b=b, c=d.sub(a, b))


@_template("garden-rows", "*", [
    "A garden has {f} rows of {item} with {a} plants in each row. How many plants are in the "
    "garden?",
    "{name} plants {f} rows of {item}. Each row has {a} plants. How many plants does {he} "
    "plant?"],
    "{f} rows of {a} plants make {a} * {f} = {c} plants.", held_out=True)
def _(d):
  d.person(), d.pick("item", PLANTS)
  a, f = d.num(), d.factor()
  return dict(a=a, f=f, c=d.mul(a, f))


@_template("teams", "/", [
    "A coach splits {a} players into {f} teams of the same size. How many players are on each "
    "team?",
    "{a} players are put into {f} equal teams. How many players does each team have?"],
    "{a} players in {f} equal teams is {a} / {f} = {c} players per team.", held_out=True)
def _(d):
  f = d.factor()
  a = d.multiple(f, lo=2 * f)
  return dict(a=a, f=f, c=d.div(a, f))


@_template("points", "+", [
    "{name} scored {a} points in the first game and {b} points in the second game. How many "
    "points did {he} score in both games?",
    "In two games, {name} scored {a} points and {b} points. How many points did {he} score in "
    "all?"],
    "{name} scored {a} + {b} = {c} points in both games.", held_out=True)
def _(d):
  d.person()
  a, b = d.num(), d.num()
  return dict(a=a, b=b, c=d.add(a, b))


# Two steps.

@_template("buy-change", "*-", [
    "{name} has {m} dollars. {He} buys {q} {item} that cost {p} dollars each. How many dollars "
    "does {he} have left?",
    "{Item} cost {p} dollars each. {name} buys {q} of them and pays from the {m} dollars {he} "
    "has. How many dollars are left?"],
    "{q} {item} cost {p} * {q} = {r1} dollars. {name} has {m} - {r1} = {r2} dollars left.")
def _(d):
  d.person(), d.pick("item", SUPPLIES)
  q = d.factor()
  p = d.num(hi=(d.max - 1) // q)
  r1 = d.mul(p, q)
  m = d.num(lo=r1 + 1)
  return dict(p=p, q=q, m=m, r1=r1, r2=d.sub(m, r1))


@_template("bake-sell", "*-", [
    "{name} bakes {f} trays of {item} with {a} {item} on each tray. {He} sells {b} of them. How "
    "many {item} are left?",
    "Each of the {f} trays that {name} bakes holds {a} {item}. If {he} sells {b} {item}, how "
    "many {item} are left?"],
    "{name} bakes {a} * {f} = {r1} {item}. After selling {b}, {r1} - {b} = {r2} {item} are left.")
def _(d):
  d.person(), d.pick("item", BAKED)
  a, f = d.num(), d.factor()
  r1 = d.mul(a, f)
  b = d.num(hi=r1 - 1)
  return dict(a=a, f=f, b=b, r1=r1, r2=d.sub(r1, b))


@_template("find-give", "+-", [
    "{name} has {a} {item}. {He} finds {b} more and then gives {c} to {name2}. How many {item} "
    "does {name} have now?",
    "{name} starts with {a} {item}, finds {b} more, and gives {c} of them to {name2}. How many "
    "{item} does {name} have left?"],
    "{name} has {a} + {b} = {r1} {item} after finding more. After giving {c} to {name2}, {he} "
    "has {r1} - {c} = {r2} {item}.")
def _(d):
  d.person(), d.person("2"), d.pick("item", TRINKETS)
  a, b = d.num(), d.num()
  r1 = d.add(a, b)
  c = d.num(hi=r1 - 1)
  return dict(a=a, b=b, c=c, r1=r1, r2=d.sub(r1, c))


@_template("reading-week", "*+", [
    "{name} reads {a} pages every day for {f} days. On the next day {he} reads {b} pages. How "
    "many pages does {he} read in all?",
    "For {f} days, {name} reads {a} pages a day, and then {he} reads {b} more pages. How many "
    "pages is that in total?"],
    "In {f} days {name} reads {a} * {f} = {r1} pages. Adding {b} pages gives {r1} + {b} = {r2} "
    "pages.")
def _(d):
  d.person()
  a, f, b = d.num(), d.factor(), d.num()
  r1 = d.mul(a, f)
  return dict(a=a, f=f, b=b, r1=r1, r2=d.add(r1, b))


@_template("bag-split", "+/", [
    "{name} picks {a} {item} in the morning and {b} {item} in the afternoon. {He} packs them "
    "equally into {f} bags. How many {item} go in each bag?",
    "{name} has {a} {item} and buys {b} more. {He} puts all of them into {f} bags with the same "
    "number in each bag. How many {item} are in each bag?"],
    "{name} has {a} + {b} = {r1} {item}. In {f} bags, that is {r1} / {f} = {r2} {item} per bag.")
def _(d):
  d.person(), d.pick("item", FRUIT)
  a, b, f = d.num(), d.num(), d.factor()
  r1 = d.add(a, b)
  return dict(a=a, b=b, f=f, r1=r1, r2=d.div(r1, f))


@_template("fewer", "-+", [
    "{name} has {a} {item}. {name2} has {b} fewer {item} than {name}. How many {item} do they "
    "have together?",
    "{name2} has {b} fewer {item} than {name}, and {name} has {a}. How many {item} do they have "
    "in total?"],
    "{name2} has {a} - {b} = {r1} {item}. Together they have {a} + {r1} = {r2} {item}.")
def _(d):
  d.person(), d.person("2"), d.pick("item", TRINKETS)
  a = d.num(lo=3)
  b = d.num(hi=a - 1)
  r1 = d.sub(a, b)
  return dict(a=a, b=b, r1=r1, r2=d.add(a, r1))


@_template("train-trip", "*+", [
    "A train travels at {a} miles per hour for {f} hours and then goes {b} more miles. How many "
    "miles does it travel in all?",
    "A train goes {b} miles after traveling for {f} hours at {a} miles per hour. How many miles "
    "does it travel in total?"],
    "In {f} hours the train goes {a} * {f} = {r1} miles. With {b} more miles, it travels "
    "{r1} + {b} = {r2} miles.")
def _(d):
  a, f, b = d.num(), d.factor(), d.num()
  r1 = d.mul(a, f)
  return dict(a=a, f=f, b=b, r1=r1, r2=d.add(r1, b))


@_template("split-bill", "+/", [
    "{f} friends share a meal that costs {a} dollars and a tip of {b} dollars equally. How many "
    "dollars does each friend pay?",
    "A dinner costs {a} dollars plus a tip of {b} dollars. If {f} friends split the total "
    "equally, how many dollars does each one pay?"],
    "The total is {a} + {b} = {r1} dollars, so each friend pays {r1} / {f} = {r2} dollars.")
def _(d):
  a, b, f = d.num(), d.num(), d.factor()
  r1 = d.add(a, b)
  return dict(a=a, b=b, f=f, r1=r1, r2=d.div(r1, f))


@_template("weekly-pay", "*-", [
    "{name} earns {a} dollars each week for {f} weeks. {He} spends {b} dollars. How many dollars "
    "does {he} have left?",
    "For {f} weeks, {name} earns {a} dollars a week, then spends {b} dollars on a {thing}. How "
    "many dollars does {he} have left?"],
    "{name} earns {a} * {f} = {r1} dollars. After spending {b}, {he} has {r1} - {b} = {r2} "
    "dollars.")
def _(d):
  d.person(), d.pick("thing", THINGS)
  a, f = d.num(), d.factor()
  r1 = d.mul(a, f)
  b = d.num(hi=r1 - 1)
  return dict(a=a, f=f, b=b, r1=r1, r2=d.sub(r1, b))


@_template("album", "/+", [
    "{name} puts {a} {item} equally on {f} pages of an album. Then {he} adds {b} more {item} to "
    "the first page. How many {item} are on the first page?",
    "{a} {item} are spread equally over {f} album pages, and {name} adds {b} more to the first "
    "page. How many {item} does the first page have now?"],
    "Each page gets {a} / {f} = {r1} {item}. The first page then has {r1} + {b} = {r2} {item}.")
def _(d):
  d.person(), d.pick("item", TRINKETS)
  f = d.factor()
  a = d.multiple(f, lo=2 * f)
  r1 = d.div(a, f)
  b = d.num()
  return dict(a=a, f=f, b=b, r1=r1, r2=d.add(r1, b))


@_template("two-days", "--", [
    "A shop has {a} {item}. It sells {b} of them on Monday and {c} on Tuesday. How many {item} "
    "are left?",
    "On Monday a shop sells {b} of its {a} {item}, and on Tuesday it sells {c} more. How many "
    "{item} does it have left?"],
    "After Monday the shop has {a} - {b} = {r1} {item}. After Tuesday it has {r1} - {c} = {r2} "
    "{item}.")
def _(d):
  d.pick("item", FRUIT)
  a = d.num(lo=5)
  b = d.num(hi=a - 3)
  r1 = d.sub(a, b)
  c = d.num(hi=r1 - 1)
  return dict(a=a, b=b, c=c, r1=r1, r2=d.sub(r1, c))


@_template("times-as-many", "*+", [
    "{name} has {a} {item}. {name2} has {f} times as many {item} as {name}. How many {item} do "
    "they have together?",
    "{name2} has {f} times as many {item} as {name}, who has {a}. How many {item} do the two of "
    "them have?"],
    "{name2} has {a} * {f} = {r1} {item}. Together they have {a} + {r1} = {r2} {item}.",
    held_out=True)
def _(d):
  d.person(), d.person("2"), d.pick("item", TRINKETS)
  a, f = d.num(), d.factor()
  r1 = d.mul(a, f)
  return dict(a=a, f=f, r1=r1, r2=d.add(a, r1))


@_template("egg-cartons", "/-", [
    "{name} packs {a} eggs into cartons of {f} eggs each. {He} sells {b} of the cartons. How "
    "many cartons does {he} have left?",
    "{name} has {a} eggs and puts them in cartons that hold {f} eggs each. After selling {b} "
    "cartons, how many cartons are left?"],
    "{a} eggs fill {a} / {f} = {r1} cartons. After selling {b}, {r1} - {b} = {r2} cartons are "
    "left.", held_out=True)
def _(d):
  d.person()
  f = d.factor()
  a = d.multiple(f, lo=3 * f)
  r1 = d.div(a, f)
  b = d.num(hi=r1 - 1)
  return dict(a=a, f=f, b=b, r1=r1, r2=d.sub(r1, b))


@_template("aunt-age", "+-", [
    "{name} is {a} years old, and {his} aunt is {b} years older. How old was the aunt {c} years "
    "ago?",
    "{name}'s aunt is {b} years older than {name}, who is {a}. How old was the aunt {c} years "
    "ago?"],
    "The aunt is {a} + {b} = {r1} years old. {c} years ago she was {r1} - {c} = {r2} years old.",
    held_out=True)
def _(d):
  d.person()
  a, b = d.num(), d.num()
  r1 = d.add(a, b)
  c = d.num(hi=r1 - 1)
  return dict(a=a, b=b, c=c, r1=r1, r2=d.sub(r1, c))


# Three steps.

@_template("two-items", "**+", [
    "{name} buys {q1} {item1} at {p1} dollars each and {q2} {item2} at {p2} dollars each. How "
    "many dollars does {he} spend?",
    "{Item1} cost {p1} dollars each and {item2} cost {p2} dollars each. {name} buys {q1} {item1} "
    "and {q2} {item2}. How many dollars does {he} spend in all?"],
    "The {item1} cost {p1} * {q1} = {r1} dollars and the {item2} cost {p2} * {q2} = {r2} dollars. "
    "In all {name} spends {r1} + {r2} = {r3} dollars.")
def _(d):
  d.person(), d.pick("item1", SUPPLIES), d.pick("item2", SUPPLIES)
  p1, q1, p2, q2 = d.num(), d.factor(), d.num(), d.factor()
  r1, r2 = d.mul(p1, q1), d.mul(p2, q2)
  return dict(p1=p1, q1=q1, p2=p2, q2=q2, r1=r1, r2=r2, r3=d.add(r1, r2))


@_template("bag-change", "*+-", [
    "{name} buys {q} {item} at {p} dollars each and a bag for {b} dollars. {He} pays with {m} "
    "dollars. How much change does {he} get?",
    "{Item} cost {p} dollars each and a bag costs {b} dollars. {name} buys {q} {item} and one "
    "bag, paying with {m} dollars. How many dollars of change does {he} get?"],
    "The {item} cost {p} * {q} = {r1} dollars. With the bag the total is {r1} + {b} = {r2} "
    "dollars, so the change is {m} - {r2} = {r3} dollars.")
def _(d):
  d.person(), d.pick("item", SUPPLIES)
  q = d.factor()
  p = d.num(hi=(d.max - 5) // q)
  r1 = d.mul(p, q)
  b = d.num(hi=d.max - 3 - r1)
  r2 = d.add(r1, b)
  m = d.num(lo=r2 + 1)
  return dict(p=p, q=q, b=b, m=m, r1=r1, r2=r2, r3=d.sub(m, r2))


@_template("library", "-++", [
    "A library has {a} books. It lends out {b} books, gets {c} books back, and buys {e} new books. "
    "How many books are on its shelves now?",
    "There are {a} books in a library. After {b} books are lent out, {c} are returned and {e} new "
    "ones are bought. How many books are on the shelves now?"],
    "After lending, the library has {a} - {b} = {r1} books. With {c} returned it has "
    "{r1} + {c} = {r2}, and with {e} new books it has {r2} + {e} = {r3} books.")
def _(d):
  a = d.num(lo=3)
  b = d.num(hi=a - 1)
  r1 = d.sub(a, b)
  c = d.num(hi=b)
  r2 = d.add(r1, c)
  e = d.num()
  return dict(a=a, b=b, c=c, e=e, r1=r1, r2=r2, r3=d.add(r2, e))


@_template("cookie-boxes", "*-/", [
    "{name} bakes {f} trays of {a} {item}. {He} eats {b} of them and packs the rest into boxes of "
    "{g}. How many boxes does {he} fill?",
    "Each of {name}'s {f} trays holds {a} {item}. After eating {b} of them, {he} puts the rest in "
    "boxes of {g}. How many boxes does {he} fill?"],
    "{name} bakes {a} * {f} = {r1} {item}. After eating {b} there are {r1} - {b} = {r2}, which "
    "fill {r2} / {g} = {r3} boxes.")
def _(d):
  d.person(), d.pick("item", BAKED)
  a, f = d.num(), d.factor()
  r1 = d.mul(a, f)
  b = d.num(hi=r1 - 2)
  r2 = d.sub(r1, b)
  g = d.factor()
  return dict(a=a, f=f, b=b, g=g, r1=r1, r2=r2, r3=d.div(r2, g))


@_template("bike-goal", "*+-", [
    "{name} wants a bike that costs {m} dollars. {He} has {a} dollars and saves {b} dollars a "
    "week for {f} weeks. How many more dollars does {he} need?",
    "A bike costs {m} dollars. {name} already has {a} dollars and saves {b} dollars each week for "
    "{f} weeks. How many more dollars does {he} need to buy the bike?"],
    "{name} saves {b} * {f} = {r1} dollars. With the {a} dollars {he} has, that is "
    "{a} + {r1} = {r2} dollars, so {he} needs {m} - {r2} = {r3} more dollars.")
def _(d):
  d.person()
  f = d.factor()
  b = d.num(hi=(d.max - 5) // f)
  r1 = d.mul(b, f)
  a = d.num(hi=d.max - 3 - r1)
  r2 = d.add(a, r1)
  m = d.num(lo=r2 + 1)
  return dict(a=a, b=b, f=f, m=m, r1=r1, r2=r2, r3=d.sub(m, r2))


@_template("class-groups", "+/+", [
    "A class of {a} girls and {b} boys is split into {f} equal groups. Then {c} new students join "
    "the first group. How many students are in the first group?",
    "{a} girls and {b} boys form {f} groups of the same size, and later {c} more students join "
    "the first group. How many students does the first group have?"],
    "There are {a} + {b} = {r1} students, so each group has {r1} / {f} = {r2}. With {c} new "
    "students the first group has {r2} + {c} = {r3}.")
def _(d):
  a, b, f = d.num(), d.num(), d.factor()
  r1 = d.add(a, b)
  r2 = d.div(r1, f)
  c = d.num()
  return dict(a=a, b=b, f=f, c=c, r1=r1, r2=r2, r3=d.add(r2, c))


@_template("fruit-stand", "*--", [
    "A fruit stand has {f} crates with {a} {item} in each. It sells {b} {item} in the morning and "
    "{c} in the afternoon. How many {item} are left?",
    "There are {a} {item} in each of the {f} crates at a fruit stand. If {b} {item} are sold in "
    "the morning and {c} in the afternoon, how many {item} are left?"],
    "The stand has {a} * {f} = {r1} {item}. After the morning it has {r1} - {b} = {r2}, and after "
    "the afternoon {r2} - {c} = {r3} {item}.")
def _(d):
  d.pick("item", FRUIT)
  a, f = d.num(), d.factor()
  r1 = d.mul(a, f)
  b = d.num(hi=r1 - 3)
  r2 = d.sub(r1, b)
  c = d.num(hi=r2 - 1)
  return dict(a=a, f=f, b=b, c=c, r1=r1, r2=r2, r3=d.sub(r2, c))


@_template("pizza", "*/-", [
    "{name} orders {f} pizzas with {a} slices each. The slices are shared equally by {g} people, "
    "and each person eats {b} slices at once. How many slices does each person have left?",
    "{f} pizzas are cut into {a} slices each and shared equally among {g} people. If each person "
    "eats {b} slices right away, how many slices does each one have left?"],
    "There are {a} * {f} = {r1} slices, so each person gets {r1} / {g} = {r2}. After eating {b}, "
    "each has {r2} - {b} = {r3} slices left.")
def _(d):
  d.person()
  a, f, g = d.num(), d.factor(), d.factor()
  r1 = d.mul(a, f)
  r2 = d.div(r1, g)
  b = d.num(hi=r2 - 1)
  return dict(a=a, f=f, g=g, b=b, r1=r1, r2=r2, r3=d.sub(r2, b))


@_template("trade-times", "-+*", [
    "{name} had {a} {item}. {He} gave {b} to {name2} and then bought {c} more. {name2}'s brother "
    "has {f} times as many {item} as {name} has now. How many {item} does the brother have?",
    "{name} gives {b} of {his} {a} {item} to {name2} and then buys {c} more. {name2}'s brother has "
    "{f} times as many {item} as {name} now has. How many {item} does the brother have?"],
    "{name} has {a} - {b} = {r1} {item} after giving some away and {r1} + {c} = {r2} after "
    "buying more. The brother has {r2} * {f} = {r3} {item}.")
def _(d):
  d.person(), d.person("2"), d.pick("item", TRINKETS)
  a = d.num(lo=3)
  b = d.num(hi=a - 1)
  r1 = d.sub(a, b)
  c, f = d.num(), d.factor()
  r2 = d.add(r1, c)
  return dict(a=a, b=b, c=c, f=f, r1=r1, r2=r2, r3=d.mul(r2, f))


@_template("farm-pens", "**+", [
    "A farm has {a} coops with {f} hens in each coop and {b} ponds with {g} ducks on each pond. "
    "How many birds are on the farm?",
    "On a farm there are {f} hens in each of {a} coops and {g} ducks on each of {b} ponds. How "
    "many birds does the farm have?"],
    "There are {a} * {f} = {r1} hens and {b} * {g} = {r2} ducks, so the farm has "
    "{r1} + {r2} = {r3} birds.", held_out=True)
def _(d):
  a, f, b, g = d.num(), d.factor(), d.num(), d.factor()
  r1, r2 = d.mul(a, f), d.mul(b, g)
  return dict(a=a, f=f, b=b, g=g, r1=r1, r2=r2, r3=d.add(r1, r2))


@_template("bus-route", "-+-", [
    "A bus leaves with {a} people. At the first stop {b} get off and {c} get on. At the second "
    "stop {e} get off. How many people are on the bus now?",
    "{a} people are on a bus. {b} people get off and {c} people get on at one stop, and then {e} "
    "people get off at the next stop. How many people are still on the bus?"],
    "After {b} get off there are {a} - {b} = {r1} people. After {c} get on there are "
    "{r1} + {c} = {r2}. After {e} get off there are {r2} - {e} = {r3} people.", held_out=True)
def _(d):
  a = d.num(lo=3)
  b = d.num(hi=a - 1)
  r1 = d.sub(a, b)
  c = d.num()
  r2 = d.add(r1, c)
  e = d.num(hi=r2 - 1)
  return dict(a=a, b=b, c=c, e=e, r1=r1, r2=r2, r3=d.sub(r2, e))


@_template("party", "+*-", [
    "At a party there are {a} boys and {b} girls. Each child gets {f} balloons, and {c} balloons "
    "pop. How many balloons are left?",
    "{a} boys and {b} girls come to a party, and every child is given {f} balloons. If {c} "
    "balloons pop, how many balloons are left?"],
    "There are {a} + {b} = {r1} children, who get {r1} * {f} = {r2} balloons. After {c} pop, "
    "{r2} - {c} = {r3} balloons are left.", held_out=True)
def _(d):
  a, b, f = d.num(), d.num(), d.factor()
  r1 = d.add(a, b)
  r2 = d.mul(r1, f)
  c = d.num(hi=r2 - 1)
  return dict(a=a, b=b, f=f, c=c, r1=r1, r2=r2, r3=d.sub(r2, c))


# Four steps.

@_template("piggy-bank", "+-+-", [
    "{name} has {a} dollars in a piggy bank. {He} puts in {b} dollars, spends {c} dollars on "
    "lunch, gets {e} dollars for {his} birthday, and spends {g} dollars on a {thing}. How many "
    "dollars does {he} have now?",
    "{name}'s piggy bank holds {a} dollars. {He} adds {b} dollars and takes out {c} for lunch. "
    "Then {he} is given {e} dollars and spends {g} dollars on a {thing}. How many dollars does "
    "{name} have left?"],
    "After adding {b}, {name} has {a} + {b} = {r1} dollars, and {r1} - {c} = {r2} after lunch. "
    "The birthday brings it to {r2} + {e} = {r3}, and the {thing} leaves {r3} - {g} = {r4} "
    "dollars.")
def _(d):
  d.person(), d.pick("thing", THINGS)
  a, b = d.num(), d.num()
  r1 = d.add(a, b)
  c = d.num(hi=r1 - 2)
  r2 = d.sub(r1, c)
  e = d.num()
  r3 = d.add(r2, e)
  g = d.num(hi=r3 - 2)
  return dict(a=a, b=b, c=c, e=e, g=g, r1=r1, r2=r2, r3=r3, r4=d.sub(r3, g))


@_template("shopping-change", "**+-", [
    "{name} buys {q1} {item1} at {p1} dollars each and {q2} {item2} at {p2} dollars each. {He} "
    "pays with {m} dollars. How much change does {he} get?",
    "{Item1} cost {p1} dollars and {item2} cost {p2} dollars. {name} buys {q1} {item1} and {q2} "
    "{item2} and pays with {m} dollars. How many dollars of change does {he} get?"],
    "The {item1} cost {p1} * {q1} = {r1} dollars and the {item2} cost {p2} * {q2} = {r2} dollars. "
    "Together that is {r1} + {r2} = {r3} dollars, so the change is {m} - {r3} = {r4} dollars.")
def _(d):
  d.person(), d.pick("item1", SUPPLIES), d.pick("item2", SUPPLIES)
  q1, q2 = d.factor(), d.factor()
  p1 = d.num(hi=(d.max - 5) // (2 * q1))
  r1 = d.mul(p1, q1)
  p2 = d.num(hi=(d.max - 3 - r1) // q2)
  r2 = d.mul(p2, q2)
  r3 = d.add(r1, r2)
  m = d.num(lo=r3 + 1)
  return dict(p1=p1, q1=q1, p2=p2, q2=q2, m=m, r1=r1, r2=r2, r3=r3, r4=d.sub(m, r3))


@_template("bake-share", "*+/-", [
    "{name} bakes {f} trays of {a} {item} and buys {b} more. {He} shares them equally among {g} "
    "friends, and each friend eats {c}. How many {item} does each friend have left?",
    "{name} makes {a} {item} on each of {f} trays and buys another {b}. The {item} are shared "
    "equally by {g} friends, who each eat {c}. How many {item} does each friend have left?"],
    "{name} bakes {a} * {f} = {r1} {item} and has {r1} + {b} = {r2} with the ones {he} buys. Each "
    "friend gets {r2} / {g} = {r3} and has {r3} - {c} = {r4} left after eating {c}.")
def _(d):
  d.person(), d.pick("item", BAKED)
  a, f, b, g = d.num(), d.factor(), d.num(), d.factor()
  r1 = d.mul(a, f)
  r2 = d.add(r1, b)
  r3 = d.div(r2, g)
  c = d.num(hi=r3 - 1)
  return dict(a=a, f=f, b=b, g=g, c=c, r1=r1, r2=r2, r3=r3, r4=d.sub(r3, c))


@_template("reading-plan", "*+-/", [
    "A book has {m} pages. {name} reads {a} pages a day for {f} days and {b} pages the next day. "
    "{He} reads the rest in {g} days, the same number each day. How many pages a day is that?",
    "{name} reads {a} pages a day for {f} days, then {b} pages on one more day, of a book of {m} "
    "pages. If {he} finishes the rest in {g} days with the same number of pages each day, how many "
    "pages does {he} read a day?"],
    "In {f} days {name} reads {a} * {f} = {r1} pages, and {r1} + {b} = {r2} pages with the next "
    "day. That leaves {m} - {r2} = {r3} pages, or {r3} / {g} = {r4} pages a day.")
def _(d):
  d.person()
  f, g = d.factor(), d.factor()
  a = d.num(hi=(d.max - 5) // f)
  r1 = d.mul(a, f)
  b = d.num(hi=d.max - 3 - r1)
  r2 = d.add(r1, b)
  m = d.num(lo=r2 + g)
  r3 = d.sub(m, r2)
  return dict(a=a, f=f, b=b, g=g, m=m, r1=r1, r2=r2, r3=r3, r4=d.div(r3, g))


@_template("stock", "*-*+", [
    "A shop gets {f} boxes of {a} {item}. It sells {b} of them. Then it gets {g} boxes of {c} "
    "{item}. How many {item} does the shop have now?",
    "A shop receives {f} boxes with {a} {item} in each and sells {b} {item}. Later {g} more boxes "
    "arrive with {c} {item} in each. How many {item} does the shop have?"],
    "The first boxes hold {a} * {f} = {r1} {item}, and {r1} - {b} = {r2} are left after the sale. "
    "The new boxes hold {c} * {g} = {r3}, so the shop has {r2} + {r3} = {r4} {item}.")
def _(d):
  d.pick("item", SUPPLIES)
  a, f = d.num(), d.factor()
  r1 = d.mul(a, f)
  b = d.num(hi=r1 - 1)
  r2 = d.sub(r1, b)
  c, g = d.num(), d.factor()
  r3 = d.mul(c, g)
  return dict(a=a, f=f, b=b, c=c, g=g, r1=r1, r2=r2, r3=r3, r4=d.add(r2, r3))


@_template("fundraiser", "**+/", [
    "At a fundraiser {name} sells {q1} cups of lemonade at {p1} dollars each and {q2} cakes at "
    "{p2} dollars each. {He} gives the money equally to {g} charities. How many dollars does each "
    "charity get?",
    "Lemonade costs {p1} dollars a cup and cakes cost {p2} dollars each. {name} sells {q1} cups "
    "and {q2} cakes and splits the money equally among {g} charities. How many dollars does each "
    "charity get?"],
    "The lemonade brings {p1} * {q1} = {r1} dollars and the cakes {p2} * {q2} = {r2} dollars, "
    "{r1} + {r2} = {r3} dollars in all. Each charity gets {r3} / {g} = {r4} dollars.")
def _(d):
  d.person()
  p1, q1, p2, q2, g = d.num(), d.factor(), d.num(), d.factor(), d.factor()
  r1, r2 = d.mul(p1, q1), d.mul(p2, q2)
  r3 = d.add(r1, r2)
  return dict(p1=p1, q1=q1, p2=p2, q2=q2, g=g, r1=r1, r2=r2, r3=r3, r4=d.div(r3, g))


@_template("cinema", "*+*-", [
    "A cinema has {f} rows of {a} seats and a balcony with {b} seats. It shows a film {g} times "
    "with every seat sold, and {c} tickets are refunded. How many tickets are kept?",
    "There are {a} seats in each of the {f} rows of a cinema, plus {b} seats on the balcony. All "
    "seats are sold for each of {g} shows, and {c} tickets are refunded. How many tickets are "
    "kept?"],
    "The rows have {a} * {f} = {r1} seats, so the cinema has {r1} + {b} = {r2}. Over {g} shows "
    "that is {r2} * {g} = {r3} tickets, and {r3} - {c} = {r4} are kept.")
def _(d):
  a, f, b, g = d.num(), d.factor(), d.num(), d.factor()
  r1 = d.mul(a, f)
  r2 = d.add(r1, b)
  r3 = d.mul(r2, g)
  c = d.num(hi=r3 - 1)
  return dict(a=a, f=f, b=b, g=g, c=c, r1=r1, r2=r2, r3=r3, r4=d.sub(r3, c))


@_template("flower-beds", "**+-", [
    "{name} plants {f} rows of {a} {item1} and {g} rows of {b} {item2}. {c} of the flowers do not "
    "bloom. How many flowers bloom?",
    "In {name}'s garden there are {f} rows with {a} {item1} each and {g} rows with {b} {item2} "
    "each. If {c} flowers do not bloom, how many flowers bloom?"],
    "There are {a} * {f} = {r1} {item1} and {b} * {g} = {r2} {item2}, {r1} + {r2} = {r3} flowers "
    "in all. Of them {r3} - {c} = {r4} bloom.", held_out=True)
def _(d):
  d.person(), d.pick("item1", FLOWERS), d.pick("item2", FLOWERS)
  a, f, b, g = d.num(), d.factor(), d.num(), d.factor()
  r1, r2 = d.mul(a, f), d.mul(b, g)
  r3 = d.add(r1, r2)
  c = d.num(hi=r3 - 1)
  return dict(a=a, f=f, b=b, g=g, c=c, r1=r1, r2=r2, r3=r3, r4=d.sub(r3, c))


@_template("game-scores", "+-*+", [
    "In a game {name} scores {a} points in round one and {b} points in round two, then loses {c} "
    "points. {name2} scores {f} times {name}'s final score. How many points do they have together?",
    "{name} gets {a} points and then {b} points, but loses {c} points. {name2} ends with {f} times "
    "as many points as {name}. How many points do the two of them have in all?"],
    "{name} has {a} + {b} = {r1} points and {r1} - {c} = {r2} after the loss. {name2} has "
    "{r2} * {f} = {r3}, so together they have {r2} + {r3} = {r4} points.", held_out=True)
def _(d):
  d.person(), d.person("2")
  a, b = d.num(), d.num()
  r1 = d.add(a, b)
  c = d.num(hi=r1 - 1)
  r2 = d.sub(r1, c)
  f = d.factor()
  r3 = d.mul(r2, f)
  return dict(a=a, b=b, c=c, f=f, r1=r1, r2=r2, r3=r3, r4=d.add(r2, r3))


@_template("elevator", "-+-+", [
    "An elevator starts with {a} people. On one floor {b} people get out and {c} get in. On the "
    "next floor {e} get out and {g} get in. How many people are in the elevator now?",
    "There are {a} people in an elevator. {b} leave and {c} enter at the first stop, then {e} "
    "leave and {g} enter at the second stop. How many people are in the elevator?"],
    "After the first floor there are {a} - {b} = {r1} people and then {r1} + {c} = {r2}. After "
    "the next floor there are {r2} - {e} = {r3} and then {r3} + {g} = {r4} people.",
    held_out=True)
def _(d):
  a = d.num(lo=4)
  b = d.num(hi=a - 2)
  r1 = d.sub(a, b)
  c = d.num()
  r2 = d.add(r1, c)
  e = d.num(hi=r2 - 2)
  r3 = d.sub(r2, e)
  g = d.num()
  return dict(a=a, b=b, c=c, e=e, g=g, r1=r1, r2=r2, r3=r3, r4=d.add(r3, g))
