"""pretrainx: TPU-first pretraining of BERT- and T5-style models in JAX/Flax.

`pretrainx.load(path)` runs a stored model (pretrainx/inference.py). It is looked up on
first use (PEP 562), so `import pretrainx` stays light and the base package does not
import the floors above it."""

import importlib

__version__ = "0.1.0"


def __getattr__(name: str):
    if name == "load":
        return importlib.import_module("pretrainx.inference").load
    raise AttributeError(f"module 'pretrainx' has no attribute {name!r}")
