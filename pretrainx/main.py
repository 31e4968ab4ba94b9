"""python -m pretrainx.main --config=configs/NAME.py --workdir=DIR [--config.FIELD=VALUE ...]

Trains (resuming from DIR/checkpoints when there is one), or with --describe
prints what the run would be as one JSON object and exits.
"""

import json
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

from pretrainx.errors import UserError

_CONFIG = config_flags.DEFINE_config_file("config", None, "Recipe file (ml-collections).",
                                          lock_config=True)
_WORKDIR = flags.DEFINE_string("workdir", None, "Where checkpoints and metrics go (local or gs://).")
_DESCRIBE = flags.DEFINE_bool("describe", False, "Print the run's shape as JSON and exit.")


def run(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    cfg = _CONFIG.value
    if cfg is None:
        raise UserError("--config is required, e.g. --config=configs/quickstart.py")
    from pretrainx.train import loop
    if _DESCRIBE.value:
        print(json.dumps(loop.describe(cfg)))
        return 0
    if not _WORKDIR.value:
        raise UserError("--workdir is required to train")
    loop.train(cfg, _WORKDIR.value)
    return 0


def main(argv):
    logging.set_verbosity(logging.WARNING)  # orbax logs every checkpoint step at INFO
    try:
        return run(argv)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr, flush=True)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr, flush=True)
        sys.exit(130)


def cli():
    # Config files that fail to load (missing file, bad syntax, unknown override key)
    # are reported by absl in one line; keep JAX's own logging quiet.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    app.run(main)


if __name__ == "__main__":
    cli()
