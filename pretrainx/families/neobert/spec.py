"""NeoBERT's entry (Le Breton et al. 2025): its encoder (pre-RMSNorm, RoPE, SwiGLU, 28 x
768) trained by masked LM at 20%, two phases (1,024 tokens, then 4,096). transformers
has no NeoBERT class (the released model runs the authors' own code), so there is no HF
adapter: a run exports as its pretrainx workdir."""

import ml_collections

from pretrainx import objectives, registry
from pretrainx.errors import UserError
from pretrainx.families.neobert import model as neobert
from pretrainx.families.neobert import neobert_mlm
from pretrainx.objectives import encoder, mdlm


def defaults(diffusion: bool = False):
    """The paper's pretraining: AdamW (b1 0.9, b2 0.95, eps 1e-8, weight decay 0.1,
    clipping at 1.0), peak rate 6e-4 after 2,000 warmup steps, cosine decay to 10% of
    it; 1M steps of 2,048 rows of 1,024 tokens (2M tokens a step), then 50,000 steps
    at 4,096 tokens with the same tokens a step (512 rows); 20% of tokens masked."""
    c = encoder.defaults(
        "neobert_mdlm" if diffusion else "neobert", neobert.default_config(),
        total_steps=1_050_000, batch=2048, seq_len=1024,
        learning_rate=6e-4, schedule="cosine_floor", final_lr_fraction=0.1, b2=0.95,
        eps=1e-8, weight_decay=0.1, warmup_steps=2000, lower_case=True, mask_prob=0.20,
        max_predictions=1024 if diffusion else 205)  # 20% of 1,022; MDLM: every token
    c.data.eval_mask_prob = 0.0  # 0: evaluate at mask_prob
    c.data.pack_examples = False  # the authors' collator pads each document's row
    c.phase2 = ml_collections.ConfigDict()
    c.phase2.fraction = 50_000 / 1_050_000  # the context extension's 50,000 steps
    c.phase2.seq_len = 4096
    c.phase2.global_batch_size = 512
    c.phase2.max_predictions_per_seq = 4096 if diffusion else 819  # 20% of 4,094
    mdlm.add_response_keys(c)  # read by MDLM; here too, so a phase may switch to it
    return c


def validate_diffusion(cfg) -> None:
    """MDLM with NeoBERT's network: room for every token's prediction in each phase."""
    encoder.validate(cfg)
    mdlm.check_room(cfg)


def validate(cfg) -> None:
    encoder.validate(cfg)
    encoder.validate_document_mlm(cfg)
    mdlm.check_documents(cfg)
    if not 0.0 <= cfg.optimizer.final_lr_fraction <= 1.0:
        raise UserError(f"optimizer.final_lr_fraction={cfg.optimizer.final_lr_fraction} "
                        "must be in [0, 1]")


registry.register(registry.Family(
    name="neobert", base="modernbert", outputs=neobert.outputs,
    default_config=neobert.default_config,
    finetune_model=neobert.finetune_model, max_positions="max_position_embeddings",
    objectives=(objectives.Entry(name="neobert", build=neobert_mlm.NeoBertMlm,
                                 defaults=defaults, validate=validate,
                                 as_pretrained=encoder.pretrained_mlm),
                objectives.Entry(name="neobert_mdlm", build=neobert_mlm.NeoBertMdlm,
                                 defaults=lambda: defaults(diffusion=True),
                                 validate=validate_diffusion,
                                 as_pretrained=encoder.pretrained_mlm))))
