"""gsm-synth: deterministic problems, disjoint splits, checkable scratchpads, exact answers, and a
tokenizer that splits digits one by one."""

import hashlib
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from jaxdec import corpus
from jaxdec.tasks import gsm_synth
from jaxdec.tasks.gsm_synth import Difficulty, extract_answer, problems


def _fingerprint(ps) -> str:
  return hashlib.sha256("\0".join(p.text for p in ps).encode()).hexdigest()


def test_same_seed_same_problems_in_this_and_another_process():
  first = problems("train", 60, seed=3)
  assert _fingerprint(first) == _fingerprint(problems("train", 60, seed=3))
  assert problems("train", 25, seed=3) == first[:25]  # A longer list extends a shorter one.
  assert _fingerprint(problems("train", 60, seed=4)) != _fingerprint(first)
  # The module alone (no jax import: fast), in processes whose str hashing is salted otherwise.
  code = ("import hashlib, importlib.util, sys\n"
          "spec = importlib.util.spec_from_file_location('gsm', sys.argv[1])\n"
          "gsm = sys.modules['gsm'] = importlib.util.module_from_spec(spec)\n"
          "spec.loader.exec_module(gsm)\n"
          "ps = gsm.problems('train', 60, seed=3)\n"
          "print(hashlib.sha256('\\0'.join(p.text for p in ps).encode()).hexdigest())")
  for hash_seed in ("0", "12345"):
    out = subprocess.run([sys.executable, "-c", code, gsm_synth.__file__], check=True,
                         capture_output=True, text=True,
                         env=dict(os.environ, PYTHONHASHSEED=hash_seed)).stdout.strip()
    assert out == _fingerprint(first)


def test_splits_are_disjoint_and_unseen_templates_are_never_trained_on():
  held_out = {t.name for t in gsm_synth.TEMPLATES.values() if t.held_out}
  assert len(gsm_synth.TEMPLATES) >= 40 and len(held_out) >= 8
  assert all(len(c.forms) >= 3 for c in gsm_synth.CLAUSES.values())
  assert all(len(s.openings) >= 3 and len(s.questions) >= 3 for s in gsm_synth.SCENARIOS.values())
  # A difficulty with few distinct questions (numbers 2..4, one addition): without the hash
  # split, 1500 train and 60 test draws would share questions.
  small = Difficulty(max_operand=4, max_steps=1, operations=("+",))
  split = {s: problems(s, n, seed=0, difficulty=small)
           for s, n in (("train", 1500), ("test", 60), ("validation", 60),
                        ("test-unseen-templates", 60))}
  questions = {s: {p.question for p in ps} for s, ps in split.items()}
  assert all(len(questions[s]) == len(split[s]) for s in split)  # Distinct within a split.
  for a in split:
    for b in split:
      if a < b:
        assert not questions[a] & questions[b], (a, b)
  # The same split under another seed is still disjoint from the others.
  other_seed = problems("test", 60, seed=1, difficulty=small)
  assert not {p.question for p in other_seed} & questions["train"]
  for difficulty in (small, Difficulty()):
    unseen = problems("test-unseen-templates", 200, seed=0, difficulty=difficulty)
    seen = problems("train", 400, seed=0, difficulty=difficulty) + problems("test", 200, seed=0,
                                                                            difficulty=difficulty)
    assert {p.template for p in unseen} <= held_out
    assert not {p.template for p in seen} & held_out
  assert {p.template for p in problems("test-unseen-templates", 400, seed=0)} == held_out


def _pattern(forms) -> str:
  """A regex alternative of `forms` (sentences with {slots})."""
  return "(?:" + "|".join(re.sub(r"\\\{\w+\\\}", ".+?", re.escape(f)) for f in forms) + ")"


