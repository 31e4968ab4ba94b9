"""BART's entry (Lewis et al. 2020): its encoder-decoder with classification and
seq2seq fine-tuning, text infilling + sentence permutation at bart.large's run, and
HF's BartForConditionalGeneration layout."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.errors import UserError
from pretrainx.families.bart import bart_denoising, hf
from pretrainx.families.bart import model as bart


def defaults():
    """bart.large's recipe (section 5): text infilling (30%, Poisson(3) spans) plus
    sentence permutation, batch 8,000 of 512 tokens for 500K steps, GPT-2's BPE;
    the optimizer is RoBERTa's (Adam b2 0.98, eps 1e-6, weight decay 0.01, polynomial
    decay from 4e-4 after 10K warmup steps, fairseq's BART recipe), no clipping."""
    c = config_lib.shared_config("bart", total_steps=500_000, batch=8000, seq_len=512,
                                 learning_rate=4e-4, schedule="warmup_linear",
                                 warmup_steps=10_000, b2=0.98, eps=1e-6, grad_clip=0.0)
    c.model = bart.default_config()
    c.data.lower_case = False
    c.data.mask_ratio = 0.3
    c.data.poisson_lambda = 3.0
    c.data.mask_random_ratio = 0.1
    # 1: every example's sentences shuffled (an example of one sentence stays as it is,
    # and --stats counts it as not permuted); 0: off
    c.data.permute_sentence_ratio = 1.0
    return c


def validate(cfg) -> None:
    config_lib.check_positive(cfg, "model.hidden_size", "model.num_heads", "model.mlp_dim",
                              "model.num_decoder_layers", "model.max_position_embeddings")
    config_lib.check_fraction(cfg, "data.mask_ratio", 0.0, 1.0)
    if cfg.data.poisson_lambda <= 0:
        raise UserError(f"data.poisson_lambda={cfg.data.poisson_lambda} must be > 0")
    if not 0.0 <= cfg.data.mask_random_ratio <= 1.0:
        raise UserError(f"data.mask_random_ratio={cfg.data.mask_random_ratio} must be in [0, 1]")
    if cfg.data.permute_sentence_ratio not in (0.0, 1.0):
        raise UserError(f"data.permute_sentence_ratio={cfg.data.permute_sentence_ratio}: 1 "
                        "(every example's sentences shuffled, BART's final recipe) or 0")
    if cfg.seq_len > cfg.model.max_position_embeddings:
        raise UserError(f"seq_len={cfg.seq_len} exceeds model.max_position_embeddings="
                        f"{cfg.model.max_position_embeddings}")


registry.register(registry.Family(
    name="bart", default_config=bart.default_config, finetune_model=bart.finetune_model,
    outputs=bart.outputs,
    text_to_text="optional", text_framing="bos_eos", generate=bart.generate,
    max_positions="max_position_embeddings", tokenizer_layout="fairseq",
    objectives=(objectives.Entry(
        name="bart", build=bart_denoising.BartDenoising, defaults=defaults, validate=validate,
        as_pretrained=lambda model_cfg, params: (model_cfg, params, "seq2seq")),),
    hf=(hf.ADAPTER,)))
