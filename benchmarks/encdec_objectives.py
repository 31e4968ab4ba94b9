"""Encoder-decoder objectives at CPU size and equal compute (issue 87): T5's span
corruption against UL2's mixture against PrefixLM, from scratch; and T5Gemma adapted
from a Gemma 2 decoder pretrained here against the same encoder-decoder from scratch.

    python benchmarks/encdec_objectives.py [--workdir=/tmp/encdec] [--steps=300]
        [--seeds=0,1,2] [--settings=sst2_2000] [--lrs=1e-3] [--eval_steps=16]

1. From scratch, configs/ul2.py:quickstart's T5 (2 + 2 layers x 256, the UL2 vocabulary)
   on the bundled novels, one run per seed and arm: `span` (T5's span corruption,
   configs/t5_quickstart.py at inputs of 256: targets of 58), `ul2` (the mixture, mode
   tokens) and `prefixlm` (configs/ul2.py:prefixlm). Equal compute is equal training
   FLOPs (each objective's own count, padding included): `ul2` and `prefixlm` train
   `--steps` rows of 256 + 256, `span` as many steps as the same FLOPs buy at 256 + 58.
2. Adaptation, configs/t5gemma.py:quickstart (2 + 2 Gemma 2 layers x 128): `gemma2`
   trains the decoder (configs/gemma2.py:quickstart, `--steps`), `adapted` starts both
   stacks from it and trains UL2 `--steps`, `scratch` trains UL2 `--steps` from random,
   `scratch_total` from random for the FLOPs of gemma2 + adapted together (T5Gemma's
   claim is that adapting beats scratch; this is the equal-total-compute arm), and
   `adapted_kd` T5Gemma's other recipe, PrefixLM + KD with the decoder it starts from as
   the teacher (its FLOPs count the student's training; the teacher's forward adds
   about a third of the decoder's per step, not counted).
3. Held out (Alice, never trained on), every model at the same rows of each of
   `--eval_denoisers` (default R:3:0.15, T5's span corruption, and S, PrefixLM): target
   cross-entropy, with the mode token the model trained with (none for span and
   prefixlm). Then text-to-text fine-tuning on each setting of
   benchmarks/pretrain_pays.py (SST-2's first 2,000 rows, 10 epochs), the dev score at
   the best epoch and rate (T5's report; text to text holds no rows out), `[NLU]` leading
   the inputs of models that trained with it.
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

import ml_collections  # noqa: E402
import pretrain_pays  # noqa: E402  (its fine-tuning settings and choice rule)

from pretrainx import config as config_lib, objectives, pretrain  # noqa: E402

CONFIGS = HERE.parent / "configs"
SCRATCH = ("span", "ul2", "prefixlm")
ADAPTATION = ("gemma2", "adapted", "scratch", "scratch_total", "adapted_kd")
MODE_TOKENS = {"R": "[NLU]", "X": "[NLG]", "S": "[S2S]"}  # what the UL2 arms trained with


def _load(name: str):
    return config_lib.load_file(str(CONFIGS / name))


def step_flops(cfg) -> float:
    """Training FLOPs of one step of cfg's first phase (the objective's own count)."""
    phase = config_lib.phases(cfg)[0]
    objective = objectives.build(phase.cfg, None)
    return objective.flops_per_token(phase) * phase.seq_len * phase.cfg.global_batch_size


def _scaled(cfg, steps: int, seed: int, eval_steps: int):
    """cfg at `steps` (warmup the same share of the run), evaluated and saved at its end."""
    share = steps / cfg.total_steps
    cfg.optimizer.warmup_steps = max(1, round(cfg.optimizer.warmup_steps * share))
    cfg.total_steps = steps
    cfg.eval_every = cfg.checkpoint_every = steps
    cfg.seed, cfg.eval_steps = seed, eval_steps
    return cfg


def configs(steps: int, seed: int, eval_steps: int) -> dict:
    """{arm: config} at equal compute (steps of span and scratch_total from FLOPs)."""
    ul2 = _scaled(_load("ul2.py:quickstart"), steps, seed, eval_steps)
    span = _load("t5_quickstart.py")
    span.seq_len = ul2.seq_len
    span.data.tokenizer = ul2.data.tokenizer
    span_steps = round(steps * step_flops(ul2) / step_flops(span))
    t5g = _load("t5gemma.py:quickstart")
    gemma2 = _load("gemma2.py:quickstart")
    total = round(steps * (1 + step_flops(gemma2) / step_flops(t5g)))
    out = {"span": _scaled(span, span_steps, seed, eval_steps), "ul2": ul2,
           "prefixlm": _scaled(_load("ul2.py:prefixlm"), steps, seed, eval_steps),
           "gemma2": _scaled(gemma2, steps, seed, eval_steps),
           "adapted": _scaled(_load("t5gemma.py:quickstart"), steps, seed, eval_steps),
           "scratch": _scaled(t5g, steps, seed, eval_steps),
           "scratch_total": _scaled(_load("t5gemma.py:quickstart"), total, seed, eval_steps),
           "adapted_kd": _scaled(_load("t5gemma.py:quickstart"), steps, seed, eval_steps)}
    out["adapted_kd"].data.update(denoisers="S", denoiser_weights="1", mode_tokens="")
    return out


def _done(workdir: pathlib.Path, steps: int) -> bool:
    path = workdir / "metrics.jsonl"
    if not path.exists():
        return False
    with open(path, encoding="utf-8") as f:
        return any(r.get("split") == "eval" and r.get("step") == steps for r in map(json.loads, f))


def train(cfg, workdir: pathlib.Path) -> float:
    """Seconds it took (0 when an earlier run of this script did it)."""
    if _done(workdir, cfg.total_steps):
        return 0.0
    start = time.perf_counter()
    pretrain.train(cfg, str(workdir))
    return time.perf_counter() - start


def heldout(cfg, workdir: pathlib.Path, denoiser: str) -> float:
    """Target cross-entropy of workdir's model on `denoiser`'s held-out rows, built as
    UL2's quickstart builds them for cfg's family, with the mode token cfg trained with."""
    done = workdir / f"heldout_{denoiser}.json"
    if not done.exists():
        base = _load("t5gemma.py:quickstart" if cfg.objective == "t5gemma_ul2"
                     else "ul2.py:quickstart")
        c = ml_collections.ConfigDict(base.to_dict())
        c.model, c.eval_steps, c.seed = cfg.model, cfg.eval_steps, 0
        kind = denoiser[0]
        trained_modes = cfg.data.get("mode_tokens", "")
        c.data.denoisers, c.data.denoiser_weights = denoiser, "1"
        c.data.mode_tokens = f"{kind}={MODE_TOKENS[kind]}" if trained_modes else ""
        if cfg.get("distill") and cfg.distill.teacher:
            # the student alone (its checkpoint holds the teacher too): read through
            # init_from, one step at a rate of 1e-30 (Adam's first step moves a weight
            # by about the rate: float32 keeps every one), then evaluated
            c.update(init_from=str(workdir), total_steps=1, eval_every=1, checkpoint_every=1)
            c.optimizer.update(learning_rate=1e-30, warmup_steps=0)
            got = pretrain.train(c, str(workdir / f"student_{denoiser}"))["eval"]
        else:
            got = pretrain.evaluate(c, str(workdir))["eval"]
        done.write_text(json.dumps(got))
    return json.loads(done.read_text())["cross_entropy"]


def finetune(work, setting, cfg, workdir, seed, lrs, tag, shrink) -> float:
    """The dev score (points) at the best epoch and rate, as T5's paper reports (text to
    text chooses on dev; no rows are held out), `[NLU]` first in the inputs of a model that
    trained with mode tokens; each fine-tuning read back when done before."""
    scores = []
    for lr in lrs:
        c = pretrain_pays.finetune_config(setting, cfg.model.to_dict(), cfg.data.tokenizer,
                                          str(workdir), seed, lr, shrink)
        c.data.holdout_examples = 0
        if cfg.data.get("mode_tokens", ""):
            c.data.mode_token = MODE_TOKENS["R"]
        best = pretrain_pays.finetune_once(
            c, work / "finetune" / setting / f"{tag}_s{seed}_lr{lr:g}")
        scores.append(100 * best["main"])
    return max(scores)


def _summary(values: list) -> dict:
    return {"per_seed": values, "median": statistics.median(values), "min": min(values),
            "max": max(values)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default="/tmp/encdec")
    parser.add_argument("--steps", type=int, default=300, help="the UL2 arms' steps")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--arms", default=",".join(SCRATCH + ADAPTATION))
    parser.add_argument("--settings", default="sst2_2000")
    parser.add_argument("--lrs", default="1e-3")
    parser.add_argument("--eval_denoisers", default="R:3:0.15,S")
    parser.add_argument("--eval_steps", type=int, default=16, help="held-out batches of 8")
    parser.add_argument("--max_rows", type=int, default=0, help="smoke test: rows a setting")
    parser.add_argument("--epochs", type=int, default=0, help="smoke test: epochs")
    args = parser.parse_args()
    work = pathlib.Path(args.workdir)
    seeds = [int(s) for s in args.seeds.split(",")]
    lrs = [float(x) for x in args.lrs.split(",")]
    arms = args.arms.split(",")
    unknown = sorted(set(arms) - set(SCRATCH + ADAPTATION))
    if unknown or ({"adapted", "adapted_kd"} & set(arms) and "gemma2" not in arms):
        raise SystemExit(f"--arms: {', '.join(unknown) or 'adapted needs gemma2'} "
                         f"(arms: {', '.join(SCRATCH + ADAPTATION)})")
    rows = {arm: {"seconds": 0.0} for arm in arms}
    by_seed = {arm: [] for arm in arms}
    for seed in seeds:
        cfgs = configs(args.steps, seed, args.eval_steps)
        decoder = str(work / "pretrain" / f"gemma2_s{seed}")
        cfgs["adapted"].adapt.encoder_from = cfgs["adapted_kd"].adapt.encoder_from = decoder
        cfgs["adapted_kd"].distill.teacher = decoder
        for arm in arms:
            cfg, workdir = cfgs[arm], work / "pretrain" / f"{arm}_s{seed}"
            rows[arm]["seconds"] += train(cfg, workdir)
            got = {"steps": cfg.total_steps, "tflops": step_flops(cfg) * cfg.total_steps / 1e12}
            if arm != "gemma2":
                for denoiser in args.eval_denoisers.split(","):
                    got[f"heldout_{denoiser}"] = heldout(cfg, workdir, denoiser)
                for setting in args.settings.split(","):
                    got[setting] = finetune(work, setting, cfg, workdir, seed, lrs, arm,
                                            (args.max_rows, args.epochs))
            by_seed[arm].append(got)
            print(f"{arm} seed {seed}: {json.dumps(got)}", flush=True)
    table = {}
    for arm in arms:
        runs = by_seed[arm]
        table[arm] = {"seconds": round(rows[arm]["seconds"]), "steps": runs[0]["steps"],
                      "tflops": round(runs[0]["tflops"], 3),
                      **{k: _summary([r[k] for r in runs]) for k in runs[0]
                         if k not in ("steps", "tflops")}}
        print(f"{arm}: " + ", ".join(
            f"{k} {v['median']:.4g} [{v['min']:.4g}, {v['max']:.4g}]"
            for k, v in table[arm].items() if isinstance(v, dict)), flush=True)
    print(json.dumps({"steps": args.steps, "seeds": seeds, "arms": table}))


if __name__ == "__main__":
    main()
