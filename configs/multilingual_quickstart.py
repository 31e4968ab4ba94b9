"""Multilingual quickstart: one small RoBERTa-objective model learns eight languages on a
CPU in minutes, with XLM-R's temperature sampling and an eval per language.

    python -m pretrainx.main --config=configs/multilingual_quickstart.py --workdir=/tmp/multi

    python -m pretrainx.data --config=configs/multilingual_quickstart.py --stats
    # source_fractions (drawn) agree with expected_source_fractions (tokens^0.3) within 0.01

Data: English (the quickstart's two novels) and seven more languages from Debian's
fortune-cookie collections (../shared/data/corpus/multilingual: German, Spanish,
Italian, Russian, Czech/Slovak, Brazilian Portuguese, Chinese). The sources differ in
size by 12x in tokens; with data.mixing_alpha=0.3 (XLM-R's) a source is drawn with
probability ~ tokens^0.3, so Portuguese (the smallest) gets 8% of the rows instead of
the 2% its size would give. The first 10% of each source's documents are held out
(data.eval_split_percent) and evaluated on their own: metrics.jsonl gets one eval record
per language (`"source": "de"`) beside the overall one.

Vocabulary: pretrainx/assets/spm_multi_8k.model, an 8,000-piece cased SentencePiece
unigram model trained on the same eight sources sampled the same way:

    python -m pretrainx.tokenizer train --alpha=0.3 --vocab_size=8000 --lower_case=false \\
        --input='BOOKS/pg1342_pride_and_prejudice.txt,BOOKS/pg1661_adventures_of_sherlock_holmes.txt;ML/fortunes.de.txt;ML/fortunes.es.txt;ML/fortunes.it.txt;ML/fortunes.ru.txt;ML/fortunes.cs.txt;ML/fortunes.pt.txt;ML/fortunes.zh.txt' \\
        --output=pretrainx/assets/spm_multi_8k

The objective is RoBERTa's (FULL-SENTENCES rows, dynamic masking, no NSP) at BERT-Tiny's
size, at length 32 for the quickstart's reason (a small model leaves the unigram
plateau there within hundreds of steps). Measured: see docs/recipes.md (eval MLM
accuracy per language). `python -m pretrainx.export` writes it as XLMRobertaForMaskedLM
with a tokenizer.json in the run's ids (tests/families/test_xlmr.py).
"""

import os

import pretrainx
from pretrainx.objectives import default_config

ASSETS = os.path.join(os.path.dirname(pretrainx.__file__), "assets")
# The text that ships beside this repository (../shared/data/corpus/multilingual).
SHARED = os.path.normpath(os.path.join(
    os.path.dirname(os.path.realpath(__file__)), "..", "..", "shared", "data",
    "corpus", "multilingual"))
LANGUAGES = ("de", "es", "it", "ru", "cs", "pt", "zh")


def get_config():
    c = default_config("roberta")
    c.total_steps = 3000
    c.global_batch_size = 64  # the held-out Portuguese (2 documents) fills 1 batch of 64
    c.seq_len = 32
    c.log_every = 100
    c.eval_every = 1500
    c.eval_steps = 4  # a language: 4 batches of 64 rows, 8 languages
    c.checkpoint_every = 1500
    c.keep_checkpoints = 2

    c.model.num_layers = 2
    c.model.hidden_size = 128
    c.model.num_heads = 2
    c.model.mlp_dim = 512
    c.model.vocab_size = 8000
    c.model.dtype = "float32"

    c.optimizer.learning_rate = 1e-3  # the quickstart's: minutes to learn in, not days
    c.optimizer.warmup_steps = 100

    books = os.path.join(ASSETS, "text")
    english = ",".join(os.path.join(books, f) for f in (
        "pg1342_pride_and_prejudice.txt", "pg1661_adventures_of_sherlock_holmes.txt"))
    c.data.train_files = ";".join(
        [english] + [os.path.join(SHARED, f"fortunes.{lang}.txt") for lang in LANGUAGES])
    c.data.train_source_names = ",".join(("en",) + LANGUAGES)
    c.data.mixing_alpha = 0.3
    c.data.eval_split_percent = 10.0
    c.data.tokenizer = os.path.join(ASSETS, "spm_multi_8k.model")
    c.data.max_predictions_per_seq = 5  # 15% of 32
    return c
