"""gsm-synth: templated grade-school word problems with a digit-by-digit scratchpad and an exact
answer, the task on which diffusion decoders show speed *and* accuracy.

A problem is a question (people, objects, shops, rates; 1 to 4 steps of +, -, x by one small
factor, exact / by one small divisor), then a `<think>` scratchpad, `</think>`, a long-form
answer that restates the reasoning in sentences, and `#### N`:

  Question: Folders cost 14 dollars each at the shop where Max goes. He takes 2 of them. He adds
  a hat that costs 33 dollars. He pays with 65 dollars. How many dollars of change does he get?
  <think>
  plan: 14 *2 +33 65-
  14*2
  14*2:4*2=8+0=8->8
  1*2:1*2=2+0=2->28
  14*2=28
  rest: 28 +33 65-
  28+33
  28+33:8+3+0=11->1
  2+3:2+3+1=6->61
  28+33=61
  rest: 61 65-
  65-61
  65-61:5-1-0=4->4
  6-6:6-6-0=0->04
  65-61=4
  </think>
  2 of them cost 14 * 2 = 28 dollars. The hat makes it 28 + 33 = 61. The change is 65 - 61 = 4.
  #### 4

(the question is one line; `Problem.prompt` ends after `<think>` and a newline).

Questions are composed from shared parts. A scenario (a person with marbles, a baker's trays, a
shop, a bus, a reader, a shopper, ...) gives the opening sentence with the first number, the
words it counts and the question. Every later number comes with a clause of some kind (gets
more, gives away, sells, N times as many, shares equally among N friends, keeps this up for N
days, pays with N dollars, ...), and a kind has the same few phrasings in every template that
uses it. A template is a scenario and an ordered list of 1 to 4 clauses; each step works on the
result so far and one new number (a chain; "how many do they have together" adds back the
result before the last clause). Why: when each template had its own wording, a model trained on
`train` met the held-out templates' phrasings for the first time at test, and solved 1% of them
by reciting some training template instead of reading the question. Composed questions let a
model learn what each phrasing means, and every held-out template is a new combination of a
scenario and a clause order whose every phrasing also occurs in training, so
'test-unseen-templates' measures whether a model reads the question rather than recalls one.

Scratchpad format. A 3M-parameter model that wrote one equation per line ("198 / 9 = 22") learned
every template and got the arithmetic wrong; small models compute reliably only when each token
follows from a few tokens at fixed places nearby. So the first line is a plan: `plan:`, the first
number, then one entry per step in the question's order, its operation and new number (`*2`,
`+33`), the new number and `-` (`65-`) when the step takes the result so far from it (change
from a payment, what is still needed), or `+before` when it adds back the result before the
previous step (two people together: a number the plan cannot know yet). Every step after the
first opens with a `rest:` line, the result so far and the plan's entries still to do (a
`+before` made the first number of the line before it), so that each step's operands are the
first two entries of the line just above; a plan whose k-th entry had to be found by counting
was where a 4.7M-parameter model miscopied most. A step is a header line `A op B`, then one line
per digit that restates what it still needs, then `A op B=C`:
- `+` and `-`: both operands zero-padded to one width; a line restates the digits not yet used
  (so the column's digits are the last ones before `+` / `:`), then the column, least-significant
  first: `x+y+carry=s` (carry: the previous line's tens digit), or `x-y-borrow=z`, written
  `1x-y-borrow=z` when it borrows ten (the next line's borrow is then 1). After `->` comes the
  result so far: the new digit, then a copy of the previous line's result.
- `*` by a factor 2..9: `x*f=p+carry=p'` the same way, the product and the carry's sum written
  apart (one fact at a time: `8*9+4=74` in one go was the commonest wrong line); a carry left
  after the last digit gets a `carry c->...` line.
- `/` (exact, by 2..9): long division, most significant digit first,
  `rest/d rR:lead/d=q lead-q*d=R'->quotient so far`, where `lead` is the remainder R then the
  first digit of `rest`, and the new remainder R' is a written subtraction (`13-12=1`).
Every line can be checked on its own (the tests parse and recompute each one). Most tokens are
copies (restated digits, results so far, the long-form answer), the predictable text on which
parallel decoders commit many tokens per forward.

`problems(split, n, seed, difficulty)` is deterministic (hashlib-seeded, no salted `hash()`):
the same arguments give the same problems in every process, and a longer list extends a shorter
one. Splits: `train` and `validation` and `test` use the training templates and are disjoint by
a SHA-256 of the question text; `test-unseen-templates` uses only the held-out templates, which
no other split (and no tokenizer or model trained on `train`) ever sees as a whole.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import random
import re
from typing import ClassVar

SPLITS = ("train", "validation", "test", "test-unseen-templates")
# Tokens the zoo decodes per problem, whole diffusion blocks of 32: above the longest solution at
# the default difficulty (425 tokens with EOS in the zoo tokenizer over 50k train problems).
GEN_LENGTH = 448
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
  """One arithmetic step of a solution: `a op b = result`. `back`: `b` is not a number of the
  question but the result before the previous step (two people's counts added together)."""

  a: int
  op: str
  b: int
  result: int
  back: bool = False


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
    lines.append(f"{digits[:k]}*{f}:{x}*{f}={x * f}+{carry}={p}->{acc}")
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
    lines.append(f"{digits[k:]}/{d} r{rem}:{lead}/{d}={q} {lead}-{q * d}={new_rem}->{acc}")
    rem = new_rem
  return lines + [f"{a}/{d}={a // d}"]


_LINES = {"+": _add_lines, "-": _sub_lines, "*": _mul_lines, "/": _div_lines}


def _plan_entries(steps) -> list[str]:
  """The first number of a chain of `steps`, then per step its operation and new number (`+77`),
  `50-` for a step that takes the result so far from a new number (change from a payment), or
  `+before` for one that adds back the result before the previous step (a number the plan cannot
  know yet: the `rest:` line that opens the step states it)."""
  if not steps:
    raise ValueError("a plan needs at least one step")
  entries, running = [str(steps[0].a)], steps[0].a
  for s in steps:
    if s.back:
      entries.append("+before")
    elif s.a == running:
      entries.append(f"{s.op}{s.b}")
    elif s.op == "-" and s.b == running:
      entries.append(f"{s.a}-")
    else:
      raise ValueError(f"steps are not a chain: {s} does not use the result so far, {running}")
    running = s.result
  return entries


def plan_line(steps) -> str:
  """The scratchpad's first line for a chain of `steps` (each step works on the result of the one
  before): `plan:`, the first number, then one entry per step (`_plan_entries`)."""
  return "plan: " + " ".join(_plan_entries(steps))


def scratchpad(steps) -> str:
  """The scratchpad of a chain of `steps` (`Step`s): the plan line, then each step's lines, each
  step after the first opened by a `rest:` line (the result so far and the plan entries still to
  do), joined by newlines (no `<think>` tags)."""
  entries = _plan_entries(steps)
  lines = [plan_line(steps)]
  for k, s in enumerate(steps):
    if k:
      if s.back:  # The result before the previous step opened the line before: the plan or a rest.
        entries[k + 1] = f"+{s.b}"
      lines.append(" ".join(["rest:", str(steps[k - 1].result), *entries[k + 1:]]))
    lines += _LINES[s.op](s.a, s.b)
  return "\n".join(lines)


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
ANIMALS = ("hens", "ducks", "goats", "sheep", "rabbits")
SNACKS = ("muffins", "sandwiches", "juices", "bagels", "teas")
THINGS = ("book", "game", "hat", "lamp", "backpack", "scarf")
TREATS = ("cookie", "salad", "soup", "cake", "smoothie")


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
    self._used: set[str] = set()

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
    """A small factor of the question."""
    return self.rng.randint(2, min(self.difficulty.max_factor, self.max))

  def divisor(self, a: int) -> int:
    """A small divisor of the question that divides `a` into at least 2."""
    top = min(self.difficulty.max_factor, self.max)
    options = [f for f in range(2, top + 1) if a % f == 0 and a // f >= 2]
    if not options:
      raise _Retry
    return self.rng.choice(options)

  def fork(self) -> _Draw:
    """A draw that goes on from this one (same rng, a copy of its steps and used words), so that
    several continuations of one opening neither share steps nor names."""
    d = _Draw(self.rng, self.difficulty)
    d.steps, d._used = list(self.steps), set(self._used)
    return d

  def _step(self, a: int, op: str, b: int, result: int) -> int:
    self.steps.append(Step(a, op, b, result))
    return result

  def add(self, a: int, b: int, back: bool = False) -> int:
    self.steps.append(Step(a, "+", b, a + b, back))
    return a + b

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

  def person(self) -> tuple[str, str, str, str]:
    """A person not used yet in this problem: name, he, his, him."""
    name, kind = self.rng.choice([p for p in _PEOPLE if p[0] not in self._used])
    self._used.add(name)
    return (name, *_PRONOUNS[kind])

  def pick(self, pool: tuple[str, ...]) -> str:
    """A word of `pool` not used yet in this problem."""
    word = self.rng.choice([w for w in pool if w not in self._used])
    self._used.add(word)
    return word


# ----------------------------------------------------------------------------------------------
# Composing a question from a scenario and shared clauses.


@dataclasses.dataclass(frozen=True)
class Clause:
  """A kind of event, phrased the same way in every template that has it: one step on the result
  so far `x` with one new number `n` of the question. `rule` is the step: '+', '-', '*', '/'
  (x op n), 'from' (n - x: change from a payment, what is still needed) or 'both' (x plus the
  result before the previous clause: two people together; `n` is not in the text). `forms` are
  its sentences (slots: {n}; {he}, {his}, {him}: who has the result so far; {item}; {other}: a new
  person; {thing}; the scenario's words), `explain` its sentence of the long-form answer ({x},
  {n} and the result {r}). After it the result belongs to `holder` ('other' for the new person)
  and counts `unit`, when they are set. `asks`: its forms are questions, asked instead of the
  scenario's (so it comes last)."""

  name: str
  rule: str
  forms: tuple[str, ...]
  explain: str
  holder: str | None = None
  unit: str | None = None
  asks: bool = False

  @property
  def op(self) -> str:
    return {"from": "-", "both": "+"}.get(self.rule, self.rule)


@dataclasses.dataclass(frozen=True)
class Scenario:
  """Who or what a problem is about: `openings` state its first number {n}, `questions` ask for
  the result, `items` are what it counts. `subject` (first mention, he, his, him) when it is not
  a new person; `first`: the clause every template of it starts with (a rate, `reads {n} pages a
  day`, needs `for {n} days`); `words`: its slots in the shared clauses; `things` for {thing}."""

  name: str
  openings: tuple[str, ...]
  questions: tuple[str, ...]
  items: tuple[str, ...]
  subject: tuple[str, str, str, str] | None = None
  first: str | None = None
  words: tuple[tuple[str, str], ...] = ()
  things: tuple[str, ...] = THINGS


@dataclasses.dataclass(frozen=True)
class Template:
  """One kind of problem: a scenario and the clauses of its steps, in order."""

  scenario: Scenario
  clauses: tuple[Clause, ...]
  held_out: bool = False

  @property
  def name(self) -> str:
    return f"{self.scenario.name}:{'-'.join(c.name for c in self.clauses)}"

  @property
  def ops(self) -> str:
    """The operations of its steps, in order ("*-": a product, then a difference)."""
    return "".join(c.op for c in self.clauses)

  def forms(self) -> set[str]:
    """Every surface form (a sentence with slots) its problems can use."""
    forms = set(self.scenario.openings)
    if not self.clauses[-1].asks:
      forms |= set(self.scenario.questions)
    for clause in self.clauses:
      forms |= set(clause.forms) | {clause.explain}
    return forms


CLAUSES: dict[str, Clause] = {}
SCENARIOS: dict[str, Scenario] = {}
TEMPLATES: dict[str, Template] = {}


def _clause(name: str, rule: str, forms, explain: str, **options):
  CLAUSES[name] = Clause(name, rule, tuple(forms), explain, **options)


def _scenario(name: str, items, openings, questions, **options):
  SCENARIOS[name] = Scenario(name, tuple(openings), tuple(questions), tuple(items), **options)


def _templates(table: str, held_out: bool = False):
  """Registers one template per line of `table`: `scenario: clause clause ...`."""
  openers = {s.first for s in SCENARIOS.values()} - {None}
  for line in filter(None, map(str.strip, table.splitlines())):
    scenario, clauses = line.split(":")
    t = Template(SCENARIOS[scenario], tuple(CLAUSES[c] for c in clauses.split()), held_out)
    first, *rest = [c.name for c in t.clauses]
    opens = first == t.scenario.first if t.scenario.first else first not in openers
    if (not 1 <= len(t.clauses) <= 4 or t.name in TEMPLATES or not opens or openers & set(rest)
        or t.clauses[0].rule in ("from", "both") or any(c.asks for c in t.clauses[:-1])):
      raise ValueError(f"bad template {line!r}")
    TEMPLATES[t.name] = t


def templates(split: str, difficulty: Difficulty = Difficulty()) -> list[Template]:
  """The templates a split draws from at a difficulty (held-out ones only for
  'test-unseen-templates', never for the others)."""
  if split not in SPLITS:
    raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
  unseen = split == "test-unseen-templates"
  return [t for t in TEMPLATES.values() if t.held_out == unseen
          and difficulty.min_steps <= len(t.ops) <= difficulty.max_steps
          and set(t.ops) <= set(difficulty.operations)]


def _step(d: _Draw, rule: str, x: int, before: int) -> tuple[int, int]:
  """A clause's new number and the result of its step on `x` (`before`: the result before)."""
  if rule == "both":
    return before, d.add(x, before, back=True)
  if rule == "from":
    n = d.num(lo=x + 2)
    return n, d.sub(n, x)
  n = {"+": d.num, "-": lambda: d.num(hi=x - 2), "*": d.factor, "/": lambda: d.divisor(x)}[rule]()
  return n, {"+": d.add, "-": d.sub, "*": d.mul, "/": d.div}[rule](x, n)


def _open(scenario: Scenario, d: _Draw) -> tuple[_Slots, int, str]:
  """A scenario's opening: its slots (person, item, words), first number and opening sentence."""
  name, he, his, him = scenario.subject or d.person()
  slots = _Slots(scenario.words, name=name, he=he, his=his, him=him, item=d.pick(scenario.items))
  x = d.num()
  return slots, x, d.rng.choice(scenario.openings).format_map(_Slots(slots, n=x))


def _continue(template: Template, d: _Draw, slots: _Slots, x: int) -> tuple[str, str]:
  """The clauses and question sentence that follow an opening (`slots`, first number `x`; both
  updated as the clauses go), and the long-form answer (its steps go to `d.steps`)."""
  sentences, explained, before = [], [], x
  for clause in template.clauses:
    other, thing = d.person()[0], d.pick(template.scenario.things)
    n, r = _step(d, clause.rule, x, before)
    here = _Slots(slots, other=other, thing=thing, n=n, x=x, r=r)
    sentences.append(d.rng.choice(clause.forms).format_map(here))
    explained.append(clause.explain.format_map(here))
    holder = other if clause.holder == "other" else clause.holder
    if holder:
      slots.update(he=holder, his=f"{holder}'s", him=holder)
    slots["item"] = clause.unit or slots["item"]
    before, x = x, r
  if not template.clauses[-1].asks:
    sentences.append(d.rng.choice(template.scenario.questions).format_map(slots))
  return " ".join(sentences), " ".join(explained)


def _compose(template: Template, d: _Draw) -> tuple[str, str]:
  """The question and the long-form answer of one draw (its steps go to `d.steps`)."""
  slots, x, opening = _open(template.scenario, d)
  rest, explanation = _continue(template, d, slots, x)
  return f"{opening} {rest}", explanation


def _problem(template: Template, question: str, explanation: str, steps) -> Problem:
  answer = steps[-1].result
  prompt = f"Question: {question}\n<think>\n"
  solution = f"{scratchpad(steps)}\n</think>\n{explanation}\n#### {answer}"
  return Problem(question, prompt, solution, answer, template.name, tuple(steps))


def _render(template: Template, rng: random.Random, difficulty: Difficulty) -> Problem | None:
  """A problem of `template`, or None when no draw in _ATTEMPTS meets its constraints (a
  difficulty too small for it: numbers up to 9 leave too few to sell, share and eat some)."""
  for _ in range(_ATTEMPTS):
    d = _Draw(rng, difficulty)
    try:
      question, explanation = _compose(template, d)
    except _Retry:
      continue
    return _problem(template, question, explanation, d.steps)
  return None


def _bucket(question: str) -> int:
  return int.from_bytes(hashlib.sha256(question.encode()).digest()[:8], "big") % 100


def problems(split: str, n: int, seed: int = 0,
             difficulty: Difficulty = Difficulty()) -> list[Problem]:
  """`n` distinct problems of `split` ('train', 'validation', 'test' or
  'test-unseen-templates'), a pure function of (split, seed, difficulty): the first k of
  `problems(split, n, seed)` are `problems(split, k, seed)`. Templates are drawn uniformly from
  `templates(split, difficulty)`, less any whose constraints the difficulty cannot meet (below
  max_operand=10 a few)."""
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
# Stories: one opening, many questions (a testbed for decoding many queries of one context).


@dataclasses.dataclass(frozen=True)
class Story:
  """One shared opening and k questions that continue it: `context + queries[j]` is
  `problems[j].prompt`, so the context can be prefilled once for all k queries."""

  context: str
  queries: tuple[str, ...]
  problems: tuple[Problem, ...]


@functools.lru_cache(maxsize=None)
def _drawable(template: Template, difficulty: Difficulty) -> bool:
  """Whether `_render` finds a draw of `template` at `difficulty` (a fixed probe, so that it
  does not move any split's random stream)."""
  return _render(template, random.Random(0), difficulty) is not None


def _follow(template: Template, opened: _Draw, slots: _Slots, x: int,
            opening: str) -> tuple[str, Problem] | None:
  """A continuation of an opening (its draw, slots, first number, sentence) by `template`: the
  text after the opening and its problem, or None when no draw in _ATTEMPTS fits this opening."""
  for _ in range(_ATTEMPTS):
    d = opened.fork()
    try:
      rest, explanation = _continue(template, d, _Slots(slots), x)
    except _Retry:
      continue
    return rest, _problem(template, f"{opening} {rest}", explanation, d.steps)
  return None


def multi_question(split: str, n: int, k: int, seed: int = 0,
                   difficulty: Difficulty = Difficulty()) -> list[Story]:
  """`n` stories of `k` questions each: one scenario opening (person, item, first number), then
  k independent continuations by templates of that scenario (distinct ones while the scenario
  has enough), each a regular problem whose prompt is the story's context + its query. A pure
  function of (split, n, k, seed, difficulty). Templates come from `templates(split, ...)`, so
  'test-unseen-templates' stays held out; contexts are distinct and split by the same hash
  buckets as `problems` (of the context, not of each question)."""
  if split not in SPLITS:
    raise ValueError(f"split must be one of {SPLITS}, got {split!r}")
  for name, value in (("n", n), ("k", k)):
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
      raise ValueError(f"{name} must be an int >= 1, got {value!r}")
  if not isinstance(seed, int) or isinstance(seed, bool):
    raise TypeError(f"seed must be an int, got {seed!r}")
  if not isinstance(difficulty, Difficulty):
    raise TypeError(f"difficulty must be a Difficulty, got {type(difficulty).__name__}")
  groups: dict[str, list[Template]] = {}
  for t in templates(split, difficulty):
    if _drawable(t, difficulty):
      groups.setdefault(t.scenario.name, []).append(t)
  if not groups:
    raise ValueError(f"no {split} template can draw a problem at {difficulty}")
  lo, hi = _BUCKETS.get(split, (0, 100))
  digest = hashlib.sha256(f"gsm-synth/multi/{split}/{seed}".encode()).digest()
  rng = random.Random(int.from_bytes(digest, "big"))
  out, seen = [], set()
  for _ in range(200 * n + 1000):
    if len(out) == n:
      return out
    group = groups[rng.choice(sorted(groups))]
    order = rng.sample(group, len(group))
    d = _Draw(rng, difficulty)
    slots, x, opening = _open(group[0].scenario, d)
    context = f"Question: {opening}"
    if context in seen or not lo <= _bucket(context) < hi:
      continue
    follows = [_follow(order[j % len(order)], d, slots, x, opening) for j in range(k)]
    if None in follows:  # This first number is too small for one of the templates.
      continue
    seen.add(context)
    out.append(Story(context, tuple(f" {rest}\n<think>\n" for rest, _ in follows),
                     tuple(p for _, p in follows)))
  if len(out) < n:
    raise ValueError(f"found only {len(out)} distinct {split} stories of {n} at {difficulty}")
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


_LINE_KINDS = (("plan", re.compile(r"plan: .*")), ("rest", re.compile(r"rest: .*")),
               ("header", re.compile(r"\d+[-+*/]\d+")), ("result", re.compile(r"\d+[-+*/]\d+=\d+")),
               ("digit", re.compile(r".*:.*->\d+")), ("carry", re.compile(r"carry \d->\d+")),
               ("end of scratchpad", re.compile(r"</think>")), ("answer", re.compile(r"#### .*")))


def first_error(completion: str, problem: Problem) -> tuple[str, int] | None:
  """Where a completion first leaves the reference solution: (the kind of the reference line it
  gets wrong, its line number), or None when it writes the reference exactly. Kinds: 'plan',
  'rest', 'header', 'digit', 'carry', 'result', 'end of scratchpad', 'long form', 'answer', or
  'too short' when the completion stops early. Every solution is a deterministic function of its
  question, so the first difference is where a model went wrong."""
  produced, reference = completion.split("\n"), problem.solution.split("\n")
  for i, line in enumerate(reference):
    if i >= len(produced):
      return "too short", i
    if produced[i] != line:
      kind = next((k for k, pattern in _LINE_KINDS if pattern.fullmatch(line)), "long form")
      return kind, i
  return None


# ----------------------------------------------------------------------------------------------
# gsm-synth as a training corpus.


@dataclasses.dataclass(frozen=True)
class Corpus:
  """gsm-synth as a zoo training corpus (`jaxdec.corpus.Packed(gsm_synth.Corpus(...), seq_len)`,
  or `Windows`): documents are `Problem.text`, examples (prompt, solution) pairs, train from the
  'train' split, validation from 'validation'; its tokenizer splits digits one by one."""

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
    return [prompt + solution for prompt, solution in _examples(self, split)]

  def examples(self, split: str) -> list[tuple[str, str]]:
    """(`Problem.prompt`, `Problem.solution`) of 'train' or 'validation'."""
    if split not in ("train", "validation"):
      raise ValueError(f"split must be 'train' or 'validation', got {split!r}")
    return list(_examples(self, split))

  def key(self) -> str:
    """A fingerprint of the documents themselves, so caches follow any change of the generator."""
    digest = hashlib.sha1()
    for split in ("train", "validation"):
      for text in self.documents(split):
        digest.update(text.encode() + b"\0")
    return digest.hexdigest()[:12]


@functools.lru_cache(maxsize=4)
def _examples(source: Corpus, split: str) -> tuple[tuple[str, str], ...]:
  n = source.train_problems if split == "train" else source.validation_problems
  return tuple((p.prompt, p.solution) for p in problems(split, n, source.seed, source.difficulty))


# ----------------------------------------------------------------------------------------------
# The clauses: every template that has a clause phrases it with the same forms.

_clause("get", "+", ["{other} gives {him} {n} more {item}.",
                     "Then {he} gets {n} more {item} from {other}.",
                     "{other} hands {him} another {n} {item}."],
        "{other} gives {n}, so {x} + {n} = {r}.")
_clause("buy", "+", ["{He} buys {n} more {item}.", "Then {he} buys another {n} {item}.",
                     "After that {he} buys {n} {item} more."],
        "Buying {n} makes {x} + {n} = {r}.")
_clause("find", "+", ["{He} finds {n} more {item}.", "Then {he} finds another {n} {item}.",
                      "Later {he} finds {n} {item} more."],
        "Finding {n} makes {x} + {n} = {r}.")
_clause("extra", "+", ["Then {he} {verb} another {n} {item}.",
                       "After that {he} {verb} {n} more {item}.",
                       "{He} also {verb} {n} extra {item}."],
        "{n} more makes {x} + {n} = {r}.")
_clause("arrive", "+", ["Then {n} more {item} come.", "Later {n} more {item} arrive.",
                        "Soon {n} new {item} join."],
        "{n} come, so {x} + {n} = {r}.")
_clause("fee", "+", ["{He} also buys a {thing} for {n} dollars.", "A {thing} adds {n} dollars.",
                     "{He} adds a {thing} that costs {n} dollars."],
        "The {thing} makes it {x} + {n} = {r}.")
_clause("give", "-", ["{He} gives {n} {item} to {other}.",
                      "Then {he} gives {n} of them to {other}.",
                      "{He} hands {n} {item} to {other}."],
        "Giving {n} away leaves {x} - {n} = {r}.")
_clause("lose", "-", ["{He} loses {n} {item}.", "Then {he} loses {n} of them.",
                      "Sadly, {he} loses {n} {item}."],
        "Losing {n} leaves {x} - {n} = {r}.")
_clause("eat", "-", ["{He} eats {n} of them.", "Then {he} eats {n} {item}.",
                     "Later {he} eats {n} of the {item}."],
        "Eating {n} leaves {x} - {n} = {r}.")
_clause("sell", "-", ["{He} sells {n} {item}.", "Then {he} sells {n} of them.",
                      "Later {he} sells {n} of the {item}."],
        "Selling {n} leaves {x} - {n} = {r}.")
_clause("leave", "-", ["Then {n} {item} leave.", "Later {n} of the {item} go away.",
                       "After that {n} {item} leave."],
        "{n} leave, so {x} - {n} = {r}.")
_clause("spend", "-", ["{He} spends {n} dollars on a {thing}.",
                       "Then {he} pays {n} dollars for a {thing}.",
                       "{He} buys a {thing} for {n} dollars."],
        "The {thing} leaves {x} - {n} = {r}.")
_clause("coupon", "-", ["A coupon takes {n} dollars off.",
                        "{He} uses a coupon for {n} dollars off.",
                        "{He} gets {n} dollars off with a coupon."],
        "The coupon leaves {x} - {n} = {r}.")
_clause("more", "+", ["{other} has {n} more {item} than {he} has now.",
                      "{other} owns {n} more {item} than {he} does.",
                      "{other} collects {n} {item} more than that."],
        "{other} has {x} + {n} = {r}.", holder="other")
_clause("fewer", "-", ["{other} has {n} fewer {item} than {he} has now.",
                       "{other} owns {n} fewer {item} than {he} does.",
                       "{other} collects {n} {item} fewer than that."],
        "{other} has {x} - {n} = {r}.", holder="other")
_clause("times", "*", ["{other} has {n} times as many {item} as {he} has now.",
                       "{other} owns {n} times as many {item} as {he} does.",
                       "{other} collects {n} times that many {item}."],
        "{other} has {x} * {n} = {r}.", holder="other")
_clause("for", "*", ["{He} keeps this up for {n} {periods}.", "This goes on for {n} {periods}.",
                     "{He} does this for {n} {periods}."],
        "In {n} {periods} that is {x} * {n} = {r}.")
_clause("boxes", "*", ["{He} fills {n} {boxes} like that.", "There are {n} such {boxes}.",
                       "{He} has {n} {boxes} like this."],
        "{n} {boxes} hold {x} * {n} = {r}.")
_clause("buys", "*", ["{He} buys {n} of them.", "{He} takes {n} of them.",
                      "{He} gets {n} of them."],
        "{n} of them cost {x} * {n} = {r} dollars.", unit="dollars")
_clause("share", "/", ["{He} shares them equally among {n} friends.",
                       "{He} splits them evenly between {n} friends.",
                       "{He} gives them out to {n} friends, the same number to each."],
        "Each friend gets {x} / {n} = {r}.", holder="each friend")
_clause("split", "/", ["{n} friends split the cost equally.",
                       "The cost is shared equally by {n} friends.",
                       "{He} splits the cost equally among {n} friends."],
        "Each friend pays {x} / {n} = {r}.", holder="each friend")
_clause("together", "both", ["How many {item} do they have together?",
                             "How many {item} do the two of them have in all?",
                             "Together, how many {item} do they have?"],
        "Together they have {x} + {n} = {r}.", asks=True)
_clause("change", "from", ["If {he} pays with {n} dollars, how much change does {he} get?",
                           "{He} pays with {n} dollars. How many dollars of change does {he} get?",
                           "How much change does {he} get from {n} dollars?"],
        "The change is {n} - {x} = {r}.", asks=True)
_clause("goal", "from", ["How many more {item} does {he} need to reach {n}?",
                         "{He} wants {n} {item} in all. How many more does {he} need?",
                         "If the goal is {n} {item}, how many more {item} does {he} need?"],
        "{He} still needs {n} - {x} = {r}.", asks=True)

# ----------------------------------------------------------------------------------------------
# The scenarios: who has the result, what it counts, how it starts and what is asked.

_HAVE = ("How many {item} does {he} have now?", "How many {item} does {he} have in the end?",
         "In the end, how many {item} does {he} have?")
_TOTAL = ("How many {item} does {he} {act} in all?", "In all, how many {item} does {he} {act}?",
          "How many {item} is that in total?")
_PAY = ("How many dollars does {he} pay in all?", "In all, how many dollars does {he} pay?",
        "How many dollars does {he} spend?")

_scenario("collector", TRINKETS, ["{Name} has {n} {item}.", "{Name} collects {n} {item}.",
                                  "{Name} keeps {n} {item} in a box."], _HAVE)
_scenario("baker", BAKED, ["{Name} bakes {n} {item}.", "{Name} has a tray of {n} {item}.",
                           "There are {n} {item} in {name}'s kitchen."], _HAVE)
_scenario("picker", FRUIT, ["{Name} picks {n} {item}.", "{Name} has a basket of {n} {item}.",
                            "{Name} brings {n} {item} home."], _HAVE)
_scenario("savings", ("dollars",), ["{Name} has {n} {item} saved.", "{Name} has saved {n} {item}.",
                                    "{Name}'s piggy bank holds {n} {item}."], _HAVE)
_scenario("shop", SUPPLIES, ["{Name} has {n} {item}.", "{Name} has {n} {item} in stock.",
                             "There are {n} {item} in {name}."], _HAVE,
          subject=("a shop", "the shop", "its", "it"))
_scenario("farm", ANIMALS, ["{Name} has {n} {item}.", "There are {n} {item} on {name}.",
                            "{Name} keeps {n} {item}."], _HAVE,
          subject=("a farm", "the farm", "its", "it"))
_scenario("bus", ("people", "passengers", "children"),
          ["{Name} leaves with {n} {item}.", "There are {n} {item} on {name}.",
           "{Name} carries {n} {item}."],
          ["How many {item} are on the bus now?", "How many {item} does the bus carry now?",
           "In the end, how many {item} are on the bus?"],
          subject=("a bus", "the bus", "its", "it"))
_scenario("party", ("guests", "children", "dancers"),
          ["There are {n} {item} at {name}.", "{Name} starts with {n} {item}.",
           "{n} {item} come to {name}."],
          ["How many {item} are at the party now?", "How many {item} are still at the party?",
           "In the end, how many {item} are at the party?"],
          subject=("a party", "the party", "its", "it"))
_scenario("reader", ("pages",), ["{Name} reads {n} {item} a day.",
                                 "Every day {name} reads {n} {item}.",
                                 "{Name} reads {n} {item} each day."], _TOTAL,
          first="for", words=(("periods", "days"), ("verb", "reads"), ("act", "read")))
_scenario("driver", ("miles",), ["{Name} drives {n} {item} an hour.",
                                 "Every hour {name} drives {n} {item}.",
                                 "{Name} drives {n} {item} each hour."], _TOTAL,
          first="for", words=(("periods", "hours"), ("verb", "drives"), ("act", "drive")))
_scenario("earner", ("dollars",), ["{Name} earns {n} {item} a week.",
                                   "Every week {name} earns {n} {item}.",
                                   "{Name} is paid {n} {item} each week."], _HAVE,
          first="for", words=(("periods", "weeks"), ("verb", "earns")))
_scenario("trays", BAKED, ["{Name} bakes {n} {item} on each tray.",
                           "Each tray that {name} bakes holds {n} {item}.",
                           "{Name} puts {n} {item} on every tray."], _HAVE,
          first="boxes", words=(("boxes", "trays"),))
_scenario("crates", FRUIT, ["{Name} gets crates with {n} {item} in each.",
                            "Each crate at {name} holds {n} {item}.",
                            "{Name} packs {n} {item} in every crate."], _HAVE,
          subject=("a market stall", "the stall", "its", "it"), first="boxes",
          words=(("boxes", "crates"),))
_scenario("garden", FLOWERS + PLANTS, ["{Name} plants {n} {item} in each row.",
                                       "Each row in {name}'s garden has {n} {item}.",
                                       "{Name} grows {n} {item} in every row."], _HAVE,
          first="boxes", words=(("boxes", "rows"),))
_scenario("shopper", SUPPLIES, ["{Name} sees {item} that cost {n} dollars each.",
                                "At a shop, {name} finds {item} for {n} dollars each.",
                                "{Item} cost {n} dollars each at the shop where {name} goes."],
          _PAY, first="buys")
_scenario("cafe", SNACKS, ["{Name} is at a cafe where {item} cost {n} dollars each.",
                           "At a cafe, {name} sees {item} for {n} dollars each.",
                           "{Item} cost {n} dollars each at the cafe {name} visits."],
          _PAY, first="buys", things=TREATS)

# ----------------------------------------------------------------------------------------------
# The templates: 48 train, 12 held out (only 'test-unseen-templates' draws them). Every held-out
# one is a new combination of a scenario and an order of clauses whose every phrasing some
# training template also has.

_templates("""
collector: get
picker: buy
baker: eat
bus: leave
trays: boxes
driver: for
baker: share
savings: spend
party: arrive
shop: sell
collector: get give
collector: times together
savings: fewer together
picker: eat share
baker: buy share
bus: leave arrive
farm: buy sell
savings: find spend
reader: for extra
earner: for spend
driver: for goal
crates: boxes sell
shopper: buys change
cafe: buys fee
garden: boxes give
shop: buy lose
collector: find give share
picker: get eat sell
baker: sell share eat
party: arrive leave arrive
savings: get spend goal
earner: for spend share
reader: for extra goal
shopper: buys fee change
cafe: buys coupon split
trays: boxes buy share
collector: lose more together
farm: sell arrive leave
crates: boxes lose sell
collector: give lose times together
bus: leave arrive leave arrive
earner: for extra spend share
shopper: buys fee coupon change
picker: buy eat share eat
savings: find spend lose goal
trays: boxes eat share give
trays: boxes buy share get
garden: boxes sell give share
""")
_templates("""
savings: find
crates: boxes
picker: share
shop: buy sell
collector: fewer together
earner: for goal
baker: eat share
party: leave arrive leave
cafe: buys fee change
trays: boxes buy share eat
savings: lose spend times together
driver: for extra goal
""", held_out=True)