def test_held_out_templates_are_new_combinations_of_trained_phrasings():
  train = [t for t in gsm_synth.TEMPLATES.values() if not t.held_out]
  held_out = [t for t in gsm_synth.TEMPLATES.values() if t.held_out]
  trained_forms = set().union(*(t.forms() for t in train))
  trained = {(t.scenario.name, t.ops, tuple(c.name for c in t.clauses)) for t in train}
  for t in held_out:
    assert t.forms() <= trained_forms, (t.name, t.forms() - trained_forms)
    assert (t.scenario.name, t.ops, tuple(c.name for c in t.clauses)) not in trained, t.name
  # A problem's question and long-form answer are exactly its template's forms, in order: an
  # opening, one form per clause, the question (unless the last clause asks it).
  for split in ("train", "test-unseen-templates"):
    for p in problems(split, 200, seed=5):
      t = gsm_synth.TEMPLATES[p.template]
      parts = [t.scenario.openings] + [c.forms for c in t.clauses]
      parts += [] if t.clauses[-1].asks else [t.scenario.questions]
      assert re.fullmatch(" ".join(map(_pattern, parts)), p.question), p.question
      explanation = p.solution.split("</think>\n")[1].rsplit("\n#### ", 1)[0]
      assert re.fullmatch(" ".join(_pattern([c.explain]) for c in t.clauses), explanation)


_HEADER = re.compile(r"(\d+)([-+*/])(\d+)")
_PLAN = re.compile(r"plan: (\d+)((?: [-+*/]\d+| \d+-| \+before)+)")
_COLUMN = {
    "+": re.compile(r"(\d+)\+(\d+):(\d)\+(\d)\+(\d)=(\d+)->(\d+)"),
    "-": re.compile(r"(\d+)-(\d+):(1?)(\d)-(\d)-(\d)=(\d)->(\d+)"),
    "*": re.compile(r"(\d+)\*(\d):(\d)\*(\d)=(\d+)\+(\d)=(\d+)->(\d+)"),
    "/": re.compile(r"(\d+)/(\d) r(\d):(\d+)/(\d)=(\d) (\d+)-(\d+)=(\d)->(\d+)"),
}
_APPLY = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
          "/": lambda a, b: a // b}


def _check_block(lines: list[str]) -> tuple[int, str, int, int]:
  """Recompute one step's scratchpad lines: header, digit lines, optional carry line, result."""
  a, op, b = _HEADER.fullmatch(lines[0]).groups()
  final = re.fullmatch(rf"{a}{re.escape(op)}{b}=(\d+)", lines[-1])
  assert final, lines[-1]
  a_, b_, result = int(a), int(b), int(final.group(1))
  assert result == _APPLY[op](a_, b_) and (op != "/" or a_ % b_ == 0) and (op != "-" or a_ > b_)
  width = max(len(a), len(b))
  carry, acc = 0, ""
  body = lines[1:-1]
  if op in "+-":
    top, bottom = a.zfill(width), b.zfill(width)
    assert len(body) - (body[-1].startswith("carry ")) == width
    for k, line in zip(range(width, 0, -1), body):
      m = _COLUMN[op].fullmatch(line)
      assert m, line
      if op == "+":
        A, B, x, y, c, s, new = m.groups()
        s = int(s)
        assert (A, B) == (top[:k], bottom[:k]) and (x, y) == (A[-1], B[-1]) and int(c) == carry
        assert s == int(x) + int(y) + carry
        acc, carry = str(s % 10) + acc, s // 10
      else:
        A, B, lent, x, y, c, z, new = m.groups()
        assert (A, B) == (top[:k], bottom[:k]) and (x, y) == (A[-1], B[-1]) and int(c) == carry
        assert bool(lent) == (int(x) - int(y) - carry < 0)
        assert int(z) == int(lent + x) - int(y) - carry
        acc, carry = z + acc, int(bool(lent))
      assert new == acc
  elif op == "*":
    assert len(body) - (body[-1].startswith("carry ")) == len(a)
    for k, line in zip(range(len(a), 0, -1), body):
      A, f, x, f2, product, c, p, new = _COLUMN[op].fullmatch(line).groups()
      assert A == a[:k] and x == A[-1] and f == f2 == b and int(c) == carry
      assert int(product) == int(x) * int(f) and int(p) == int(product) + carry
      acc, carry = str(int(p) % 10) + acc, int(p) // 10
      assert new == acc
  else:
    assert len(body) == len(a)
    rem = 0
    for k, line in enumerate(body):
      rest, d, r, lead, d2, q, lead2, taken, r2, new = _COLUMN[op].fullmatch(line).groups()
      assert rest == a[k:] and d == d2 == b and int(r) == rem
      assert int(lead) == 10 * rem + int(rest[0]) and lead2 == lead
      assert int(taken) == int(q) * int(d) and int(r2) == int(lead) - int(taken)
      assert (int(q), int(r2)) == divmod(int(lead), int(d))
      acc, rem = acc + q, int(r2)
      assert new == acc
    assert rem == 0
  if body and body[-1].startswith("carry "):
    c, new = re.fullmatch(r"carry (\d)->(\d+)", body[-1]).groups()
    assert int(c) == carry != 0 and new == c + acc
    acc, carry = new, 0
  assert carry == 0 and int(acc) == result
  return a_, op, b_, result


