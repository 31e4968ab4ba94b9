"""MDLM's bound against a decoder's perplexity at CPU size (Sahoo et al. 2024 compare the
two on LM1B and OpenWebText, trained alike: their bound stays above the autoregressive
model's perplexity, by less than earlier diffusion models'). Both are ModernBERT's
network at 3 layers x 128, trained for the same steps on the same rows of the bundled
novels: configs/mdlm.py:quickstart (masked diffusion, bidirectional) and
configs/ettin_quickstart.py:decoder (next-token prediction, causal).

    python benchmarks/mdlm_bound.py [--workdir=/tmp/biphasic] [--steps=1000] [--seeds=0,1,2]

Held out (Alice): the MDLM run's bound on the perplexity, exp(ELBO per token), and the
decoder's perplexity; per seed, then median, min and max, and their ratio. With the
--workdir of benchmarks/biphasic.py its decoder runs (pretrain/clm_sN) are reused.
The last line is one JSON object.
"""

import argparse
import json
import os
import pathlib
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import biphasic  # noqa: E402  (its configs at a step count, its cached runs)

from pretrainx import config as config_lib  # noqa: E402


def _mdlm_config(steps: int, seed: int, model: dict, eval_steps: int):
    cfg = config_lib.load_file(str(HERE.parent / "configs" / "mdlm.py:quickstart"))
    decoder = biphasic._config("clm", steps, seed, model, eval_steps)
    cfg.model.update(model)
    cfg.model.local_rope_theta = decoder.model.local_rope_theta  # Ettin's one RoPE base
    for key in ("total_steps", "eval_every", "checkpoint_every", "seed", "eval_steps"):
        cfg[key] = decoder[key]
    cfg.optimizer.warmup_steps = decoder.optimizer.warmup_steps
    cfg.optimizer.decay_steps = decoder.optimizer.decay_steps
    return cfg


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default="/tmp/biphasic")
    parser.add_argument("--steps", type=int, default=0, help="0: the quickstart's 1,500")
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--eval_steps", type=int, default=0)
    parser.add_argument("--model", type=json.loads, default={})
    args = parser.parse_args()
    work = pathlib.Path(args.workdir)
    seeds = [int(s) for s in args.seeds.split(",")]
    rows = []
    for seed in seeds:
        clm = biphasic._train(biphasic._config("clm", args.steps, seed, args.model,
                                               args.eval_steps), work / "pretrain" / f"clm_s{seed}")
        mdlm = biphasic._train(_mdlm_config(args.steps, seed, args.model, args.eval_steps),
                               work / "pretrain" / f"mdlm_s{seed}")
        rows.append({"seed": seed, "mdlm_bound_perplexity": mdlm["eval"]["bound_perplexity"],
                     "clm_perplexity": clm["eval"]["perplexity"]})
        print(f"seed {seed}: MDLM bound {rows[-1]['mdlm_bound_perplexity']:.1f}, CLM "
              f"perplexity {rows[-1]['clm_perplexity']:.1f}", flush=True)
    ratios = [r["mdlm_bound_perplexity"] / r["clm_perplexity"] for r in rows]
    print(json.dumps({"steps": args.steps or 1500, "runs": rows,
                      "mdlm_bound": biphasic._summary([r["mdlm_bound_perplexity"] for r in rows]),
                      "clm_perplexity": biphasic._summary([r["clm_perplexity"] for r in rows]),
                      "ratio": biphasic._summary(ratios)}))


if __name__ == "__main__":
    main()
