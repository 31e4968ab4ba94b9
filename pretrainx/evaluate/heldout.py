"""python -m pretrainx.evaluate --workdir=DIR [--eval_steps=N] [--eval_files=GLOBS]
                               [--phase=NAME]

Evaluates the newest checkpoint of a pretraining workdir (a run's, or one that
pretrainx.trained.merge wrote) on the eval sources of its own config (WORKDIR/config.json) and
prints one JSON line: the step, the eval metrics (loss, MLM accuracy, ...) and, with
several eval sources, each source's. Nothing is trained and metrics.jsonl is left alone.
--phase evaluates it as that named phase runs (its length, RoPE bases, eval data and
masking): a pretraining phase's model at the extension's length.
"""

import argparse
import json
import os
import sys

import ml_collections

from pretrainx.errors import UserError, json_command
from pretrainx import pretrain


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pretrainx.evaluate", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--eval_steps", type=int, default=None,
                        help="batches of each eval source (default: the config's eval_steps)")
    parser.add_argument("--eval_files", default=None, help="other eval sources than the config's")
    parser.add_argument("--phase", default=None,
                        help="evaluate as this named phase runs (default: the checkpoint's)")
    args = parser.parse_args(argv)

    def run():
        path = os.path.join(args.workdir, "config.json")
        if not os.path.isfile(path):
            raise UserError(f"{args.workdir} has no config.json: not a pretrainx pretraining "
                            "workdir")
        with open(path, encoding="utf-8") as f:
            cfg = ml_collections.ConfigDict(json.load(f))
        if args.eval_steps is not None:
            cfg.eval_steps = args.eval_steps
        if args.eval_files is not None:
            cfg.data.eval_files, cfg.data.eval_split_percent = args.eval_files, 0.0
        if not cfg.data.eval_files and not cfg.data.eval_split_percent:
            raise UserError(f"{path} names no eval sources: give --eval_files")
        return pretrain.evaluate(cfg, args.workdir, phase=args.phase)
    return json_command(run)


if __name__ == "__main__":
    sys.exit(main())