def _check_plan(line: str, problem):
  """The plan line names each step's operation and new number, in the question's order."""
  start, entries = _PLAN.fullmatch(line).groups()
  entries = entries.split()
  assert len(entries) == len(problem.steps)
  asked = [int(n) for n in re.findall(r"\d+", problem.question)]
  values, numbers = [int(start)], [int(start)]
  for entry, step in zip(entries, problem.steps):
    if entry == "+before":  # The step adds back the result before the previous step.
      assert step.back and (step.a, step.op, step.b) == (values[-1], "+", values[-2])
      values.append(step.result)
      continue
    assert not step.back
    if entry.endswith("-"):  # The step takes the result so far from the new number.
      n = int(entry[:-1])
      assert (step.a, step.op, step.b) == (n, "-", values[-1])
    else:
      n = int(entry[1:])
      assert (step.a, step.op, step.b) == (values[-1], entry[0], n)
    assert n in asked or n in values  # A number of the question, or one computed before.
    numbers.append(n)
    values.append(step.result)
  plan = iter(numbers)
  assert all(n in plan for n in asked)  # Every number of the question, in its order.


def _check(problem):
  assert problem.prompt == f"Question: {problem.question}\n<think>\n"
  scratch, rest = problem.solution.split("\n</think>\n")
  explanation, answer = rest.rsplit("\n#### ", 1)
  assert int(answer) == problem.answer == problem.steps[-1].result
  assert extract_answer(problem.solution) == problem.answer
  assert scratch == gsm_synth.scratchpad(problem.steps)
  lines = scratch.split("\n")
  _check_plan(lines[0], problem)
  starts = [i for i, line in enumerate(lines) if _HEADER.fullmatch(line)]
  assert starts[0] == 1 and len(starts) == len(problem.steps)
  known = {int(n) for n in re.findall(r"\d+", problem.question)}
  previous = lines[0].split()[1:]  # The plan, then each rest line: a number and entries.
  for k, (step, i, j) in enumerate(zip(problem.steps, starts, starts[1:] + [len(lines) + 1])):
    a, op, b, result = _check_block(lines[i:j - 1])
    assert (a, op, b, result) == (step.a, step.op, step.b, step.result)
    assert a in known and b in known  # Each operand is given or was computed before.
    known.add(result)
    if k + 1 < len(problem.steps):  # The next step opens with the result and the entries left,
      rest = [str(result), *previous[2:]]  # `+before` as the line before's first number.
      if problem.steps[k + 1].back:
        assert rest[1] == "+before"
        rest[1] = "+" + previous[0]
      assert lines[j - 1] == " ".join(["rest:", *rest])
      previous = rest
  # The long form restates true equations only, and every step's.
  said = {(int(x), op, int(y), int(z))
          for x, op, y, z in re.findall(r"(\d+) ([-+*/]) (\d+) = (\d+)", explanation)}
  assert all(z == _APPLY[op](x, y) for x, op, y, z in said)
  assert {(s.a, s.op, s.b, s.result) for s in problem.steps} <= said


