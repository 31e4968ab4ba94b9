"""Our word2vec against gensim's Word2Vec on the same text, at word2vec.c's settings.

    python benchmarks/word2vec_gensim.py [--epochs=5] [--files=A,B,...] [--sg=1]
        [--glove_epochs=50]

Both train skip-gram (`--sg=0`: CBOW) with 100 dimensions, window 5, 5 negatives,
subsampling 1e-3, min count 5, on the same words (pretrainx's word splitter, the
`.words` vocabulary built from the files), for `--epochs` passes: gensim with 2 worker
threads stepping once per pair at 0.025 falling to 1e-4, ours with configs/
word2vec.py's recipe (batches of 64 x 128 words, the mean over a batch's pairs at rate
200, falling to 1e-4 of it) for as many steps as `--epochs` passes over the words
subsampling keeps. How the work differs: gensim's sentences are the files' lines, ours
the documents' sentences (rows pack them; windows stop at a sentence's end in both).
Then both sets of vectors are scored with `pretrainx.evaluate.word_eval` (WordSim-353,
SimLex-999, the analogy questions). With `--glove_epochs=N`, our GloVe
(configs/glove.py:cpu's recipe at 100 dimensions) trains on the same words and
vocabulary for N passes over their co-occurrence entries and is scored beside them (the
paper's 50 passes below 300 dimensions; GloVe's reference, mittens, is checked step for
step in tests/families/test_glove.py). Default text: every English file of
../shared/data/corpus (eight Gutenberg books, WikiText-2's valid and test), about 1.6M
words. Prints a table; the last line is one JSON object. Times are wall clock,
compilation included for ours.
"""

import argparse
import collections
import glob
import json
import math
import os
import sys
import tempfile
import time

os.environ.setdefault("JAX_PLATFORMS", "cpu")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import jax  # noqa: E402
import numpy as np  # noqa: E402

from pretrainx import config as config_lib, interop, pretrain  # noqa: E402
from pretrainx.evaluate import word_eval
from pretrainx.data import words as words_lib  # noqa: E402
from pretrainx.families.word2vec import skipgram, vectors  # noqa: E402

CORPUS = os.path.join(os.path.dirname(REPO), "shared", "data", "corpus")
WORDS_PER_STEP = 64 * 128  # the recipe's batch


def default_files() -> list:
    return (sorted(glob.glob(os.path.join(CORPUS, "gutenberg", "*.txt")))
            + [os.path.join(CORPUS, "wikitext-2-raw", f"wiki.{s}.raw") for s in ("valid", "test")])


def _lines(files):
    for path in files:
        with open(path, encoding="utf-8", errors="replace") as f:
            for line in f:
                words = words_lib.split_words(line)
                if words:
                    yield words


def steps_for(files, epochs: float) -> tuple:
    """(steps, words, kept words a pass): `epochs` passes over the words that
    min_count 5 and subsampling at 1e-3 keep, at the recipe's words a step."""
    counts = collections.Counter(w for line in _lines(files) for w in line)
    kept = np.array([c for c in counts.values() if c >= 5], np.float64)
    per_pass = float((kept * skipgram.keep_probabilities(kept, 1e-3)).sum())
    return max(1, math.ceil(epochs * per_pass / WORDS_PER_STEP)), sum(counts.values()), per_pass


