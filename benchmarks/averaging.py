"""Does averaging a run's last checkpoints beat its last one? The quickstart, measured.

    python benchmarks/averaging.py [--steps=2500] [--every=100] [--keep=5] [--workdir=DIR]

Trains configs/quickstart.py (BERT-Tiny on two bundled novels, its 2,500 steps unless
--steps) keeping a checkpoint every `--every` steps (the last `--keep`), or reuses a
finished `--workdir`; then averages its last 2, 3, ... `--keep` checkpoints with
`pretrainx.trained.merge` and evaluates each average and the last checkpoint with
`pretrainx.evaluate.heldout` on every batch of the unseen eval book (Alice), the same rows for
all. Prints eval MLM accuracy and loss, and each average's difference from the last
checkpoint. The last line is one JSON object.
"""

import argparse
import json
import os
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import ml_collections  # noqa: E402

from pretrainx import config as config_lib, pretrain  # noqa: E402
from pretrainx.trained import merge
from pretrainx.train import loop  # noqa: E402

ALL_BATCHES = 10_000  # eval_steps above the eval book's batches: each batch once


def _evaluate(workdir):
    with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
        cfg = ml_collections.ConfigDict(json.load(f))
    cfg.eval_steps = ALL_BATCHES
    return loop.evaluate(cfg, workdir)["eval"]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=0, help="0: the quickstart's own")
    parser.add_argument("--every", type=int, default=100)
    parser.add_argument("--keep", type=int, default=5)
    parser.add_argument("--workdir", default="", help="a finished run to reuse (or write)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="pretrainx-averaging-")
    run = args.workdir or os.path.join(work, "run")
    cfg = config_lib.load_file(os.path.join(REPO, "configs", "quickstart.py"))
    if args.steps:
        cfg.total_steps = args.steps
    cfg.checkpoint_every, cfg.keep_checkpoints = args.every, args.keep
    pretrain.train(cfg, run)  # resumes, or does nothing, on a finished workdir
    steps = sorted(int(n) for n in os.listdir(os.path.join(run, "checkpoints")) if n.isdigit())
    results = {"last": dict(_evaluate(run), steps=steps[-1:])}
    for k in range(2, min(args.keep, len(steps)) + 1):
        out = os.path.join(work, f"last{k}")
        merge.merge([os.path.join(run, "checkpoints", str(s)) for s in steps[-k:]], out)
        results[f"average of last {k}"] = dict(_evaluate(out), steps=steps[-k:])
    last = results["last"]
    for name, r in results.items():
        print(f"{name:18s} steps {r['steps'][0]}-{r['steps'][-1]}: eval MLM accuracy "
              f"{r['mlm_accuracy']:.4f} ({r['mlm_accuracy'] - last['mlm_accuracy']:+.4f}), "
              f"loss {r['loss']:.4f} ({r['loss'] - last['loss']:+.4f})", flush=True)
    print(json.dumps({"results": results, "workdir": run}))


if __name__ == "__main__":
    main()
