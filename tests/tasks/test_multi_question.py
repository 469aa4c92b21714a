import pytest

from jaxdec.tasks import gsm_synth


def test_each_query_continues_the_context_into_a_regular_problem():
  stories = gsm_synth.multi_question("test", 3, 4, seed=0)
  assert len(stories) == 3 and len({s.context for s in stories}) == 3
  for story in stories:
    assert story.context.startswith("Question: ") and len(story.queries) == 4
    assert len(set(story.queries)) > 1  # Independent questions, not copies.
    for query, problem in zip(story.queries, story.problems):
      assert story.context + query == problem.prompt
      assert query.endswith("\n<think>\n")
      assert problem.answer == problem.steps[-1].result
      assert gsm_synth.extract_answer(problem.solution) == problem.answer


def test_deterministic_and_seeded():
  a = gsm_synth.multi_question("train", 2, 3, seed=1)
  assert a == gsm_synth.multi_question("train", 2, 3, seed=1)
  assert a != gsm_synth.multi_question("train", 2, 3, seed=2)


def test_bad_inputs():
  with pytest.raises(ValueError, match="split"):
    gsm_synth.multi_question("nope", 1, 2)
  with pytest.raises(ValueError, match="n must be"):
    gsm_synth.multi_question("test", 0, 2)
  with pytest.raises(ValueError, match="k must be"):
    gsm_synth.multi_question("test", 1, 0)
