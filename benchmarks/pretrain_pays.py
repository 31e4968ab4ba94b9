"""Does pretraining pay? A ModernBERT-shaped model pretrained for up to 30 CPU minutes,
then fine-tuned against the same model from random weights where labels are scarce.

    python benchmarks/pretrain_pays.py [--workdir=/tmp/pretrain_pays] [--minutes=30]
        [--settings=sst2_500,sst2_2000,conll_1000,mrpc] [--seeds=0,1,2]
        [--lrs=1e-4,3e-4,1e-3] [--plot=docs/pretrain_pays.png] [--only=pretrain]

1. Pretraining text: every English file under ../shared/data/corpus/ (the novels but
   Alice, which is the MLM eval; WikiText-2's raw articles; Tiny Shakespeare; Botchan;
   BERT's sample) and the unlabelled text of the tasks' training files (SST-2's
   sentences, MRPC's pairs, CoNLL-2003's sentences: task-adaptive pretraining,
   Gururangan et al. 2020), each read by pretrainx's own readers and written out one
   sentence a line. An 8k lower-cased SentencePiece vocabulary is trained on it.
2. The best recipe of benchmarks/recipes.py (ModernBERT's: 30% masking, packed
   documents, StableAdamW, warmup-stable-decay) at 3 layers x 128, on a wall-clock
   budget (optimizer.budget_hours), a checkpoint every --checkpoint_every steps kept
   for the learning curve.
3. Every setting (the first N labelled training rows of a task; 20% of them held out)
   is fine-tuned from the pretrained checkpoint and from random weights of the same
   shape, over --seeds x --lrs. For each arm and seed the learning rate and the epoch
   are the ones with the best score on the held-out rows (finetune's
   data.holdout_examples); the dev score at that choice is what is reported, as mean and
   standard deviation over seeds. Nothing is chosen on dev.
4. The setting with the largest gap is fine-tuned again from earlier checkpoints (over
   the learning rates the held-out rows chose for the final one): the gap against
   pretraining minutes, drawn to --plot (matplotlib, when installed).

The last line is one JSON object: best_setting, best_gap_points (mean over seeds),
best_gap_spread (the larger of the two arms' standard deviations over seeds), every
setting's arms, and the curve. Re-running with the same --workdir reuses what is done.
Needs ../shared/data beside the repository.
"""

import argparse
import json
import os
import pathlib
import time

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "data"
CORPUS = SHARED / "corpus"
EVAL_BOOK = CORPUS / "gutenberg" / "pg11_alice_in_wonderland.txt"

# name: (task, labelled rows, of which held out, seq_len, epochs, batch)
SETTINGS = {
    "sst2_500": ("sst2", 500, 100, 64, 10, 16),
    "sst2_2000": ("sst2", 2000, 400, 64, 10, 32),
    "conll_1000": ("conll2003", 1000, 200, 128, 10, 16),
    "mrpc": ("mrpc", 3668, 368, 128, 5, 32),
}


def english_sources() -> list:
    """(name, path, format, text_field) of every English text this benchmark reads."""
    books = sorted(p for p in (CORPUS / "gutenberg").glob("*.txt") if p != EVAL_BOOK)
    out = [(p.stem, p, "auto", "text") for p in books]
    out += [(f"wiki_{s}", CORPUS / "wikitext-2-raw" / f"wiki.{s}.raw", "auto", "text")
            for s in ("valid", "test")]
    out += [("shakespeare", CORPUS / "tinyshakespeare" / "input.txt", "auto", "text"),
            ("botchan", CORPUS / "misc" / "botchan.txt", "auto", "text"),
            ("bert_sample", CORPUS / "misc" / "bert_sample_text.txt", "auto", "text")]
    glue = SHARED / "glue"
    out += [("task_sst2", glue / "SST-2" / "train.tsv", "tsv", "sentence"),
            ("task_mrpc", glue / "MRPC" / "train.tsv", "tsv", "#1 String,#2 String"),
            ("task_conll2003", glue / "CoNLL-2003" / "train.txt", "conll", "text")]
    return out


