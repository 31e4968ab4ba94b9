"""ModernBERT's entry (Warner et al. 2024): its encoder (RoPE, local and global layers,
GeGLU) and fine-tuning head, packed MLM at 30% with ModernBERT-base's token schedule,
HF's ModernBertForMaskedLM layout; and its decoder (Ettin, Weller et al. 2025: the same
network with causal attention, next-token prediction on the same rows, HF's
ModernBertDecoderForCausalLM), sampled by python -m pretrainx.generate."""

from pretrainx import objectives, registry
from pretrainx.errors import UserError
from pretrainx.families.modernbert import (hf, hf_decoder, modernbert_clm, modernbert_mdlm,
                                           modernbert_mlm, modernbert_mntp,
                                           modernbert_prefixlm)
from pretrainx.families.modernbert import model as modernbert
from pretrainx.objectives import encoder, mdlm, mntp


def defaults(causal: bool = False, diffusion: bool = False, objective: str = ""):
    """ModernBERT-base's pretraining (Warner et al. 2024, section 2.2 and appendix):
    1024-token packed rows, 30% masking, StableAdamW (b1 0.9, b2 0.98, eps 1e-6) at
    8e-4 with decoupled weight decay 1e-5, warmup over 3B tokens and the trapezoidal
    schedule; 1.7T tokens, the batch warming up from 768 to 4,608 rows over the first
    50B. What is left out is in docs/recipes.md."""
    # steps of 768 rows (786,432 tokens): 2,161,662 of them, 3,815 of warmup, updates of
    # 1 to 6 micro-batches over the first 63,578, the decay over the last 63,578
    schedule = modernbert_mlm.schedule_in_tokens(
        seq_len=1024, micro_batch=768, accumulate_to=6, learning_rate=8e-4,
        warmup_tokens=3e9, ramp_tokens=50e9)
    objective = objective or ("modernbert_clm" if causal else "modernbert_mdlm" if diffusion
                              else "modernbert")
    c = encoder.defaults(
        objective, modernbert.default_config(causal),
        seq_len=1024, name="stable_adamw",
        b2=0.98, eps=1e-6,
        grad_clip=0.0,  # StableAdamW clips each tensor's update instead
        schedule="warmup_stable_decay", lower_case=False, mask_prob=0.30,
        final_lr_fraction=0.0,  # the decay's end (ModernBERT's 0; Ettin's phases set theirs)
        # MLM: 30% of 1,022 rounds to at most 307; MDLM may mask every token of a row
        max_predictions=1024 if diffusion else 320,
        **schedule)
    c.data.eval_mask_prob = 0.0  # 0: evaluate at mask_prob
    c.data.pack_examples = True  # no whole_word_masking key: pieces are masked
    mdlm.add_response_keys(c)  # read by MDLM; here too, so a phase may switch to it
    return c


# what makes the encoder or the decoder, whatever a checkpoint it continues was
ATTENTION_KEYS = ("causal", "classifier_pooling")


def decoder_defaults():
    """The decoder of ModernBERT-base's run, as Ettin pairs them: every key the
    encoder's, the attention causal (the masking keys are unused)."""
    return defaults(causal=True)


def validate_decoder(cfg) -> None:
    _validate_network(cfg)
    mdlm.check_documents(cfg)
    if not modernbert.causal(cfg.model):
        raise UserError("objective=modernbert_clm trains the decoder: set model.causal=True")
    if cfg.model.local_attention < 4:
        raise UserError(f"model.local_attention={cfg.model.local_attention}: the decoder's "
                        "window (half of it, the token itself included) needs at least 4")


def prefixlm_defaults():
    """The decoder's run (decoder_defaults) trained as a prefix LM."""
    return defaults(causal=True, objective="modernbert_prefixlm")


def validate_prefixlm(cfg) -> None:
    validate_decoder(cfg)
    if cfg.model.attention_impl not in ("xla", "auto"):
        raise UserError(f"model.attention_impl={cfg.model.attention_impl} has no PrefixLM "
                        "mask (a bidirectional prefix); objective=modernbert_prefixlm needs "
                        "xla or auto")


def diffusion_defaults():
    """Masked diffusion (MDLM) with every key of ModernBERT-base's MLM run but the
    masking: a rate per row (mask_prob is unused), room for every token's prediction.
    The MDLM paper trains a DiT-style encoder on OpenWebText (AdamW 3e-4, 1M steps of
    512 x 1,024); here ModernBERT's recipe, named as the drift."""
    return defaults(diffusion=True)


