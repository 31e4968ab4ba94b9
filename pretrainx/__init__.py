"""pretrainx: TPU-first pretraining of BERT- and T5-style models in JAX/Flax."""

__version__ = "0.1.0"
