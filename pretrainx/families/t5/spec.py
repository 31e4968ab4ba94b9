"""T5's entry (Raffel et al. 2020): the encoder-decoder, fine-tuned text to text and
decoded by its generate, span corruption at T5 1.0 Base's run, HF's T5 layout."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.errors import UserError
from pretrainx.families.t5 import hf, span_corruption, ul2
from pretrainx.families.t5 import model as t5
from pretrainx.objectives import ul2 as ul2_lib


def defaults(objective: str = "t5", num_sentinels: int = 100, model=None):
    """T5 1.0 Base, span corruption, packed 128 x 512 inputs, 2^19 steps (the T5 paper).

    The optimizer defaults to AdamW with linear warmup and decay; T5's own is
    `optimizer.name=adafactor`, `optimizer.schedule=rsqrt`, `learning_rate=0.01`,
    `warmup_steps=10000` (configs/t5.py:base,adafactor).
    """
    c = config_lib.shared_config(objective, total_steps=2 ** 19, batch=128, seq_len=512,
                                 learning_rate=1e-3, schedule="warmup_linear")
    # seq_len is the encoder inputs; targets length follows from the noise arithmetic
    c.z_loss = 0.0  # T5X's auxiliary log(Z)^2 term; 1e-4 when on
    c.model = t5.default_config() if model is None else model  # another encoder-decoder's
    # data.tokenizer: a SentencePiece model (T5's spiece.model or one we trained)
    c.data.lower_case = False
    c.data.noise_density = 0.15
    c.data.mean_noise_span_length = 3.0
    c.data.num_sentinels = num_sentinels
    c.data.docs_per_concat = 128  # t5 reduce_concat_tokens: documents joined before splitting
    c.data.max_doc_tokens = 65536  # t5 select_random_chunk
    return c


def validate(cfg) -> None:
    config_lib.check_positive(cfg, "model.hidden_size", "model.num_heads", "model.mlp_dim",
                              "model.num_decoder_layers", "model.head_dim",
                              "data.num_sentinels", "data.docs_per_concat",
                              "data.max_doc_tokens", "model.relative_attention_num_buckets",
                              "model.relative_attention_max_distance")
    config_lib.choice(cfg.model.feed_forward, "model.feed_forward", tuple(t5.FEED_FORWARD))
    config_lib.check_fraction(cfg, "data.noise_density", 0.0, 1.0)
    if cfg.data.mean_noise_span_length < 1.0:
        raise UserError(f"data.mean_noise_span_length={cfg.data.mean_noise_span_length} "
                        "must be >= 1")
    if cfg.z_loss < 0:
        raise UserError(f"z_loss={cfg.z_loss} must be >= 0")


def ul2_defaults(objective: str = "t5_ul2", model=None):
    """UL2's mixture of denoisers (Tay et al. 2022) on T5 1.0 Base's run: inputs and
    targets of 512 (configs/ul2.py sets the paper's model); `model`: another
    encoder-decoder's keys (T5Gemma's)."""
    # X at 3 x 50% cuts up to 128 spans from inputs of 512: T5's 100 extra ids would run
    # out (T5X then reuses the last word pieces), so the sentinels fill T5's 32,128 rows
    c = defaults(objective, num_sentinels=128, model=model)
    c.data.denoisers = ul2_lib.UL2_DENOISERS
    c.data.denoiser_weights = ul2_lib.UL2_WEIGHTS
    c.data.mode_tokens = ul2_lib.UL2_MODE_TOKENS
    c.data.targets_length = 512  # 0: as seq_len
    return c


def ul2_validate(cfg) -> None:
    validate(cfg)
    check_ul2_data(cfg)


def check_ul2_data(cfg) -> None:
    """The mixture's keys, for any encoder-decoder trained on it."""
    config_lib.check_positive(cfg, "data.num_sentinels", "data.docs_per_concat",
                              "data.max_doc_tokens")
    denoisers = ul2_lib.parse_denoisers(cfg.data.denoisers)
    ul2_lib.parse_weights(cfg.data.denoiser_weights, len(denoisers))
    ul2_lib.parse_mode_tokens(cfg.data.mode_tokens)
    if cfg.data.targets_length < 0:
        raise UserError(f"data.targets_length={cfg.data.targets_length} must be >= 0")


registry.register(registry.Family(
    name="t5", default_config=t5.default_config, outputs=t5.outputs,
    finetune_model=lambda cfg, head, num_labels, peft: t5.T5(cfg),
    text_to_text="always", generate=t5.generate,
    objectives=(objectives.Entry(
        name="t5", build=span_corruption.SpanCorruption, defaults=defaults, validate=validate,
        as_pretrained=lambda model_cfg, params: (model_cfg, params, "seq2seq")),
        objectives.Entry(
        name="t5_ul2", build=ul2.Ul2, defaults=ul2_defaults, validate=ul2_validate,
        as_pretrained=lambda model_cfg, params: (model_cfg, params, "seq2seq"))),
    hf=(hf.ADAPTER,)))