@pytest.mark.parametrize("split", ["train", "test", "test-unseen-templates"])
def test_every_scratchpad_line_and_answer_is_correct(split):
  ps = problems(split, 500, seed=1, difficulty=Difficulty(max_operand=999))
  for p in ps:
    _check(p)
  assert {p.template for p in ps} == {t.name for t in gsm_synth.templates(split)}  # All drawn.
  assert {op for p in ps for s in p.steps for op in s.op} == set("+-*/")
  # Borrows, final carries and multi-digit long division all occur.
  assert any(re.search(r":1\d-", p.solution) for p in ps)
  assert any("\ncarry " in p.solution for p in ps)
  assert any(re.search(r" r[1-9]:", p.solution) for p in ps)


def test_the_difficulty_knobs_are_respected():
  for difficulty in (Difficulty(max_operand=20, max_steps=2), Difficulty(min_steps=3),
                     Difficulty(max_operand=500, operations=("+", "-")),
                     Difficulty(max_factor=4, operations=("*", "/", "+"))):
    ps = problems("train", 150, seed=0, difficulty=difficulty)
    ps += problems("test-unseen-templates", 50, seed=0, difficulty=difficulty)
    for p in ps:
      _check(p)
      assert max(int(n) for n in re.findall(r"\d+", p.question)) <= difficulty.max_operand
      assert difficulty.min_steps <= len(p.steps) <= difficulty.max_steps
      assert {s.op for s in p.steps} <= set(difficulty.operations)
      assert all(s.b <= difficulty.max_factor for s in p.steps if s.op in "*/")
    assert max(len(p.steps) for p in ps) == difficulty.max_steps
    assert min(len(p.steps) for p in ps) == difficulty.min_steps
  assert max(int(n) for p in problems("train", 200, seed=0, difficulty=Difficulty(max_operand=500))
             for n in re.findall(r"\d+", p.question)) > 99


def test_bad_arguments_are_named():
  with pytest.raises(ValueError, match="split must be one of"):
    problems("dev", 3)
  with pytest.raises(ValueError, match="n must be an int >= 0, got -1"):
    problems("train", -1)
  with pytest.raises(TypeError, match="difficulty must be a Difficulty"):
    problems("train", 3, difficulty={"max_operand": 9})
  with pytest.raises(ValueError, match="max_steps <= 4, got min_steps=1, max_steps=5"):
    Difficulty(max_steps=5)
  with pytest.raises(ValueError, match="max_factor must be in"):
    Difficulty(max_factor=12)
  with pytest.raises(ValueError, match="operations must be a non-empty tuple"):
    Difficulty(operations=("^",))
  with pytest.raises(ValueError, match="no train template fits"):
    problems("train", 3, difficulty=Difficulty(min_steps=4, operations=("+",)))
  with pytest.raises(ValueError, match="no test-unseen-templates template can draw a problem"):
    problems("test-unseen-templates", 3, difficulty=Difficulty(max_operand=3,
                                                                 operations=("/",)))
  # Numbers up to 9 leave too few to sell, share and then eat some: that template drops out.
  tiny = {p.template for p in problems("train", 400, difficulty=Difficulty(max_operand=9))}
  assert tiny == {t.name for t in gsm_synth.templates("train")} - {"baker:sell-share-eat"}
  with pytest.raises(ValueError, match="steps are not a chain"):
    gsm_synth.scratchpad([gsm_synth.Step(2, "+", 3, 5), gsm_synth.Step(7, "*", 2, 14)])


def test_extract_answer_on_well_formed_and_malformed_text():
  assert extract_answer("so 84 in all.\n#### 84") == 84
  assert extract_answer("#### 84\nQuestion: Mia has 3 cards.\n#### 7") == 84  # The first one.
  assert extract_answer("####84") == 84
  assert extract_answer("#### 12. The end") == 12
  assert extract_answer("#### 12, which is") == 12
  assert extract_answer("#### -5") == -5
  assert extract_answer("#### 1,234") == 1234
  assert extract_answer("#### -12,345,678") == -12345678
  assert extract_answer("#### 007") == 7
  for bad in ("the answer is 84", "#### ", "####", "#### abc 12", "#### 1,23", "#### 12,34,567",
              "### 84", ""):
    assert extract_answer(bad) is None, bad
  with pytest.raises(TypeError, match="text must be a str"):
    extract_answer(None)


