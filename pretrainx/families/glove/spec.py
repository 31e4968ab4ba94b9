"""GloVe's entry (Pennington, Socher and Manning 2014): weighted least squares on the
co-occurrence counts, as glove.c trains it. No HF layout: its export is the word vectors
themselves; it fine-tunes as the input layer of a small task network
(models/static_vectors.py)."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.models import static_vectors
from pretrainx.data import sources
from pretrainx.errors import UserError
from pretrainx.families.glove import cooccurrence, vectors
from pretrainx.families.glove import model as glove


def defaults():
    """The paper's run (section 4.2): 300 dimensions, a symmetric window of 10 words
    weighted 1/d, x_max 100, alpha 3/4, AdaGrad at 0.05 from accumulators of 1.0 (as
    glove.c), words seen 5 times or more (glove.c's demo). Drift, and why: glove.c steps
    once per entry on lock-free threads; here a step takes the summed gradient of a
    batch of entries (AdaGrad's accumulator then grows by the square of a word's summed
    gradient, not by the sum of its squares), so a word frequent in a batch moves less
    per epoch; batches are small (4 rows of 1,024 entries) to keep that near glove.c.
    The paper trains 50 epochs below 300 dimensions and 100 at 300; a recipe sets
    total_steps to its corpus's epochs (configs/glove.py)."""
    c = config_lib.shared_config("glove", total_steps=100_000, batch=4, seq_len=1024,
                                 learning_rate=0.05, schedule="constant", name="adagrad",
                                 warmup_steps=0, weight_decay=0.0, grad_clip=0.0,
                                 initial_accumulator=1.0)
    c.model = glove.default_config()
    c.data.lower_case = False  # glove.c reads words as they are written
    c.data.min_count = 5  # rarer words leave the text (glove.c's vocab_count -min-count)
    return c


def validate(cfg) -> None:
    config_lib.check_positive(cfg, "model.embedding_size", "model.window", "model.vocab_size")
    config_lib.check_fraction(cfg, "model.x_max", 0.0, float("inf"))
    config_lib.check_fraction(cfg, "model.alpha", 0.0, 1.0, closed_high=True)
    if cfg.data.train_files and len(sources.split_sources(cfg.data.train_files)) > 1:
        raise UserError(f"data.train_files={cfg.data.train_files!r} has several ';' sources: "
                        "GloVe fits one co-occurrence matrix; join the files with ','")


def as_pretrained(model, params):
    """A run read as its model: the four tables, exported as word vectors."""
    return model, params, "vectors"


registry.register(registry.Family(
    name="glove", base="word2vec", default_config=glove.default_config, export=vectors.export,
    # W + W~ (glove.c's -model 2 output) under a task network
    finetune_model=static_vectors.finetune_model(("words", "contexts")),
    objectives=(objectives.Entry(name="glove", build=cooccurrence.GloVeObjective,
                                 defaults=defaults, validate=validate,
                                 as_pretrained=as_pretrained),)))
