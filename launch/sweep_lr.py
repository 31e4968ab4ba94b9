"""A learning-rate sweep of the quickstart BERT, end to end.

    python launch/sweep_lr.py [--root=sweeps/quickstart_lr] [--steps=2500]
        [--learning_rates=3e-4,1e-3,3e-3] [--emit] [--tpu_vm="--name=... --zone=..."]

Each learning rate is a trial with its own workdir under --root, trained here one
after another (--emit prints one command per trial instead, to run elsewhere, or on
a TPU VM with --tpu_vm). The table of every trial's final train loss and eval MLM
loss/accuracy goes to ROOT/results.csv and ROOT/results.jsonl, and the best trial by
eval loss is printed. Run it again and finished trials are skipped.
"""

import argparse
import importlib.util
import pathlib

REPO = pathlib.Path(__file__).resolve().parents[1]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default="sweeps/quickstart_lr")
    parser.add_argument("--steps", type=int, default=2500, help="steps per trial")
    parser.add_argument("--learning_rates", default="3e-4,1e-3,3e-3")
    parser.add_argument("--emit", action="store_true", help="print commands, do not train")
    parser.add_argument("--tpu_vm", default="", help="launch/tpu_vm.sh train flags")
    args = parser.parse_args()

    from pretrainx import sweep
    spec = importlib.util.spec_from_file_location("quickstart", REPO / "configs" / "quickstart.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    base = module.get_config()
    base.total_steps = args.steps
    base.eval_every = args.steps
    base.checkpoint_every = args.steps
    base.log_every = min(base.log_every, args.steps)
    rates = [float(x) for x in args.learning_rates.split(",")]
    trials = sweep.grid(base, {"optimizer.learning_rate": rates}, root=args.root)
    if args.emit:
        extra = [f"--config.{k}={args.steps}" for k in ("total_steps", "eval_every",
                                                        "checkpoint_every")]
        for command in sweep.commands(trials, "configs/quickstart.py", tpu_vm=args.tpu_vm):
            print(command, *extra)
        return
    sweep.run(trials, metric="eval_loss", mode="min", root=args.root)


if __name__ == "__main__":
    main()
