"""GPT-2's entry (Radford et al. 2019): the decoder, sampled token by token from its
key-value cache, causal LM at GPT-2 small's run, HF's GPT2LMHeadModel layout."""

from pretrainx import config as config_lib
from pretrainx import objectives, registry
from pretrainx.objectives import causal_lm as causal_lm_objective, mntp, prefix_lm, shifted_mdlm
from pretrainx.errors import UserError
from pretrainx.families.gpt2 import causal_lm, hf
from pretrainx.families.gpt2 import model as gpt2


def defaults(objective: str = "causal_lm", causal: bool = True):
    """GPT-2 small (124M) as Radford et al. (2019) describe it: context 1024, batch 512,
    50,257 byte-level BPE tokens, pre-LN, dropout 0.1. The paper leaves the optimizer
    to GPT-1's (Radford et al. 2018): Adam, peak lr 2.5e-4 after a 2,000-step linear
    warmup, cosine decay to 0, weight decay 0.01. Steps are not published: 600k
    (about 315B tokens, what open reproductions of the 124M model train)."""
    c = config_lib.shared_config(objective, total_steps=600_000, batch=512, seq_len=1024,
                                 learning_rate=2.5e-4, schedule="cosine", warmup_steps=2000,
                                 eps=1e-8)
    c.model = gpt2.default_config(causal=causal)
    c.data.lower_case = False
    return c


def validate(cfg) -> None:
    config_lib.check_positive(cfg, "model.hidden_size", "model.num_heads", "model.mlp_dim",
                              "model.max_position_embeddings")
    config_lib.check_divisible(cfg)
    m = cfg.model
    if cfg.seq_len > m.max_position_embeddings:
        raise UserError(f"seq_len={cfg.seq_len} exceeds model.max_position_embeddings="
                        f"{m.max_position_embeddings}")
    causal_lm_objective.check_causal(cfg)


registry.register(registry.Family(
    name="gpt2", outputs=gpt2.outputs,
    default_config=gpt2.default_config,
    causal_sampling=lambda cfg: gpt2.GPT2(cfg, decode=True),
    next_token_network=gpt2.GPT2,
    is_causal=lambda model_cfg: bool(model_cfg.causal),
    finetune_model=gpt2.finetune_model, max_positions="max_position_embeddings",
    # made bidirectional, a sentence encoder of mean-pooled states (LLM2Vec, Gemma Encoder)
    sentence_pooling=lambda model_cfg: None if model_cfg.causal else "mean",
    objectives=(objectives.Entry(
        name="causal_lm", build=causal_lm.CausalLM, defaults=defaults, validate=validate,
        as_pretrained=lambda model_cfg, params: (model_cfg, params, "causal_lm")),
        mntp.entry("gpt2", causal_lm.CausalLM,
                   lambda: gpt2.default_config(causal=False), validate),
        shifted_mdlm.entry("gpt2", causal_lm.CausalLM,
                           lambda name: defaults(name, causal=False), validate),
        prefix_lm.entry("gpt2", causal_lm.CausalLM, lambda name: defaults(name), validate)),
    hf=(hf.ADAPTER,)))
