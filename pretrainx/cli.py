"""What every pretrainx command line shares: the --config and --workdir flags, absl's
parser with its failures reduced to one line that names the flag, and a main that
turns a UserError into `error: ...` and exit 2 (python -m pretrainx.main, .data,
.plan, .embed, .export, .generate)."""

import os
import re
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from pretrainx.errors import UserError, WriterFailedError

_CONFIG = config_flags.DEFINE_config_file("config", None, "Recipe file (ml-collections).",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints and metrics go (local or gs://).")


def workdir() -> str:
    """--workdir as given (None when it was not)."""
    return _WORKDIR.value


def config(argv, example: str = "configs/quickstart.py"):
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
        raise UserError(_colon_read(spec) or f"cannot load {spec}: {first_line(e)}") from None
    return cfg


def first_line(e) -> str:
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
        flag = first_line(e).split(": ")[0]
        _fail(f"{flag}: {type(cause).__name__}: {first_line(cause)}" if cause is not e
              else first_line(e))
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


def main(run_fn):
    """Runs `run_fn(argv)` as the process's command line (absl's app.run, guarded)."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    app.run(guarded(run_fn), flags_parser=_parse_flags)
