"""A decoder turned into a sentence encoder, stage by stage, at CPU size (LLM2Vec's
stages; BidirLM's and Gemma Encoder's questions), against an encoder trained from
scratch at the same total compute.

    python benchmarks/decoder_to_encoder.py [--workdir=/tmp/decoder_to_encoder]
        [--clm_steps=300] [--mntp_steps=200] [--seeds=0,1,2] [--simcse_rows=2000]

Per seed:
  base  configs/gemma3.py:quickstart, causal LM for --clm_steps on the bundled novels.
  (a)   the base as it is: causal attention, the last token's state.
  (b)   the same weights read bidirectionally (model.causal=False), mean-pooled.
  (c)   (b) after --mntp_steps of MNTP (configs/llm2vec.py:quickstart), mean-pooled.
  (d)   (c) after unsupervised SimCSE: one epoch over --simcse_rows STS-B train
        sentences (their scores unread), dropout 0.1, in-batch negatives.
  (e)   (d) after supervised contrastive training on STS-B's train pairs scored >= 4,
        with Matryoshka widths of the whole, a half and a quarter of the width (64, 32
        and 16 at the quickstart's; each width scored).
  enc   the same network trained from scratch with gemma3_mntp (bidirectional, masked)
        for --clm_steps + --mntp_steps, then the same (d) and (e) stages.
Scores: STS-B dev Spearman of cosines (1,500 pairs), and the retrieval check: each of
the last 200 positive training pairs' first sentence ranks every one's second (MRR@10);
those pairs are held out of the supervised stage, and SimCSE reads sentences from the
split's start. Median, min and max over seeds.
The last line is one JSON object. Re-running with the same --workdir reuses what is done.
"""

import argparse
import json
import os
import pathlib
import statistics
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(REPO))

import jax  # noqa: E402
import numpy as np  # noqa: E402

from pretrainx import config as config_lib, interop, models, pretrain, registry  # noqa: E402
from pretrainx.data.tokenizers import load_tokenizer  # noqa: E402
from pretrainx.finetune import contrastive, glue, loop as finetune_loop  # noqa: E402
from pretrainx.finetune.config import finetune_config  # noqa: E402

GLUE = REPO.parent / "shared" / "data" / "glue"
HELD = 200  # positive pairs kept out of every stage, for the retrieval check


def _pretrained(workdir: pathlib.Path, steps: int) -> bool:
    """The run at `workdir` evaluated its last step (a stopped one resumes)."""
    if not (workdir / "metrics.jsonl").exists():
        return False
    with open(workdir / "metrics.jsonl", encoding="utf-8") as f:
        return any(r.get("split") == "eval" and r.get("step") == steps for r in map(json.loads, f))


def _pretrain(cfg, workdir: pathlib.Path) -> pathlib.Path:
    if not _pretrained(workdir, cfg.total_steps):
        pretrain.train(cfg, str(workdir))
    return workdir


