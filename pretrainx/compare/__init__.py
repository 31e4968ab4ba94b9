"""Experiments: pretraining strategies compared at equal compute (python -m
pretrainx.compare: `grid` of cells, each pretrained on one budget and fine-tuned on one
task suite, `cells`, `table`), `sweep` (grid and random searches over config
overrides, each trial in its own workdir, resumable), `json_files` (records a rerun reads back,
written whole or not at all) and `notebook` (what the notebooks call)."""
