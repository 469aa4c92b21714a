"""`jaxdec bench blocks` end to end on the zoo's block-causal models, at a toy size."""

import json

import pytest

from jaxdec.bench import blocks

SIMSD = "SimSD, draft k=8, threshold 0.9"
FLOWBLOCK = "FlowBlock 2 blocks, gate 1.0, 0.9 / T2T 0.5"
VERIFIED_FLOWBLOCK = "FlowBlock 2 blocks, gate 1.0, 0.7 / argmax edits, verified"


@pytest.mark.slow  # each row's method has its own exactness test
def test_rows_bring_what_they_are_compared_with(tmp_path, capsys):
  out = tmp_path / "blocks.json"
  record = blocks.run(num_prompts=3, timed_prompts=1, gen_length=64, repeats=1,
                      names=[SIMSD, FLOWBLOCK, VERIFIED_FLOWBLOCK], out=str(out))
  rows = {r["method"]: r for r in record["rows"]}
  # The baseline always runs; FlowBlock brings serial editing, which brings threshold-only.
  assert list(rows) == [blocks.BASELINE, blocks.THRESHOLD, blocks.EDITING, FLOWBLOCK,
                        blocks.VERIFIED, VERIFIED_FLOWBLOCK, SIMSD]
  base = rows[blocks.BASELINE]
  assert base["same as baseline"] == 1.0 and base["speedup"] == 1.0
  # SimSD and the verified editing rules are lossless: the baseline's tokens, several per forward.
  for name in (SIMSD, blocks.VERIFIED, VERIFIED_FLOWBLOCK):
    assert rows[name]["same as baseline"] == 1.0 and rows[name]["accuracy"] == base["accuracy"]
    assert rows[name]["tokens/target forward"] > 1.0, name
  assert rows[SIMSD]["draft forwards/token"] > 0
  # A compared row's fixed and broken answers are its accuracy difference, problem by problem.
  for name in (blocks.EDITING, FLOWBLOCK):
    row = rows[name]
    versus = rows[row["versus"]]
    assert row["accuracy"] - versus["accuracy"] == pytest.approx(
        (row["fixed"] - row["broken"]) / 3)
    assert row["speedup vs versus"] == pytest.approx(row["speedup"] / versus["speedup"])
  assert rows[blocks.THRESHOLD]["T2T edits/answer"] == 0.0
  assert rows[blocks.EDITING]["T2T edits/answer"] > 0.0
  assert rows[VERIFIED_FLOWBLOCK]["T2T edits/answer"] > 0.0
  assert json.loads(out.read_text())["rows"][3]["method"] == FLOWBLOCK
  assert FLOWBLOCK in capsys.readouterr().out


def test_unknown_rows_are_named():
  with pytest.raises(ValueError, match=r"unknown rows \['no such row'\]"):
    blocks.run(names=["no such row"])
