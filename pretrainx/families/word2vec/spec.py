"""word2vec's entry (Mikolov et al. 2013): skip-gram and CBOW with negative sampling as
word2vec.c trains them. No HF layout: its export is the word vectors themselves; it
fine-tunes as the input layer of a small task network (models/static_vectors.py)."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.models import static_vectors
from pretrainx.errors import UserError
from pretrainx.families.word2vec import model as word2vec
from pretrainx.families.word2vec import cbow, skipgram, vectors


def defaults(objective: str = "skipgram"):
    """word2vec.c's skip-gram run (-cbow 0 -size 100 -window 5 -negative 5 -hs 0
    -sample 1e-3 -min-count 5): plain SGD whose rate falls linearly to 1e-4 of its start
    over the run. Drift, and why: word2vec.c steps once per (center, context) pair at
    0.025 on lock-free threads; one step over a batch's summed pairs at 0.025 diverged
    on the bundled books (8,192 words a step: the loss reached 1e33 by step 30, as a
    frequent word's hundreds of pair gradients add up at once). The loss here is the
    mean over the batch's pairs, at rate 200, chosen on the books' 120-step run: eval
    loss 4.13 at rate 10, 3.36 at 50, 2.80 at 200; 1,000 diverged. Rows pack sentences
    into 128 words, 64 rows a batch (8,192 words a step)."""
    c = config_lib.shared_config(objective, total_steps=100_000, batch=64, seq_len=128,
                                 learning_rate=200.0, schedule="linear_floor", name="sgd",
                                 warmup_steps=0, weight_decay=0.0, grad_clip=0.0,
                                 final_lr_fraction=1e-4)
    c.model = word2vec.default_config()
    c.data.lower_case = False  # word2vec.c reads words as they are written
    c.data.min_count = 5  # rarer words leave the text (word2vec.c's -min-count)
    c.data.subsample = 1e-3  # word2vec.c's -sample: frequent words kept less often
    return c


def cbow_defaults():
    """word2vec.c's CBOW run (-cbow 1, its other flags as skip-gram's): the same recipe,
    one prediction a center instead of one a (center, context) pair."""
    return defaults("cbow")


def validate(cfg) -> None:
    config_lib.check_positive(cfg, "model.embedding_size", "model.window", "model.negatives",
                              "model.vocab_size")
    if cfg.data.subsample < 0:
        raise UserError(f"data.subsample={cfg.data.subsample} must be >= 0 (0: keep every word)")


def as_pretrained(model, params):
    """A run read as its model: both tables, exported as word vectors."""
    return model, params, "vectors"


registry.register(registry.Family(
    name="word2vec", default_config=word2vec.default_config, export=vectors.export,
    # the input vectors (syn0, what word2vec.c writes) under a task network
    finetune_model=static_vectors.finetune_model(("inputs",)),
    objectives=(objectives.Entry(name="skipgram", build=skipgram.SkipGram, defaults=defaults,
                                 validate=validate, as_pretrained=as_pretrained),
                objectives.Entry(name="cbow", build=cbow.CBOW, defaults=cbow_defaults,
                                 validate=validate, as_pretrained=as_pretrained))))
