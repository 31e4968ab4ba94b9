"""Ettin's question at CPU size: trained on the same tokens, does the encoder beat the
decoder at classification, and what does the decoder buy in perplexity?

    python benchmarks/ettin_pair.py [--workdir=/tmp/ettin_pair] [--steps=1500]
        [--settings=sst2_500] [--seeds=0,1,2] [--lrs=3e-4,1e-3]

1. configs/ettin_quickstart.py twice, `--steps` each: the encoder (30% MLM) and the
   decoder (next-token prediction, causal attention), ModernBERT's network at 3 layers x
   128 on the same rows of the bundled novels in the same order, the same schedule.
   Held out: Alice, the encoder's MLM accuracy and the decoder's perplexity.
2. Both fine-tuned on each low-resource setting of benchmarks/pretrain_pays.py (the first
   N labelled training rows, a fifth held out), the encoder classifying from [CLS] and
   the decoder from its last token (the one that has read the row, as HF's decoder
   classifier), over --seeds x --lrs; per seed the rate and epoch the held-out rows
   choose, the dev score there; mean and standard deviation over seeds.

The last line is one JSON object. Re-running with the same --workdir reuses what is done.
"""

import argparse
import json
import os
import pathlib
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import pretrain_pays  # noqa: E402  (its settings, fine-tuning arms and choice rule)

from pretrainx import config as config_lib, pretrain  # noqa: E402


def _pretrain(kind: str, steps: int, work: pathlib.Path, eval_steps: int = 0,
              model=None) -> dict:
    cfg = config_lib.load_file(str(HERE.parent / "configs" / f"ettin_quickstart.py:{kind}"))
    cfg.model.update(model or {})  # the smoke test's smaller network, the same for both
    if steps:  # the schedule's shape kept: warmup and decay the same shares of the run
        share = steps / cfg.total_steps
        cfg.optimizer.warmup_steps = max(1, round(cfg.optimizer.warmup_steps * share))
        cfg.optimizer.decay_steps = max(1, round(cfg.optimizer.decay_steps * share))
        cfg.total_steps = cfg.eval_every = cfg.checkpoint_every = steps
    if eval_steps:
        cfg.eval_steps = eval_steps
    workdir = work / kind
    start = time.perf_counter()
    pretrain.train(cfg, str(workdir))
    with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
        evals = [r for r in map(json.loads, f) if r.get("split") == "eval"]
    return {"workdir": str(workdir), "eval": evals[-1], "model": cfg.model.to_dict(),
            "tokenizer": cfg.data.tokenizer, "seconds": round(time.perf_counter() - start)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default="/tmp/ettin_pair")
    parser.add_argument("--steps", type=int, default=0, help="0: the quickstart's 1,500")
    parser.add_argument("--settings", default="sst2_500")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--lrs", default="3e-4,1e-3")
    parser.add_argument("--max_rows", type=int, default=0, help="smoke test: rows a setting")
    parser.add_argument("--epochs", type=int, default=0, help="smoke test: epochs")
    parser.add_argument("--eval_steps", type=int, default=0,
                        help="smoke test: held-out batches (0: the quickstart's 10)")
    parser.add_argument("--model", type=json.loads, default={},
                        help="smoke test: model keys over the quickstart's, as JSON")
    args = parser.parse_args()
    work = pathlib.Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    runs = {kind: _pretrain(kind, args.steps, work, args.eval_steps, args.model)
            for kind in ("encoder", "decoder")}
    seeds = [int(s) for s in args.seeds.split(",")]
    lrs = [float(x) for x in args.lrs.split(",")]
    results = {}
    for setting in args.settings.split(","):
        results[setting] = {
            kind: pretrain_pays.run_arm(work, setting, run["model"], run["tokenizer"],
                                        run["workdir"], seeds, lrs, kind,
                                        (args.max_rows, args.epochs))
            for kind, run in runs.items()}
        enc, dec = results[setting]["encoder"], results[setting]["decoder"]
        print(f"{setting}: encoder {enc['mean']:.1f} +- {enc['std']:.1f}, decoder "
              f"{dec['mean']:.1f} +- {dec['std']:.1f}: encoder "
              f"{enc['mean'] - dec['mean']:+.1f} points", flush=True)
    held_out = {"encoder_mlm_accuracy": runs["encoder"]["eval"]["mlm_accuracy"],
                "decoder_perplexity": runs["decoder"]["eval"]["perplexity"],
                "decoder_next_token_accuracy": runs["decoder"]["eval"]["accuracy"]}
    print(f"held out (Alice): encoder MLM accuracy {held_out['encoder_mlm_accuracy']:.4f}; "
          f"decoder perplexity {held_out['decoder_perplexity']:.1f}, next-token accuracy "
          f"{held_out['decoder_next_token_accuracy']:.4f}", flush=True)
    print(json.dumps({"held_out": held_out, "settings": results,
                      "pretraining_seconds": {k: r["seconds"] for k, r in runs.items()}}))


if __name__ == "__main__":
    main()
