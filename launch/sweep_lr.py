"""A learning-rate sweep of the quickstart BERT, end to end.

    python launch/sweep_lr.py [--root=sweeps/quickstart_lr] [--steps=2500]
        [--learning_rates=3e-4,1e-3,3e-3] [--emit] [--tpu_vm="--name=... --zone=..."]
        [--set=model.num_layers=4 --set=data.dupe_factor=1 ...]

Each learning rate is a trial with its own workdir under --root, trained here one
after another (--emit prints one command per trial instead, to run elsewhere, or on
a TPU VM with --tpu_vm). The table of every trial's final train loss and eval MLM
loss/accuracy goes to ROOT/results.csv and ROOT/results.jsonl, and the best trial by
eval loss is printed. Run it again and finished trials are skipped. --set changes
the base config for every trial (a Python literal, or else a string).
"""

import argparse
import ast
import pathlib
import shlex

REPO = pathlib.Path(__file__).resolve().parents[1]


def _key_value(item: str):
    key, sep, text = item.partition("=")
    if not sep:
        raise SystemExit(f"error: --set {item!r} is not KEY=VALUE")
    try:
        return key, ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return key, text


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="sweeps/quickstart_lr")
    parser.add_argument("--steps", type=int, default=2500, help="steps per trial")
    parser.add_argument("--learning_rates", default="3e-4,1e-3,3e-3")
    parser.add_argument("--emit", action="store_true", help="print commands, do not train")
    parser.add_argument("--tpu_vm", default="", help="launch/tpu_vm.sh train flags")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a base config field for every trial (repeatable)")
    args = parser.parse_args()

    from pretrainx.compare import sweep
    from pretrainx.config import load_file
    base = load_file(str(REPO / "configs" / "quickstart.py"))
    fixed = dict(_key_value(item) for item in args.set)
    base = sweep.apply_overrides(base, fixed)
    base.total_steps = args.steps
    base.eval_every = args.steps
    base.checkpoint_every = args.steps
    base.log_every = min(base.log_every, args.steps)
    rates = [float(x) for x in args.learning_rates.split(",")]
    trials = sweep.grid(base, {"optimizer.learning_rate": rates}, root=args.root)
    if args.emit:
        extra = [f"--config.{k}={args.steps}" for k in ("total_steps", "eval_every",
                                                        "checkpoint_every")]
        extra += [shlex.quote(f"--config.{k}={v}") for k, v in fixed.items()]
        for command in sweep.commands(trials, "configs/quickstart.py", tpu_vm=args.tpu_vm):
            print(command, *extra)
        return
    sweep.run(trials, metric="eval_loss", mode="min", root=args.root)


if __name__ == "__main__":
    main()
