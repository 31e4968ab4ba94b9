"""Orbax checkpoints of the train state, the data iterator and the config, together.

Saves are asynchronous and atomic (Orbax writes to a temporary directory and
renames it on commit), so a checkpoint that exists is a complete one.

The data position is saved once, as JSON, not per process: every process is at
the same global batch (see data/pipeline.py), so a checkpoint written by N
processes resumes on M.
"""

import json
import os
import sys

import jax
import orbax.checkpoint as ocp

from pretrainx.errors import UserError


def _abstract(state, shardings):
    return jax.tree_util.tree_map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), state, shardings)


class Checkpointer:
    def __init__(self, workdir: str, keep: int, save_every: int):
        root = workdir if "://" in workdir else os.path.abspath(workdir)
        self.directory = f"{root.rstrip('/')}/checkpoints"
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, save_interval_steps=1,
                                               create=True, enable_async_checkpointing=True)
        try:
            self.manager = ocp.CheckpointManager(
                self.directory, options=options, item_names=("state", "data", "config"))
        except OSError as e:
            raise UserError(f"cannot create checkpoint directory {self.directory}: "
                            f"{e.strerror or e}") from None
        self.save_every = save_every

    def latest_step(self):
        return self.manager.latest_step()

    def save(self, step: int, state, data_iterator, config_json: str, force: bool = False) -> bool:
        args = ocp.args.Composite(
            state=ocp.args.StandardSave(state),
            data=ocp.args.JsonSave(data_iterator.get_state()),
            config=ocp.args.JsonSave(json.loads(config_json)))
        return self.manager.save(step, args=args, force=force)

    def restore(self, abstract_state, shardings, data_iterator_for_step):
        """Newest checkpoint that restores; a broken one is reported and skipped.

        `data_iterator_for_step(step)` builds the (fresh) iterator of the phase that
        step belongs to, whose position the checkpoint then sets.
        Returns (step, state, data_iterator, saved_config) or None when there is none.
        """
        for step in sorted(self.manager.all_steps(), reverse=True):
            iterator = data_iterator_for_step(step)
            try:
                restored = self.manager.restore(step, args=ocp.args.Composite(
                    state=ocp.args.StandardRestore(_abstract(abstract_state, shardings)),
                    data=ocp.args.JsonRestore(),
                    config=ocp.args.JsonRestore()))
                iterator.set_state(restored["data"])
            except Exception as e:  # a truncated or half-deleted checkpoint
                print(f"warning: checkpoint {self.directory}/{step} does not restore "
                      f"({type(e).__name__}: {str(e).splitlines()[0][:200]}); "
                      "trying an older one", file=sys.stderr, flush=True)
                continue
            return step, restored["state"], iterator, restored["config"]
        return None

    def wait(self):
        self.manager.wait_until_finished()

    def close(self):
        self.manager.wait_until_finished()
        self.manager.close()