def mntp_defaults():
    """LLM2Vec's MNTP run (objectives/mntp.py: 1,000 steps of 32 x 512 at 5e-5, 20% of
    the tokens) on Ettin's decoder, made bidirectional and mean-pooled as LLM2Vec pools;
    the rows are the decoder's (packed), the mask ModernBERT's own [MASK]."""
    c = encoder.defaults("modernbert_mntp", modernbert.default_config(pooling="mean"),
                         lower_case=False, mask_prob=mntp.MASK_PROB,
                         max_predictions=mntp.RUN["seq_len"],  # unread: every position
                         **mntp.RUN)
    c.data.eval_mask_prob = 0.0  # 0: evaluate at mask_prob
    c.data.pack_examples = True
    mdlm.add_response_keys(c)
    return c


def validate_mntp(cfg) -> None:
    if modernbert.causal(cfg.model):
        raise UserError("objective=modernbert_mntp predicts masked tokens with bidirectional "
                        "attention: set model.causal=False")
    _validate_network(cfg)
    mdlm.check_documents(cfg)
    if not 0.0 < cfg.data.mask_prob < 1.0:
        raise UserError(f"data.mask_prob={cfg.data.mask_prob} must be in (0, 1)")


def validate_diffusion(cfg) -> None:
    if modernbert.causal(cfg.model):
        raise UserError("objective=modernbert_mdlm unmasks with bidirectional attention: set "
                        "model.causal=False")
    _validate_network(cfg)
    mdlm.check_room(cfg)


def validate(cfg) -> None:
    if modernbert.causal(cfg.model):
        raise UserError("objective=modernbert is the bidirectional MLM: set model.causal=False "
                        "(objective=modernbert_clm trains the decoder)")
    _validate_network(cfg)
    encoder.validate_document_mlm(cfg)
    mdlm.check_documents(cfg)


def _validate_network(cfg) -> None:
    encoder.validate(cfg)
    m = cfg.model
    if m.attention_impl == "flash":
        raise UserError("model.attention_impl=flash has no sliding window for ModernBERT's "
                        "local layers; use splash (TPU), cudnn (GPU), xla or auto")
    if not isinstance(m.local_attention, int) or m.local_attention < 2 or m.local_attention % 2:
        raise UserError(f"model.local_attention={m.local_attention!r} must be an even "
                        "window width >= 2")
    opt = cfg.optimizer
    if opt.schedule == "warmup_stable_decay" and not 0 < opt.decay_steps <= \
            cfg.total_steps - opt.warmup_steps:
        raise UserError(f"optimizer.decay_steps={opt.decay_steps} must be in "
                        f"(0, total_steps - warmup_steps = {cfg.total_steps - opt.warmup_steps}]")


registry.register(registry.Family(
    name="modernbert", outputs=modernbert.outputs,
    sentence_pooling=lambda model: None if modernbert.causal(model) else model.classifier_pooling,
    default_config=modernbert.default_config,
    finetune_model=modernbert.finetune_model, max_positions="max_position_embeddings",
    objectives=(objectives.Entry(name="modernbert", build=modernbert_mlm.ModernBertMlm,
                                 defaults=defaults, validate=validate,
                                 as_pretrained=encoder.pretrained_mlm,
                                 own_model_keys=ATTENTION_KEYS),
                objectives.Entry(name="modernbert_mdlm", build=modernbert_mdlm.ModernBertMdlm,
                                 defaults=diffusion_defaults, validate=validate_diffusion,
                                 as_pretrained=encoder.pretrained_mlm,
                                 own_model_keys=ATTENTION_KEYS),
                objectives.Entry(name="modernbert_mntp", build=modernbert_mntp.ModernBertMntp,
                                 defaults=mntp_defaults, validate=validate_mntp,
                                 as_pretrained=encoder.pretrained_mlm,
                                 own_model_keys=ATTENTION_KEYS),
                objectives.Entry(name="modernbert_clm", build=modernbert_clm.ModernBertClm,
                                 defaults=decoder_defaults, validate=validate_decoder,
                                 as_pretrained=lambda model_cfg, params: (
                                     model_cfg, params, "causal_lm"),
                                 own_model_keys=ATTENTION_KEYS),
                objectives.Entry(name="modernbert_prefixlm",
                                 build=modernbert_prefixlm.ModernBertPrefixLm,
                                 defaults=prefixlm_defaults, validate=validate_prefixlm,
                                 as_pretrained=lambda model_cfg, params: (
                                     model_cfg, params, "causal_lm"),
                                 own_model_keys=ATTENTION_KEYS)),
    causal_sampling=modernbert.sampler, is_causal=modernbert.causal, sample_framing="cls",
    next_token_network=modernbert.ModernBertForCausalLM,
    hf=(hf.ADAPTER, hf_decoder.ADAPTER)))
