"""ELMo's entry (Peters et al. 2018): the character-CNN biLM and its objective at
bilm-tf's "original" run. It neither fine-tunes here nor has an HF layout."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.errors import UserError
from pretrainx.families.elmo import bilm
from pretrainx.families.elmo import model as elmo


def defaults():
    """ELMo "original" (Peters et al. 2018; bilm-tf's 2x4096_512_2048cnn_2xhighway):
    the 1B Word Benchmark's 793,471-word vocabulary, 20-word rows, batch 3 x 128,
    10 epochs of its 769M words (1M steps), Adagrad at 0.2 (accumulators from 1.0),
    gradients clipped at norm 10, dropout 0.1. bilm-tf trains the softmax by sampling
    8,192 negatives; here it is computed in full."""
    c = config_lib.shared_config("elmo", total_steps=1_000_000, batch=384, seq_len=20,
                                 learning_rate=0.2, schedule="constant", name="adagrad",
                                 warmup_steps=0, weight_decay=0.0, grad_clip=10.0,
                                 initial_accumulator=1.0)
    c.model = elmo.default_config()
    c.data.lower_case = False
    return c


def validate(cfg) -> None:
    config_lib.check_positive(cfg, "model.char_embed_dim", "model.max_chars", "model.lstm_dim",
                              "model.projection_dim")
    try:
        filters = elmo.parse_filters(cfg.model.filters)
    except ValueError:
        raise UserError(f"model.filters={cfg.model.filters!r}: expected width:count pairs "
                        "separated by commas, e.g. 1:32,2:32,3:64") from None
    widest = max(w for w, _ in filters)
    if widest > cfg.model.max_chars:
        raise UserError(f"model.filters has width {widest} > model.max_chars="
                        f"{cfg.model.max_chars}")
    if cfg.model.max_chars < 3:
        raise UserError(f"model.max_chars={cfg.model.max_chars} must be at least 3")


registry.register(registry.Family(
    name="elmo", default_config=elmo.default_config,
    objectives=(objectives.Entry(name="elmo", build=bilm.BiLM, defaults=defaults,
                                 validate=validate),)))
