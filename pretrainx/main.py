"""python -m pretrainx.main --config=configs/NAME.py --workdir=DIR [--config.FIELD=VALUE ...]

Trains (resuming from DIR/checkpoints when there is one), or with --describe
prints what the run would be as one JSON object and exits.
"""

if __name__ == "__main__":  # before anything slow: a signal during start-up exits at once
    from pretrainx.train import interrupt as _interrupt
    _interrupt.install()

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

from absl import flags  # noqa: E402

from pretrainx import cli, pretrain  # noqa: E402
from pretrainx.errors import UserError  # noqa: E402
from pretrainx.train import interrupt, phases as phases_lib  # noqa: E402

_DESCRIBE = flags.DEFINE_bool("describe", False, "Print the run's shape as JSON and exit.")
_COORDINATOR = flags.DEFINE_string("coordinator_address", None,
                                   "host:port of process 0, for clusters without auto-detection.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Processes in the job.")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index.")


def _int_env(environ, key: str) -> int:
    try:
        return int(environ.get(key, "1") or 1)
    except ValueError:
        return 1


def cluster_detected(environ=os.environ) -> bool:
    """Several processes that JAX finds its coordinator for by itself: a multi-host TPU
    slice, several slices (MEGASCALE_* from a queued resource or a GKE JobSet), a
    SLURM job step of several tasks (launch/slurm.py), or an Open MPI job (mpirun)."""
    return ("," in environ.get("TPU_WORKER_HOSTNAMES", "")
            or _int_env(environ, "MEGASCALE_NUM_SLICES") > 1
            or ("SLURM_JOB_ID" in environ and _int_env(environ, "SLURM_NTASKS") > 1)
            or _int_env(environ, "OMPI_COMM_WORLD_SIZE") > 1)


def _init_distributed() -> None:
    """jax.distributed for multi-process jobs: explicit flags, or a cluster JAX
    detects itself (`cluster_detected`). One process needs nothing."""
    import jax
    if _COORDINATOR.value or _NUM_PROCESSES.value:
        if not (_COORDINATOR.value and _NUM_PROCESSES.value and _PROCESS_ID.value is not None):
            raise UserError("--coordinator_address, --num_processes and --process_id go together")
        interrupt.leave_sigterm_to_jax()
        jax.distributed.initialize(_COORDINATOR.value, _NUM_PROCESSES.value, _PROCESS_ID.value)
    elif cluster_detected():
        interrupt.leave_sigterm_to_jax()
        jax.distributed.initialize()


def run(argv) -> int:
    previous = interrupt.install()  # already, when run as python -m pretrainx.main
    try:
        return _run(argv)
    finally:
        interrupt.restore(previous)


def _run(argv) -> int:
    cfg = cli.config(argv)
    _init_distributed()
    loop = pretrain.loop_for(cfg)
    if _DESCRIBE.value:
        described = loop.describe(cfg)
        print(json.dumps(described))
        if len(described.get("phases", ())) > 1:  # the phases as a person reads them
            print(phases_lib.table(described["phases"]), file=sys.stderr)
        return 0
    if not cli.workdir():
        raise UserError("--workdir is required to train")
    loop.train(cfg, cli.workdir())
    return 0


main = cli.guarded(run)


if __name__ == "__main__":
    cli.main(run)