def write_corpus(folder: pathlib.Path, sources) -> tuple:
    """Each source as pretrainx reads it, one sentence a line, a blank line between
    documents (data.format=sentences reads it back unchanged), and its word count
    beside it (NAME.words), so that a rerun on the same folder reads neither again.
    Returns (files, words)."""
    from pretrainx.data import sources as reader
    folder.mkdir(parents=True, exist_ok=True)
    files, words = [], {}
    for name, path, fmt, field in sources:
        out, count = folder / f"{name}.txt", folder / f"{name}.words"
        if not (out.exists() and count.exists()):
            documents, _ = reader.read_documents(str(path), fmt, text_field=field)
            for target, text in ((out, "\n\n".join("\n".join(d) for d in documents) + "\n"),
                                 (count, str(sum(len(s.split()) for d in documents
                                                 for s in d)))):
                tmp = target.with_name(target.name + ".tmp")
                tmp.write_text(text, encoding="utf-8")
                tmp.rename(target)
        words[name] = int(count.read_text(encoding="utf-8"))
        files.append(str(out))
    return files, words


def pretrain_config(tokenizer: str, files: list, minutes: float, checkpoint_every: int,
                    vocab_size: int = 8192, max_steps: int = 0, model=None):
    import importlib.util
    spec = importlib.util.spec_from_file_location(
        "modernbert_quickstart", REPO / "configs" / "modernbert_quickstart.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    c = module.get_config()
    c.data.train_files = ",".join(files)
    c.data.format = "sentences"
    c.data.eval_files = str(EVAL_BOOK)
    c.data.tokenizer = tokenizer
    c.model.vocab_size = vocab_size
    c.model.update(model or {})  # the smoke test's smaller network
    # The schedule's clock: total_steps is its resolution (and a bound the budget ends
    # well before at ~6 steps/s); warmup and the 1 - sqrt decay in the same steps.
    # max_steps (the smoke test) ends the run at a step count whatever the machine's
    # speed, so that the checkpoints the curve reads exist on a slow machine too.
    c.optimizer.budget_hours = minutes / 60.0
    c.total_steps = max_steps or 100_000
    c.optimizer.warmup_steps = c.total_steps // 50  # 2,000 of 100,000
    c.optimizer.decay_steps = max(1, c.total_steps // 5)  # the last 20% of the time
    c.eval_every = 4 * checkpoint_every
    c.checkpoint_every = checkpoint_every
    c.keep_checkpoints = 100
    c.log_every = 250
    return c


def pretrain(work: pathlib.Path, args) -> dict:
    """Tokenizer and pretraining, or what an earlier run of this script left."""
    done = work / "pretrain.json"
    if done.exists():
        return json.loads(done.read_text())
    from pretrainx.data.tokenizers import train_sentencepiece
    from pretrainx.train import loop
    t = time.perf_counter()
    sources = ([(pathlib.Path(f).stem, f, "auto", "text") for f in args.corpus.split(",")]
               if args.corpus else english_sources())
    files, words = write_corpus(work / "corpus", sources)
    tokenizer = str(work / "spm.model")
    if not os.path.exists(tokenizer):
        train_sentencepiece(files, str(work / "spm"), vocab_size=args.vocab_size)
    prepare_s = time.perf_counter() - t
    cfg = pretrain_config(tokenizer, files, args.minutes, args.checkpoint_every,
                          args.vocab_size, args.max_steps, args.model)
    t = time.perf_counter()
    result = loop.train(cfg, str(work / "pretrain"))
    elapsed = json.loads((work / "pretrain" / "budget.json").read_text())
    report = {"words": words, "tokenizer": tokenizer, "prepare_s": round(prepare_s, 1),
              "pretrain_s": round(time.perf_counter() - t, 1), "model": cfg.model.to_dict(),
              "eval": result.get("eval"), "last_step": result["train"]["step"],
              "minutes_at_step": {k: v / 60 for k, v in elapsed.items()}}
    done.write_text(json.dumps(report, indent=1))
    return report


def finetune_config(setting: str, model: dict, tokenizer: str, init_from: str, seed: int,
                    lr: float, shrink=(0, 0)):
    """`shrink` (rows, epochs), for the smoke test: at most that many labelled rows (a
    fifth held out) and dev rows, and that many epochs; 0 keeps the setting's."""
    import ml_collections
    from pretrainx.finetune.config import finetune_config as base
    task, rows, held_out, seq_len, epochs, batch = SETTINGS[setting]
    c = base()
    if shrink[0]:
        rows, held_out, batch = min(rows, shrink[0]), min(rows, shrink[0]) // 5, 8
        c.data.max_eval_examples = shrink[0]
    epochs = shrink[1] or epochs
    c.task, c.init_from, c.seed = task, init_from, seed
    c.data.glue_dir = str(SHARED / "glue")
    c.data.tokenizer = tokenizer
    c.data.max_train_examples = rows
    c.data.holdout_examples = held_out
    c.model = ml_collections.ConfigDict(model)
    c.seq_len, c.epochs, c.global_batch_size = seq_len, epochs, batch
    c.log_every = 1000
    c.optimizer.learning_rate = lr
    return c


def finetune_once(cfg, workdir: pathlib.Path) -> dict:
    """{holdout, dev} at the epoch the held-out rows chose; read back when done before."""
    from pretrainx.finetune import loop
    done = workdir / "choice.json"
    if not done.exists():
        best = loop.train(cfg, str(workdir))["best"]
        done.write_text(json.dumps(best))
    return json.loads(done.read_text())


def run_arm(work, setting, model, tokenizer, init_from, seeds, lrs, tag, shrink) -> dict:
    """Per seed: the lr whose best epoch scored highest on the held-out rows, and the
    dev score there; their mean and standard deviation over seeds (in points)."""
    from pretrainx.compare.cells import chosen_by_holdout
    return chosen_by_holdout(seeds, lrs, lambda seed, lr: finetune_once(
        finetune_config(setting, model, tokenizer, init_from, seed, lr, shrink),
        work / "finetune" / setting / f"{tag}_s{seed}_lr{lr:g}"))


def gap(arms: dict) -> tuple:
    return (arms["pretrained"]["mean"] - arms["random_init"]["mean"],
            max(arms["pretrained"]["std"], arms["random_init"]["std"]))


def plot(path: str, curve: list, setting: str, spread: float) -> str:
    try:
        import matplotlib
        matplotlib.use("Agg")
        from matplotlib import pyplot as plt
    except ImportError:
        return "matplotlib is not installed: no picture"
    fig, ax = plt.subplots(figsize=(6, 3.6))
    xs = [0.0] + [p["minutes"] for p in curve]
    ys = [0.0] + [p["gap_points"] for p in curve]
    ax.plot(xs, ys, marker="o", label=f"{setting}: pretrained - random init")
    ax.fill_between(xs, [y - spread for y in ys], [y + spread for y in ys], alpha=0.15,
                    label="+- the larger arm's std at the end")
    ax.axhline(3.0, color="grey", linestyle="--", linewidth=1, label="goal: +3 points")
    ax.axhline(0.0, color="black", linewidth=0.5)
    ax.set_xlabel("pretraining minutes (2 CPU cores)")
    ax.set_ylabel("dev gap, points (mean of seeds)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workdir", default="/tmp/pretrain_pays")
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--checkpoint_every", type=int, default=1000)
    parser.add_argument("--settings", default=",".join(SETTINGS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--lrs", default="1e-4,3e-4,1e-3")
    parser.add_argument("--curve_points", type=int, default=3,
                        help="earlier checkpoints the best setting is fine-tuned from")
    parser.add_argument("--plot", default="", help="PNG of the gap against minutes")
    parser.add_argument("--only", default="", help="'pretrain': stop after pretraining")
    parser.add_argument("--corpus", default="", help="comma-separated text files instead of "
                        "the shared corpus and task text (the smoke test's two books)")
    parser.add_argument("--vocab_size", type=int, default=8192)
    parser.add_argument("--max_rows", type=int, default=0,
                        help="smoke test: at most N labelled rows a setting (0: its own)")
    parser.add_argument("--epochs", type=int, default=0, help="smoke test: epochs (0: own)")
    parser.add_argument("--max_steps", type=int, default=0,
                        help="smoke test: pretraining ends at this step if the time has not "
                        "ended it first (0: the time alone)")
    parser.add_argument("--model", type=json.loads, default={},
                        help="smoke test: model keys over the recipe's, as JSON")
    args = parser.parse_args()
    if not SHARED.is_dir():
        raise SystemExit(f"needs the shared data at {SHARED}")
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    work = pathlib.Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    jax.config.update("jax_compilation_cache_dir", str(work / "jax_cache"))
    pre = pretrain(work, args)
    print(f"pretrained {pre['last_step']} steps in {pre['pretrain_s'] / 60:.1f} min on "
          f"{sum(pre['words'].values()):,} words; eval {pre['eval']}", flush=True)
    if args.only == "pretrain":
        return
    seeds = [int(s) for s in args.seeds.split(",")]
    lrs = [float(x) for x in args.lrs.split(",")]
    tokenizer, model, run_dir = pre["tokenizer"], pre["model"], work / "pretrain"
    shrink = (args.max_rows, args.epochs)
    results = {}
    for setting in args.settings.split(","):
        t = time.perf_counter()
        arms = {"pretrained": run_arm(work, setting, model, tokenizer, str(run_dir), seeds,
                                      lrs, "pretrained", shrink),
                "random_init": run_arm(work, setting, model, tokenizer, "", seeds, lrs,
                                       "random", shrink)}
        points, spread = gap(arms)
        results[setting] = {**arms, "gap_points": points, "gap_spread": spread,
                            "seconds": round(time.perf_counter() - t, 1)}
        print(f"{setting}: pretrained {arms['pretrained']['mean']:.1f} +- "
              f"{arms['pretrained']['std']:.1f}, random init {arms['random_init']['mean']:.1f}"
              f" +- {arms['random_init']['std']:.1f}: gap {points:+.1f} points (spread "
              f"{spread:.1f}; goal +3.0, larger than the spread)", flush=True)
    best = max(results, key=lambda s: results[s]["gap_points"])
    steps = sorted(int(s) for s in pre["minutes_at_step"])
    last = steps[-1]
    picks = sorted({steps[max(0, round(len(steps) * k / (args.curve_points + 1)) - 1)]
                    for k in range(1, args.curve_points + 1)} - {last})
    # The curve's grid: the rates the held-out rows chose for the final checkpoint (a
    # third of the runs when every seed chose one rate; still nothing chosen on dev).
    curve_lrs = sorted({r["lr"] for r in results[best]["pretrained"]["runs"]})
    curve = []
    for step in picks:
        init = str(run_dir / "checkpoints" / str(step))
        arm = run_arm(work, best, model, tokenizer, init, seeds, curve_lrs, f"step{step}",
                      shrink)
        points = arm["mean"] - results[best]["random_init"]["mean"]
        curve.append({"step": step, "minutes": pre["minutes_at_step"][str(step)],
                      "gap_points": points, "pretrained_mean": arm["mean"]})
        print(f"  {best} from step {step} ({curve[-1]['minutes']:.1f} min): gap {points:+.1f}",
              flush=True)
    curve.append({"step": last, "minutes": pre["minutes_at_step"][str(last)],
                  "gap_points": results[best]["gap_points"],
                  "pretrained_mean": results[best]["pretrained"]["mean"]})
    picture = plot(args.plot, curve, best, results[best]["gap_spread"]) if args.plot else ""
    print(json.dumps({"best_setting": best, "best_gap_points": results[best]["gap_points"],
                      "best_gap_spread": results[best]["gap_spread"], "settings": results,
                      "curve": curve, "plot": picture, "pretraining": pre}))


if __name__ == "__main__":
    main()
