"""Evaluation tasks with exact answers: `gsm_synth` (templated grade-school word problems)."""
