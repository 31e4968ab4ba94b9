"""Pretraining strategies compared at equal compute (python -m pretrainx.compare): a grid of
cells, each pretrained on one budget and fine-tuned on one task suite, tabled."""
