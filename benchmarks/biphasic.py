"""CLM then MLM at CPU size (Gisserot-Boukhlef et al. 2025): at equal steps on the same
rows, does a causal-LM first part beat MLM alone, and does MLM continued from a CLM
checkpoint beat MLM continued from an MLM one?

    python benchmarks/biphasic.py [--workdir=/tmp/biphasic] [--steps=1500]
        [--splits=0.25,0.5] [--seeds=0,1,2] [--cpt_steps=500] [--settings=sst2_500]
        [--lrs=3e-4,1e-3]

1. Pretraining, each arm `--steps` steps of configs/biphasic.py's model (Ettin's pair
   at 3 layers x 128) on the same novels, one run per seed (its initialisation, masks
   and row order): MLM alone (the encoder), CLM alone (the decoder), and CLM for each
   share of `--splits` then MLM (configs/biphasic.py:SHARE, one run, one schedule).
2. Continued pretraining, `--cpt_steps` of MLM from the end of the MLM-alone arm and
   from the end of the CLM-alone arm (a fresh optimizer and schedule, init_from).
3. Held out (Alice): MLM accuracy at 15% for every model that ends in MLM; the CLM arm's
   next-token perplexity. Each model fine-tuned on each setting of
   benchmarks/pretrain_pays.py (SST-2's first 500 rows, 100 held out to choose rate and
   epoch): models that end in MLM classify from [CLS], the CLM arm from its last token.
   Per arm: per seed, then median, min and max over seeds.

The last line is one JSON object. Re-running with the same --workdir reuses what is done.
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import pretrain_pays  # noqa: E402  (its settings, fine-tuning arms and choice rule)

from pretrainx import config as config_lib, pretrain  # noqa: E402


def _config(arm: str, steps: int, seed: int, model: dict, eval_steps: int):
    """The arm's config: ettin_quickstart's encoder or decoder, or biphasic:SHARE."""
    name = {"mlm": "ettin_quickstart.py:encoder", "clm": "ettin_quickstart.py:decoder"}.get(
        arm, f"biphasic.py:{arm[len('clm_then_mlm_'):]}")
    cfg = config_lib.load_file(str(HERE.parent / "configs" / name))
    cfg.model.update(model)
    if steps:  # the schedule's shape kept: warmup and decay the same shares of the run
        share = steps / cfg.total_steps
        cfg.optimizer.warmup_steps = max(1, round(cfg.optimizer.warmup_steps * share))
        cfg.optimizer.decay_steps = max(1, round(cfg.optimizer.decay_steps * share))
        if cfg.phase_order:
            cfg.phases.clm.steps = max(1, round(cfg.phases.clm.steps * share))
        cfg.total_steps = steps
    cfg.eval_every = cfg.checkpoint_every = cfg.total_steps
    if cfg.phase_order:  # each phase's end is evaluated; keep the last phase's save too
        cfg.checkpoint_every = cfg.phases.clm.steps
    cfg.seed = seed
    if eval_steps:
        cfg.eval_steps = eval_steps
    return cfg


def _train(cfg, workdir: pathlib.Path) -> dict:
    start = time.perf_counter()
    if not (workdir / "metrics.jsonl").exists() or not _done(workdir, cfg.total_steps):
        pretrain.train(cfg, str(workdir))
    with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
        evals = [r for r in map(json.loads, f) if r.get("split") == "eval"]
    last = config_lib.phases(cfg)[-1].cfg  # the model as its last phase trained it
    return {"workdir": str(workdir), "eval": evals[-1], "model": last.model.to_dict(),
            "tokenizer": cfg.data.tokenizer, "seconds": round(time.perf_counter() - start)}


def _done(workdir: pathlib.Path, steps: int) -> bool:
    with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
        return any(r.get("split") == "eval" and r.get("step") == steps for r in map(json.loads, f))


def _continued(source: dict, steps: int, seed: int, model: dict, eval_steps: int,
               workdir: pathlib.Path) -> dict:
    """`steps` of MLM (the encoder's recipe, its schedule's shape) from `source`'s end."""
    cfg = _config("mlm", steps, seed, model, eval_steps)
    cfg.init_from = source["workdir"]
    return _train(cfg, workdir)


def _summary(values: list) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default="/tmp/biphasic")
    parser.add_argument("--steps", type=int, default=0, help="0: the recipe's 1,500")
    parser.add_argument("--splits", default="0.25,0.5", help="CLM shares of the steps")
    parser.add_argument("--cpt_steps", type=int, default=500)
    parser.add_argument("--settings", default="sst2_500")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--lrs", default="3e-4,1e-3")
    parser.add_argument("--max_rows", type=int, default=0, help="smoke test: rows a setting")
    parser.add_argument("--epochs", type=int, default=0, help="smoke test: epochs")
    parser.add_argument("--eval_steps", type=int, default=0,
                        help="smoke test: held-out batches (0: the quickstart's)")
    parser.add_argument("--model", type=json.loads, default={},
                        help="smoke test: model keys over the quickstart's, as JSON")
    args = parser.parse_args()
    work = pathlib.Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    seeds = [int(s) for s in args.seeds.split(",")]
    lrs = [float(x) for x in args.lrs.split(",")]
    arms = ["mlm", "clm"] + [f"clm_then_mlm_{s}" for s in args.splits.split(",")]
    runs = {}
    for arm in arms:
        for seed in seeds:
            cfg = _config(arm, args.steps, seed, args.model, args.eval_steps)
            runs[arm, seed] = _train(cfg, work / "pretrain" / f"{arm}_s{seed}")
    for start in ("mlm", "clm"):
        for seed in seeds:
            runs[f"mlm_continued_from_{start}", seed] = _continued(
                runs[start, seed], args.cpt_steps, seed, args.model, args.eval_steps,
                work / "continued" / f"from_{start}_s{seed}")
    table = {}
    for arm in dict.fromkeys(a for a, _ in runs):
        mine = [runs[arm, s] for s in seeds]
        row = {"seconds": sum(r["seconds"] for r in mine)}
        if "mlm_accuracy" in mine[0]["eval"]:
            row["mlm_accuracy"] = _summary([r["eval"]["mlm_accuracy"] for r in mine])
        else:
            row["perplexity"] = _summary([r["eval"]["perplexity"] for r in mine])
        for setting in args.settings.split(","):
            scores = []
            for seed, run in zip(seeds, mine):
                got = pretrain_pays.run_arm(work, setting, run["model"], run["tokenizer"],
                                            run["workdir"], [seed], lrs, f"{arm}_s{seed}",
                                            (args.max_rows, args.epochs))
                scores.append(got["mean"])
            row[setting] = {"per_seed": scores, **_summary(scores)}
        table[arm] = row
        print(f"{arm}: " + ", ".join(
            f"{k} {v['median']:.4g} [{v['min']:.4g}, {v['max']:.4g}]"
            for k, v in row.items() if isinstance(v, dict)), flush=True)
    print(json.dumps({"steps": args.steps or 1500, "cpt_steps": args.cpt_steps,
                      "seeds": seeds, "arms": table}))


if __name__ == "__main__":
    main()