def _short(cfg, steps: int, seed: int, model: dict):
    cfg.model.update(model)
    cfg.total_steps = cfg.eval_every = cfg.checkpoint_every = steps
    cfg.log_every = max(1, steps // 4)
    cfg.optimizer.warmup_steps = max(1, min(cfg.optimizer.warmup_steps, steps // 10))
    cfg.seed = seed
    return cfg


def _contrastive(init_from, workdir: pathlib.Path, seed: int, glue_dir: str, simcse: bool,
                 rows: int, dims: str = "") -> pathlib.Path:
    c = finetune_config()
    c.task, c.init_from, c.seed = "contrastive", str(init_from), seed
    c.data.glue_dir, c.data.simcse, c.data.matryoshka_dims = glue_dir, simcse, dims
    c.data.holdout_examples = 0 if simcse else HELD  # the retrieval pairs: out of training
    c.data.max_train_examples = rows
    c.seq_len, c.global_batch_size, c.eval_batch_size, c.epochs = 32, 32, 128, 1
    c.optimizer.learning_rate = 1e-3 if not simcse else 3e-4
    if not (workdir / "finetune.json").exists():  # written when the run completes
        finetune_loop.train(c, str(workdir))
    return workdir


def _embed(path, texts: list, pooling: str, model_keys: dict | None = None) -> np.ndarray:
    """[N, H] sentence embeddings of `texts` by the model at `path` (a workdir, its
    weights as the pretraining or contrastive run left them), pooled by `pooling`,
    with `model_keys` set over its own."""
    pre = interop.load(str(path))
    pre.model.update(model_keys or {})
    family = models.family(pre.family)
    tok = load_tokenizer(pre.tokenizer, lower_case=pre.lower_case,
                         layout=family.tokenizer_layout)
    frame = lambda pieces: registry.text_ids(family, tok, pieces)  # noqa: E731
    arrays = contrastive.encode_rows([(t,) for t in texts], tok, 32, frame)
    model = family.finetune_model(pre.model, f"embed_{pooling}", 0, None)
    run = jax.jit(lambda p, b: model.apply({"params": p}, b)["logits"])
    out = []
    for start in range(0, len(texts), 256):
        batch = {k: arrays[k][start:start + 256, 0] for k in contrastive.INPUTS}
        out.append(np.asarray(run(pre.params, batch)))
    return np.concatenate(out)


def _scores(path, pooling: str, sts, held, model_keys=None, dims=()) -> dict:
    pairs = [t for t in sts.texts]
    left = _embed(path, [a for a, _ in pairs], pooling, model_keys)
    right = _embed(path, [b for _, b in pairs], pooling, model_keys)
    out = contrastive.sts_scores(np.stack([left, right], 1), np.asarray(sts.labels), dims)
    q = _embed(path, [a for a, _ in held], pooling, model_keys)
    d = _embed(path, [b for _, b in held], pooling, model_keys)
    out["mrr_at_10"] = contrastive.retrieval_scores(np.stack([q, d], 1))["mrr_at_10"]
    return {k: v for k, v in out.items() if k.startswith(("spearman", "mrr"))}


def _summary(values: list) -> dict:
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default="/tmp/decoder_to_encoder")
    parser.add_argument("--clm_steps", type=int, default=300)
    parser.add_argument("--mntp_steps", type=int, default=200)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--simcse_rows", type=int, default=2000)
    parser.add_argument("--pair_rows", type=int, default=0, help="0: every positive pair")
    parser.add_argument("--glue_dir", default=str(GLUE))
    parser.add_argument("--model", type=json.loads, default={},
                        help="smoke test: model keys over the quickstart's, as JSON")
    args = parser.parse_args()
    work = pathlib.Path(args.workdir)
    task = glue.get_task("stsb")
    files = glue.task_files(task, args.glue_dir)
    sts = glue.read_split(task, files["dev"][0], True)
    train = glue.read_split(task, files["train"], True)
    positives = [t for t, y in zip(train.texts, train.labels) if y >= contrastive.STS_POSITIVE]
    rows = args.pair_rows and min(args.pair_rows + HELD, len(positives))
    held = positives[:rows or None][-HELD:]  # the supervised stage's own holdout
    table = {}
    for seed in [int(s) for s in args.seeds.split(",")]:
        s = work / f"s{seed}"
        clm = config_lib.load_file(str(REPO / "configs" / "gemma3.py:quickstart"))
        base = _pretrain(_short(clm, args.clm_steps, seed, args.model), s / "base")
        mntp = config_lib.load_file(str(REPO / "configs" / "llm2vec.py:quickstart"))
        mntp = _short(mntp, args.mntp_steps, seed, args.model)
        mntp.init_from = str(base)
        converted = _pretrain(mntp, s / "mntp")
        scratch = config_lib.load_file(str(REPO / "configs" / "llm2vec.py:quickstart"))
        encoder = _pretrain(_short(scratch, args.clm_steps + args.mntp_steps, seed, args.model),
                            s / "encoder")
        stages = {"a_causal_last": _scores(base, "last", sts, held),
                  "b_bidirectional_mean": _scores(base, "mean", sts, held, {"causal": False}),
                  "c_mntp_mean": _scores(converted, "mean", sts, held),
                  "encoder_mean": _scores(encoder, "mean", sts, held)}
        width = interop.load(str(converted)).model.hidden_size
        widths = (width, width // 2, width // 4)
        for name, start in (("", converted), ("encoder_", encoder)):
            simcse = _contrastive(start, s / f"{name}simcse", seed, args.glue_dir, True,
                                  args.simcse_rows)
            stages[f"{name or 'd_'}simcse"] = _scores(simcse, "mean", sts, held)
            tuned = _contrastive(simcse, s / f"{name}supervised", seed, args.glue_dir, False,
                                 rows, ",".join(map(str, widths)))
            stages[f"{name or 'e_'}supervised"] = _scores(tuned, "mean", sts, held, dims=widths)
        for stage, got in stages.items():
            for metric, value in got.items():
                table.setdefault(stage, {}).setdefault(metric, []).append(value)
        print(f"seed {seed}: " + "; ".join(f"{k} {v['spearman']:.3f}/{v['mrr_at_10']:.3f}"
                                           for k, v in stages.items()), flush=True)
    summary = {stage: {m: _summary(v) for m, v in metrics.items()}
               for stage, metrics in table.items()}
    for stage, metrics in summary.items():
        print(f"{stage}: STS-B dev Spearman {metrics['spearman']['median']:.3f} "
              f"[{metrics['spearman']['min']:.3f}, {metrics['spearman']['max']:.3f}], "
              f"retrieval MRR@10 {metrics['mrr_at_10']['median']:.3f}", flush=True)
    print(json.dumps({"clm_steps": args.clm_steps, "mntp_steps": args.mntp_steps,
                      "stages": summary, "per_seed": table}))


if __name__ == "__main__":
    main()
