"""Pretraining as the CLI, notebooks and sweeps start it: the train loop, with
`init_from` (an HF directory, a google-research checkpoint or another run's workdir)
read through interop, which the loop itself never imports."""

import jax

from pretrainx import interop, objectives
from pretrainx.errors import UserError
from pretrainx.train import loop
from pretrainx.train import metrics as metrics_lib

describe = loop.describe


def train(cfg, workdir: str, **kwargs) -> dict:
    """loop.train with init_from and the objective's imported models (a distillation's
    teacher) read through interop; the same keyword arguments."""
    objectives.validate(cfg)
    imported = {key: interop.load(path) for key, path in objectives.imports(cfg).items()}
    return loop.train(cfg, workdir, init=continue_from, imported=imported or None, **kwargs)


def continue_from(cfg, state, shardings):
    """The state with the parameters of cfg.init_from (optimizer state stays fresh).
    A whole subtree the import lacks (the pretraining heads of an encoder-only BERT or
    ELECTRA discriminator) starts fresh; a tensor missing inside a subtree it has, or
    of another shape, is refused."""
    pretrained = interop.load(cfg.init_from)
    if pretrained.family != cfg.model.family:
        raise UserError(f"init_from {cfg.init_from} is a {pretrained.family} model; this config "
                        f"trains {cfg.model.family}")
    fresh = jax.device_get(state.params)
    if cfg.model.scan_layers:
        fresh = interop.unstack_layers(fresh)
    params, taken, new = interop.graft(
        fresh, pretrained,
        may_be_missing=lambda path: path[0] not in pretrained.params)
    if cfg.model.scan_layers:
        params = interop.stack_layers(params, jax.device_get(state.params))
    metrics_lib.log(f"  initialised from {pretrained.source}: {taken} tensors"
                    + (f"; fresh: {', '.join(new)}" if new else ""))
    return state.replace(params=jax.device_put(params, shardings.params))
