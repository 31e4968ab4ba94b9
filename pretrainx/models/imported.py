"""A model another run or a release gave (a distillation's teacher) placed in the
parameter tree this run built: every tensor the tree has, of the shape it has."""

import numpy as np

from pretrainx.errors import UserError


def fit(fresh: dict, given: dict, where: str) -> dict:
    """`given`'s arrays in `fresh`'s tree, in `fresh`'s dtypes; a tensor `given` lacks, or
    of another shape, is refused in one line naming `where` (the config key and path)."""
    def walk(target, have, path):
        out = {}
        for key, value in target.items():
            name = "/".join(path + (key,))
            if key not in have:
                raise UserError(f"{where}: no parameter {name}")
            if isinstance(value, dict):
                out[key] = walk(value, have[key], path + (key,))
                continue
            if tuple(np.shape(have[key])) != tuple(np.shape(value)):
                raise UserError(f"{where}: parameter {name} has shape "
                                f"{tuple(np.shape(have[key]))}, the model expects "
                                f"{tuple(np.shape(value))}")
            out[key] = np.asarray(have[key], np.asarray(value).dtype)
        return out
    return walk(fresh, given, ())
