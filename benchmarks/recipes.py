"""Time to accuracy: three recipes, the same wall-clock budget on this machine.

    python benchmarks/recipes.py [--budget_minutes=10] [--recipes=bert,crammed,modernbert]

Each recipe is its CPU-size config at about one million parameters (BERT-Tiny's
size), on the same bundled text (Pride and Prejudice, The Adventures of Sherlock
Holmes), with the same 4k vocabulary, evaluated on the unseen Alice at 15% masking for
all (so ModernBERT's 30% and the crammed 25% are no advantage at eval), 10 batches of
4,096 tokens each:

- bert: configs/quickstart.py, the original recipe (post-LN, MLM + NSP pairs of 32
  tokens, 15% masking, AdamW, warmup then linear decay);
- crammed: configs/crammed_quickstart.py (Geiping and Goldstein 2022: its one-cycle
  schedule and batch ramp over the budget);
- modernbert: configs/modernbert_quickstart.py (Warner et al. 2024: RoPE, GeGLU,
  local/global attention, packed documents, 30% masking, StableAdamW).

Every run ends when its budget is spent (optimizer.budget_hours, train/budget.py);
each recipe's own schedule is stretched over the budget's time (warmup and decay keep
their share of the run), so no recipe is cut off mid-schedule. Compilation counts
against the budget, as in the crammed recipe. Printed per recipe: eval MLM accuracy,
steps, tokens/s (median, min, max over the logging windows after the first), the
padding fraction of its training rows; the last line is one JSON object.
"""

import argparse
import json
import os
import pathlib
import statistics
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

CONFIGS = {"bert": "quickstart.py", "crammed": "crammed_quickstart.py",
           "modernbert": "modernbert_quickstart.py"}
UPPER = 1_000_000  # steps: only a bound; the budget ends every run


def budget_config(name: str, minutes: float, window: int, eval_steps: int = 10, model=None):
    """The recipe's config with the budget set and its schedule scaled to UPPER steps;
    `model` (the smoke test's) sets model keys over the recipe's."""
    from pretrainx.config import load_file
    c = load_file(str(REPO / "configs" / CONFIGS[name]))
    c.model.update(model or {})
    scale = UPPER / c.total_steps
    o = c.optimizer
    o.warmup_steps = round(o.warmup_steps * scale)
    if "decay_steps" in o:
        o.decay_steps = round(o.decay_steps * scale)
    o.budget_hours = minutes / 60
    c.total_steps = UPPER
    c.log_every = window
    c.eval_every = c.checkpoint_every = UPPER
    c.eval_steps = eval_steps
    c.mesh.data = 1
    return c


def padding(cfg) -> float:
    from pretrainx import config as config_lib, objectives
    from pretrainx.data.tokenizers import load_tokenizer
    tokenizer = load_tokenizer(cfg.data.tokenizer, lower_case=cfg.data.lower_case)
    rows = objectives.build(cfg, tokenizer).examples(cfg.data.train_files,
                                                     config_lib.phases(cfg)[0], True)
    real = sum(int(r["input_ids"].size) for r in rows)
    return 1 - real / (len(rows) * cfg.seq_len)


def run(name: str, minutes: float, window: int, eval_steps: int = 10, model=None) -> dict:
    import jax
    from pretrainx.train import loop
    cfg = budget_config(name, minutes, window, eval_steps, model)
    workdir = tempfile.mkdtemp(prefix=f"pretrainx-recipes-{name}-")
    out = loop.train(cfg, workdir, devices=jax.devices()[:1])
    with open(os.path.join(workdir, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    rates = [r["tokens_per_sec"] for r in records if "tokens_per_sec" in r][1:] or [0.0]
    return {"eval_mlm_accuracy": round(out["eval"]["mlm_accuracy"], 4),
            "eval_mlm_loss": round(out["eval"]["mlm_loss"], 4),
            "steps": out["eval"]["step"], "params": out["params"],
            "tokens_per_sec": {"median": round(statistics.median(rates)),
                               "min": round(min(rates)), "max": round(max(rates))},
            "padding_fraction": round(padding(cfg), 4),
            "train_mask_prob": cfg.data.mask_prob, "seq_len": cfg.seq_len}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget_minutes", type=float, default=10.0)
    parser.add_argument("--recipes", default="bert,crammed,modernbert")
    parser.add_argument("--window", type=int, default=100)
    parser.add_argument("--eval_steps", type=int, default=10, help="held-out batches")
    parser.add_argument("--model", type=json.loads, default={},
                        help="smoke test: model keys over every recipe's, as JSON")
    args = parser.parse_args()
    results = {}
    for name in args.recipes.split(","):
        results[name] = run(name, args.budget_minutes, args.window, args.eval_steps, args.model)
        r = results[name]
        print(f"{name:10s} eval MLM accuracy {r['eval_mlm_accuracy']:.4f} (15% masking) after "
              f"{r['steps']:,} steps; {r['params']:,} parameters; tokens/s "
              f"{r['tokens_per_sec']['median']:,} (min {r['tokens_per_sec']['min']:,}, max "
              f"{r['tokens_per_sec']['max']:,}); padding {r['padding_fraction']:.3f}",
              file=sys.stderr)
    if "bert" in results:
        for name, r in results.items():
            r["over_bert"] = round(r["eval_mlm_accuracy"]
                                   - results["bert"]["eval_mlm_accuracy"], 4)
    print(json.dumps({"budget_seconds": args.budget_minutes * 60, "recipes": results}))


if __name__ == "__main__":
    main()
