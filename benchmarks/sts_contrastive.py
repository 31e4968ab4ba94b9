"""Does pretraining give better sentence embeddings? STS-B Spearman of a pretrained
encoder zero-shot and after contrastive fine-tuning, against the same encoder from
random init.

    python benchmarks/sts_contrastive.py --workdir=W --glue_dir=../shared/data/glue \
        [--seeds=3] [--epochs=3] [--limit=0] [--learning_rate=3e-4]

W is a pretraining workdir (any encoder). Zero-shot: the cosine of mean-pooled last
states on STS-B's dev pairs (`python -m pretrainx.similarity`). Then `--seeds` runs of
the `contrastive` fine-tuning task (InfoNCE over in-batch negatives on STS-B's train
pairs scored >= 4, mean pooling, batch 32, length 64, `--learning_rate` for both,
`--epochs` epochs) from W and from a randomly initialised encoder of W's shape and
tokenizer; each run's best dev Spearman. Prints median, min and max over the seeds; the
last line is one JSON object.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import ml_collections  # noqa: E402

from pretrainx import interop  # noqa: E402
from pretrainx.trained import inference
from pretrainx.finetune import loop as finetune_loop  # noqa: E402
from pretrainx.finetune.config import finetune_config  # noqa: E402
from pretrainx.evaluate.similarity import sts  # noqa: E402

STARTS = ("pretrained", "random init")


def _config(args, seed: int, start: str):
    c = finetune_config()
    pretrained = interop.load(args.workdir)
    c.update_from_flattened_dict({
        "task": "contrastive", "seed": seed, "epochs": args.epochs, "seq_len": 64,
        "global_batch_size": 32, "eval_batch_size": 128, "log_every": 1000,
        "data.glue_dir": args.glue_dir, "data.max_train_examples": args.limit,
        "data.max_eval_examples": args.limit, "optimizer.learning_rate": args.learning_rate})
    if start == "pretrained":
        c.init_from = args.workdir
    else:  # the same encoder, its weights drawn afresh
        c.model = ml_collections.ConfigDict(pretrained.model.to_dict())
        c.data.tokenizer, c.data.lower_case = pretrained.tokenizer, pretrained.lower_case
    return c


def _spread(values) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values),
            "runs": values}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", required=True)
    parser.add_argument("--glue_dir", required=True)
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--limit", type=int, default=0, help="the first N pairs (0: all)")
    parser.add_argument("--learning_rate", type=float, default=3e-4)
    args = parser.parse_args()
    zero_shot = sts(inference.load(args.workdir), args.glue_dir, "mean", "dev",
                    args.limit)["spearman"]
    print(f"zero-shot (mean pooling): Spearman {zero_shot:.4f}", flush=True)
    out = {"workdir": args.workdir, "zero_shot": zero_shot, "learning_rate": args.learning_rate}
    for start in STARTS:
        got = []
        for seed in range(args.seeds):
            with tempfile.TemporaryDirectory() as workdir:
                result = finetune_loop.train(_config(args, seed, start), workdir)
            got.append(result["best"]["spearman"])
            print(f"contrastive from {start}, seed {seed}: Spearman {got[-1]:.4f}", flush=True)
        out[start] = _spread(got)
        print(f"contrastive from {start}: median {out[start]['median']:.4f} (min "
              f"{out[start]['min']:.4f}, max {out[start]['max']:.4f})", flush=True)
    out["pretrained_minus_random"] = out["pretrained"]["median"] - out["random init"]["median"]
    print(json.dumps(out))


if __name__ == "__main__":
    main()