def test_first_error_names_the_first_line_a_completion_gets_wrong():
  p = next(p for p in problems("test", 50, seed=3) if len(p.steps) == 2 and "carry" in p.solution)
  lines = p.solution.split("\n")
  assert gsm_synth.first_error(p.solution, p) is None
  def broken(i, line):
    return gsm_synth.first_error("\n".join(lines[:i] + [line] + lines[i + 1:]), p)
  kinds = {}
  for i, line in enumerate(lines):
    kind, at = broken(i, line + "7")
    assert at == i
    kinds.setdefault(kind, line)
  assert set(kinds) == {"plan", "rest", "header", "digit", "carry", "result",
                        "end of scratchpad", "long form", "answer"}, kinds
  assert kinds["rest"].startswith("rest: ") and kinds["answer"].startswith("#### ")
  assert gsm_synth.first_error("\n".join(lines[:3]), p) == ("too short", 3)


def test_score_is_exact_match_accuracy():
  ps = problems("test", 4, seed=0)
  texts = [p.solution for p in ps]
  assert gsm_synth.score(texts, ps) == 1.0
  texts[1] = texts[1].rsplit("####", 1)[0] + f"#### {ps[1].answer + 1}"
  texts[2] = "no answer"
  assert gsm_synth.score(texts, ps) == 0.5
  with pytest.raises(ValueError, match="got 3 texts for 4 problems"):
    gsm_synth.score(texts[:3], ps)


@pytest.fixture(scope="module")
def tokenizer():
  from jaxdec.train.tokenizer import train_bpe

  return train_bpe([p.text for p in problems("train", 400, seed=0)], 512, individual_digits=True)


def test_tokenizer_splits_digits_one_by_one_and_round_trips(tokenizer):
  from jaxdec.train.tokenizer import train_bpe

  texts = [p.text for split in ("test", "test-unseen-templates")
           for p in problems(split, 50, seed=2, difficulty=Difficulty(max_operand=999))]
  texts += ["1234567890 + 00 = 42, then -7!", "héllo wörld 3½\n\t"]
  for text in texts:
    ids = tokenizer.encode(text, add_bos=False)
    assert tokenizer.decode(ids) == text
    pieces = [tokenizer.backend.id_to_token(i) for i in ids]
    assert all(sum(ch.isdigit() for ch in piece) <= 1 for piece in pieces)
    assert sum(piece.isdigit() for piece in pieces) == sum(ch.isdigit() for ch in text)
  # Without the rule, BPE on the same text learns multi-digit tokens.
  plain = train_bpe([p.text for p in problems("train", 400, seed=0)], 512)
  assert any(sum(ch.isdigit() for ch in t) > 1 for t in plain.backend.get_vocab())


def test_zoo_tokenizer_and_token_stream_of_the_gsm_corpus(tmp_path, monkeypatch):
  from jaxdec.train.zoo import zoo_tokenizer

  monkeypatch.setenv("JAXDEC_DATA_DIR", str(tmp_path))
  source = gsm_synth.Corpus(train_problems=300, validation_problems=20, vocab_size=400)
  assert corpus.source_of(corpus.Windows(source)) is source
  assert corpus.source_of(None) is corpus.STDLIB
  tok = zoo_tokenizer(source=source)
  assert (tok.pad_id, tok.bos_id, tok.eos_id, tok.mask_id) == (0, 1, 2, 3)
  assert os.listdir(tmp_path) == [f"tokenizer-{source.key()}-400.json"]
  assert zoo_tokenizer(source=source).backend.to_str() == tok.backend.to_str()  # From the cache.
  assert all(len(tok.backend.id_to_token(i)) == 1
             for i in tok.encode("Mia has 48137 stickers.") if tok.decode([i]).isdigit())
  stream = corpus.token_stream("validation", tok, source)
  assert stream.dtype == np.int32 and stream[0] == tok.bos_id
  assert (stream == tok.bos_id).sum() == (stream == tok.eos_id).sum() == 20
  assert tok.decode(stream) == "".join(source.documents("validation"))
  # The cache key follows the documents.
  other = gsm_synth.Corpus(difficulty=Difficulty(max_operand=50), train_problems=300,
                           validation_problems=20, vocab_size=400)
  assert other.key() != source.key()


