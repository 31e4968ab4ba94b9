"""python -m pretrainx.main --config=configs/NAME.py --workdir=DIR [--config.FIELD=VALUE ...]

Trains (resuming from DIR/checkpoints when there is one), or with --describe
prints what the run would be as one JSON object and exits.
"""

if __name__ == "__main__":  # before anything slow: a signal during start-up exits at once
    from pretrainx.train import interrupt as _interrupt
    _interrupt.install()

import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402

from absl import app, flags, logging  # noqa: E402
from ml_collections import config_flags  # noqa: E402

from pretrainx import jobs  # noqa: E402
from pretrainx.errors import UserError, WriterFailedError  # noqa: E402
from pretrainx.train import interrupt, phases as phases_lib  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file("config", None, "Recipe file (ml-collections).",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints and metrics go (local or gs://).")
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


def cli_config(argv, example: str = "configs/quickstart.py"):
    """The --config of a command line, or a UserError that says what is wrong with it."""
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    cfg = _CONFIG.value
    if cfg is None:
        raise UserError(f"--config is required, e.g. --config={example}")
    try:
        cfg.keys()
    except OSError as e:  # config_flags defers a file that failed to load until first use
        spec = flags.FLAGS["config"].config_filename
        raise UserError(_colon_read(spec) or f"cannot load {spec}: {_first_line(e)}") from None
    return cfg


def run(argv) -> int:
    previous = interrupt.install()  # already, when run as python -m pretrainx.main
    try:
        return _run(argv)
    finally:
        interrupt.restore(previous)


def _run(argv) -> int:
    cfg = cli_config(argv)
    _init_distributed()
    loop = jobs.loop_for(cfg)
    if _DESCRIBE.value:
        described = loop.describe(cfg)
        print(json.dumps(described))
        if len(described.get("phases", ())) > 1:  # the phases as a person reads them
            print(phases_lib.table(described["phases"]), file=sys.stderr)
        return 0
    if not _WORKDIR.value:
        raise UserError("--workdir is required to train")
    loop.train(cfg, _WORKDIR.value)
    return 0


def _first_line(e) -> str:
    """The line of an exception that says what went wrong (an OS error, if any)."""
    lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
    errno = next((ln for ln in lines if ln.startswith("[Errno")), None)
    return errno or (lines[0] if lines else type(e).__name__)


def _root_cause(e):
    while e.__cause__ is not None or e.__context__ is not None:
        e = e.__cause__ or e.__context__
    return e


def _fail(message: str, at_once: bool = False):
    # One write of the whole line: print() writes the text and the newline apart, and
    # tensorstore's threads, still reporting cut-short writes, could land between them.
    # Those threads may also have left half a line, so a disk-full error (the case
    # where they run) starts a line of its own.
    lead = "\n" if at_once else ""
    sys.stderr.write(f"{lead}error: {message}\n")
    sys.stderr.flush()
    if at_once:
        sys.stdout.flush()
        os._exit(2)
    sys.exit(2)


def _parse_flags(argv):
    """absl's parser, with its failures (a missing config file, an unknown or
    mistyped override) reduced to one line that names the flag."""
    try:
        return flags.FLAGS(argv)
    except (AttributeError, KeyError) as e:  # unknown key in a --config.a.b=... override
        said = e.args[0] if e.args else e  # absl wraps ml-collections' KeyError
        if isinstance(said, BaseException):
            said = said.args[0] if said.args else said
        said = str(said)
        names = re.findall(r"'([^'\\]+)\\?'|\"([^\"]+)\"", said)
        key = next((a or b for a, b in names), said.splitlines()[0] if said else "?")
        culprit = next((a for a in argv[1:] if a.startswith("--config.") and key in a), key)
        hint = re.search(r'Did you mean "([^"]+)"', said)
        _fail(f"unknown config key in {culprit}"
              + (f" (did you mean {hint.group(1)}?)" if hint else ""))
    except flags.Error as e:
        cause = _root_cause(e)
        flag = _first_line(e).split(": ")[0]
        _fail(f"{flag}: {type(cause).__name__}: {_first_line(cause)}" if cause is not e
              else _first_line(e))
    except Exception as e:  # a config file that raises while loading
        spec = next((a.split("=", 1)[1] for a in argv[1:] if a.startswith("--config=")), "")
        _fail(_colon_read(spec) or f"cannot load config: {type(e).__name__}: "
              f"{str(e).splitlines()[0] if str(e) else ''}")


def _colon_read(spec: str) -> str:
    """What to say of a --config path with a ':' in it ("" if that is not the trouble):
    ml-collections reads what follows the first ':' as the recipe's argument."""
    if ":" not in spec or not os.path.isfile(spec):
        return ""
    return (f"--config={spec}: the part after the first ':' is the recipe's argument, so "
            f"{spec.partition(':')[0]} was read; give the recipe a path without ':' (move or "
            "link it)")


def guarded(run_fn):
    """absl main around `run_fn(argv)`: quiet logs, user errors as one line, exit 2."""
    def main(argv):
        logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint step at INFO
        try:
            return run_fn(argv)
        except UserError as e:
            _fail(str(e), at_once=isinstance(e, WriterFailedError))
        except KeyboardInterrupt:
            print("interrupted", file=sys.stderr, flush=True)
            sys.exit(130)
    return main


main = guarded(run)


def cli(run_fn=run):
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    app.run(guarded(run_fn), flags_parser=_parse_flags)


if __name__ == "__main__":
    cli()
