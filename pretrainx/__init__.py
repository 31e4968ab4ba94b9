"""pretrainx: TPU-first pretraining of BERT- and T5-style models in JAX/Flax.

The package is laid out by role: the core here (config, phasing, registry, sharding,
errors, main, cli, pretrain), then data/, models/, objectives/, train/,
interop/, families/, finetune/, and the tools above them: plan/, evaluate/, trained/,
prepare/, compare/ (docs/architecture.md draws the floors).

`pretrainx.load(path)` runs a stored model (pretrainx/trained/inference.py). It is
looked up on first use (PEP 562), so `import pretrainx` stays light and the base
package does not import the floors above it."""

import importlib
import importlib.abc
import importlib.util
import sys

__version__ = "0.1.0"

# Modules that lived at the top before the role packages, and where they are now:
# `python -m pretrainx.probe`, `from pretrainx import sweep` and the like keep working.
MOVED = {
    "charset": "data.charset", "chips": "train.chips",
    "hlo_bytes": "plan.hlo_bytes", "dcn_traffic": "plan.dcn_traffic",
    "kernel_cost": "plan.kernel_cost",
    "probe": "evaluate.probe", "cloze": "evaluate.cloze", "retrieval": "evaluate.retrieval",
    "similarity": "evaluate.similarity", "word_eval": "evaluate.word_eval",
    "inference": "trained.inference", "embed": "trained.embed",
    "generate": "trained.generate", "sampling": "trained.sampling",
    "export": "trained.export", "merge": "trained.merge",
    "data_cli": "prepare.data_cli", "tokenizer": "prepare.tokenizer",
    "extend_vocab": "prepare.extend_vocab",
    "sweep": "compare.sweep", "json_files": "compare.json_files",
    "notebook": "compare.notebook", "jobs": "pretrain",
}


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """pretrainx.OLD as the module pretrainx.NEW itself (one module object, so state
    and monkeypatches are shared), and runnable with -m (runpy asks for its code)."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, name = fullname.rpartition(".")
        if package != __name__ or name not in MOVED:
            return None
        real = importlib.util.find_spec(f"{__name__}.{MOVED[name]}")
        return importlib.util.spec_from_loader(fullname, self, origin=real.origin)

    def create_module(self, spec):
        return importlib.import_module(self._real(spec.name))

    def exec_module(self, module):
        pass  # the real module ran when it was imported

    def get_code(self, fullname):  # python -m pretrainx.OLD runs NEW's code as __main__
        real = self._real(fullname)
        return importlib.util.find_spec(real).loader.get_code(real)

    @staticmethod
    def _real(fullname):
        return f"{__name__}.{MOVED[fullname.rpartition('.')[2]]}"


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())


def __getattr__(name: str):
    if name == "load":
        return importlib.import_module("pretrainx.trained.inference").load
    raise AttributeError(f"module 'pretrainx' has no attribute {name!r}")