@pytest.mark.parametrize("eos_block", [None, 32])
def test_packed_rows_hold_whole_problems_and_score_their_solutions(tmp_path, monkeypatch,
                                                                  eos_block):
  """Rows are whole [BOS] prompt solution [EOS] documents (with eos_block, the EOS repeated to a
  multiple of the block after the prompt); the scored tokens are exactly the solutions and their
  EOS; the prompt is tokenized as at inference."""
  from jaxdec.train.zoo import zoo_tokenizer

  monkeypatch.setenv("JAXDEC_DATA_DIR", str(tmp_path))
  source = gsm_synth.Corpus(train_problems=60, validation_problems=4, vocab_size=400)
  tok = zoo_tokenizer(source=source)
  rows = corpus.Packed(source, 1024, eos_block=eos_block).build(None, tokenizer=tok)
  assert len(rows.tokens) < 60 / 2
  texts = {p + s for p, s in source.examples("train")}
  starts = []
  for tokens, scored in zip(rows.tokens, rows.scored):
    bos = list(np.flatnonzero(tokens == tok.bos_id)) + [int((tokens != tok.pad_id).sum())]
    for a, b in zip(bos, bos[1:]):
      doc, mask = tokens[a:b], scored[a:b]
      ends = np.flatnonzero(doc == tok.eos_id)
      assert tok.decode(doc) in texts and ends[-1] == len(doc) - 1
      assert (ends == np.arange(ends[0], len(doc))).all()  # One EOS run, at the end.
      prompt = tok.decode(doc[~mask])
      assert tok.encode(prompt) == list(doc[~mask]) and mask[len(tok.encode(prompt)):].all()
      if eos_block:
        assert mask.sum() % eos_block == 0 and len(ends) <= eos_block
      else:
        assert len(ends) == 1
      starts.append(tok.decode(doc))
    assert not scored[tokens == tok.pad_id].any()
  assert sorted(starts) == sorted(texts)
  validation = corpus.Packed(source, 1024, eos_block=eos_block).validation(tok, 1)
  assert validation.tokens.shape == (1, 1024) and validation.scored.any()
  row = validation.tokens[0]
  bos = list(np.flatnonzero(row == tok.bos_id)) + [int((row != tok.pad_id).sum())]
  assert {tok.decode(row[a:b]) for a, b in zip(bos, bos[1:])} <= set(source.documents("validation"))
  with pytest.raises(ValueError, match="eos_block must be None or an int >= 1, got 0"):
    corpus.Packed(source, 512, eos_block=0)
  with pytest.raises(TypeError, match="needs a source with examples"):
    corpus.Packed(corpus.STDLIB, 512)


def test_gsm_recipes_train_on_the_task_corpus():
  from jaxdec import configs

  ar, draft, dlm = (configs.load_config(f"zoo:gsm-{n}") for n in ("ar", "draft", "dlm"))
  for cfg in (ar, draft, dlm):
    source = corpus.source_of(cfg.data)
    assert isinstance(source, gsm_synth.Corpus) and source == corpus.source_of(ar.data)
    assert cfg.model.vocab_size == source.vocab_size
    assert cfg.seq_len <= cfg.model.max_position_embeddings
  assert draft.model.num_params * 8 < ar.model.num_params
  assert dlm.init_from == "zoo:gsm-ar" and not dlm.model.is_causal and dlm.model.tokens.mask == 3
