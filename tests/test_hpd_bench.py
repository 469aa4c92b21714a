"""`jaxdec bench hpd` runs end to end on the zoo at toy size and checks every output."""

import json

import pytest

from jaxdec import cli
from jaxdec.bench import hpd


@pytest.mark.slow  # CI runs the bench's task mode; this is the code prompts' mode
def test_bench_hpd_code_through_the_cli(tmp_path, capsys):
  out = tmp_path / "hpd.json"
  assert cli.main(["bench", "hpd", "--queries", "2", "10", "--new-tokens", "4", "--repeats", "1",
                   "--out", str(out)]) == 0
  record = json.loads(out.read_text())
  assert [r["queries"] for r in record["rows"]] == [2, 10]
  assert [r["documents"] for r in record["rows"]] == [1, 2]  # Up to 8 queries per module.
  for row in record["rows"]:
    assert row["same as batched"] and row["same as alone"]
    assert row["HPD tokens/forward"] > 1.5
  assert "bench hpd: code" in capsys.readouterr().out


def test_bench_hpd_gsm_scores_the_answers():
  record = hpd.run("gsm-synth", counts=(2,), new_tokens=8, repeats=1)
  row = record["rows"][0]
  assert row["same as batched"] and row["same as alone"] and row["accuracy"] == 0.0  # 8 tokens.
  with pytest.raises(ValueError, match="task must be"):
    hpd.run("chess")
  with pytest.raises(ValueError, match="counts must be"):
    hpd.run("code", counts=(0,))