def train_ours(files, vocab: str, size: int, steps: int, cbow: bool, workdir: str,
               max_steps: int = 0) -> float:
    recipe = os.path.join(REPO, "configs", "word2vec.py")
    cfg = config_lib.load_file(f"{recipe}:{'cbow_cpu' if cbow else 'cpu'}")
    cfg.data.train_files = ",".join(files)
    cfg.data.tokenizer = vocab
    cfg.model.vocab_size = -(-size // 128) * 128
    cfg.total_steps = min(steps, max_steps) if max_steps else steps
    cfg.eval_every = cfg.checkpoint_every = cfg.total_steps
    cfg.log_every = max(1, cfg.total_steps // 10)
    start = time.perf_counter()
    pretrain.train(cfg, workdir, devices=jax.devices()[:1])
    return time.perf_counter() - start


def train_glove(files, vocab: str, size: int, epochs: int, workdir: str,
                max_steps: int = 0) -> tuple:
    """(seconds, steps) of configs/glove.py:cpu on `files` for `epochs` passes."""
    from pretrainx import objectives
    from pretrainx.data import sources
    from pretrainx.data.tokenizers import load_tokenizer
    cfg = config_lib.load_file(os.path.join(REPO, "configs", "glove.py") + ":cpu")
    cfg.data.train_files = ",".join(files)
    cfg.data.tokenizer = vocab
    cfg.data.eval_files = ""
    cfg.model.vocab_size = -(-size // 128) * 128
    tokenizer = load_tokenizer(vocab, lower_case=cfg.data.lower_case)
    objective = objectives.build(cfg, tokenizer)
    phase = config_lib.phases(cfg)[0]
    entries = sum(row["counts"].size for spec in sources.split_sources(cfg.data.train_files)
                  for row in objective.examples(spec, phase, True))
    steps = max(1, math.ceil(epochs * entries / (cfg.global_batch_size * cfg.seq_len)))
    cfg.total_steps = min(steps, max_steps) if max_steps else steps
    cfg.eval_every = cfg.checkpoint_every = cfg.total_steps
    cfg.log_every = max(1, cfg.total_steps // 10)
    start = time.perf_counter()
    pretrain.train(cfg, workdir, devices=jax.devices()[:1])
    return time.perf_counter() - start, cfg.total_steps, entries


def train_gensim(files, epochs: int, sg: int, output: str) -> float:
    from gensim.models import Word2Vec
    sentences = list(_lines(files))
    start = time.perf_counter()
    model = Word2Vec(sentences=sentences, sg=sg, vector_size=100, window=5, negative=5,
                     sample=1e-3, min_count=5, epochs=epochs, workers=2, seed=0)
    seconds = time.perf_counter() - start
    model.wv.save_word2vec_format(output)
    return seconds


def _scores(path: str) -> dict:
    out = word_eval.evaluate(path)
    return {"wordsim": out["wordsim"], "simlex": out["simlex"],
            "analogies": {k: v for k, v in out["analogies"].items() if k != "sections"}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", default="", help="comma-separated text files")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--sg", type=int, default=1, help="1: skip-gram, 0: CBOW")
    parser.add_argument("--max_steps", type=int, default=0, help="cap our steps (smoke runs)")
    parser.add_argument("--glove_epochs", type=int, default=0,
                        help="also train our GloVe for N passes (0: not)")
    args = parser.parse_args()
    files = [f for f in args.files.split(",") if f] or default_files()
    steps, total, per_pass = steps_for(files, args.epochs)
    result = {"files": len(files), "words": total, "kept_per_pass": round(per_pass),
              "epochs": args.epochs, "objective": "skipgram" if args.sg else "cbow"}
    with tempfile.TemporaryDirectory() as scratch:
        vocab = os.path.join(scratch, "vocab.words")
        size = words_lib.build_vocab(files, vocab) + len(words_lib.SPECIALS)
        seconds = train_ours(files, vocab, size, steps, not args.sg,
                             os.path.join(scratch, "ours"), args.max_steps)
        pretrained = interop.load(os.path.join(scratch, "ours"))
        vectors.export(pretrained, os.path.join(scratch, "ours_vectors"))
        ours = os.path.join(scratch, "ours_vectors", "vectors.txt")
        theirs = os.path.join(scratch, "gensim_vectors.txt")
        gensim_seconds = train_gensim(files, args.epochs, args.sg, theirs)
        result["pretrainx"] = dict(_scores(ours), seconds=seconds, steps=steps)
        result["gensim"] = dict(_scores(theirs), seconds=gensim_seconds)
        if args.glove_epochs:
            from pretrainx.families.glove import vectors as glove_vectors
            glove_seconds, glove_steps, entries = train_glove(
                files, vocab, size, args.glove_epochs, os.path.join(scratch, "glove"),
                args.max_steps)
            glove_vectors.export(interop.load(os.path.join(scratch, "glove")),
                                 os.path.join(scratch, "glove_vectors"))
            result["pretrainx_glove"] = dict(
                _scores(os.path.join(scratch, "glove_vectors", "vectors.txt")),
                seconds=glove_seconds, steps=glove_steps, entries=entries,
                epochs=args.glove_epochs)
    print(f"{total:,} words, {per_pass:,.0f} kept a pass, {args.epochs} passes "
          f"({result['objective']}); ours {steps} steps of {WORDS_PER_STEP} words")
    print(f"{'':15} {'seconds':>8} {'WordSim rho (pairs)':>20} {'SimLex rho (pairs)':>19} "
          f"{'analogies (questions)':>22}")
    for name in ("pretrainx", "gensim", "pretrainx_glove"):
        if name not in result:
            continue
        r = result[name]
        print(f"{name:15} {r['seconds']:8.1f} "
              f"{r['wordsim']['spearman']:>12.3f} ({r['wordsim']['pairs']:>4}) "
              f"{r['simlex']['spearman']:>11.3f} ({r['simlex']['pairs']:>4}) "
              f"{r['analogies']['accuracy']:>13.3f} ({r['analogies']['questions']:>5})")
    print(f"time ratio ours / gensim: {result['pretrainx']['seconds'] / gensim_seconds:.2f}")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
