"""Model families by `model.family`, each registered by its folder in pretrainx/families.

A family's entry says what generic code may ask of it: the model keys with its
paper's values, and whether (and how) it fine-tunes and samples. Families that
only pretrain (ELMo) need no entry beyond their objective's; RoBERTa, SpanBERT,
ALBERT and ELECTRA reuse BERT's modules and register entries of their own, so that
their runs fine-tune and export with their own model keys.
"""

import dataclasses
from typing import Callable

from pretrainx.registry import Registry

FAMILIES = Registry("model family")


@dataclasses.dataclass(frozen=True)
class Family:
    name: str
    default_config: Callable  # () -> the family's model.* keys, the paper's values
    # (model_cfg, head, num_labels, peft) -> the module that fine-tuning trains; None:
    # this family does not fine-tune
    finetune_model: Callable | None = None
    # fine-tuning by generating label words: "never" (heads only), "always" (T5) or
    # "optional" (BART: heads, or words with the fine-tuning key text_to_text)
    text_to_text: str = "never"
    # a text-to-text pair's ids: "eos" (T5: text </s>, the decoder starts at 0) or
    # "bos_eos" (BART: <s> text </s> on both sides, the decoder starts at </s>)
    text_framing: str = "eos"
    # (model_cfg, params, tokens, segment_ids, length, eos_id, pad_id, num_beams) ->
    # [batch, length] ids the decoder writes: text-to-text predictions
    generate: Callable | None = None
    peft: bool = False  # takes LoRA, adapters, prefix and prompt tuning
    max_positions: str = ""  # the model key that bounds a fine-tuning length
    # (model_cfg) -> the model with a key-value cache that `python -m pretrainx.generate`
    # samples from (sampling.py); None: this family is not sampled token by token
    causal_sampling: Callable | None = None
    # (model_cfg, head) -> the pretraining model whose "mlm_logits" fill [MASK]
    # (notebook.fill_mask; head: the checkpoint's, pretrain or mlm); None: it has none
    fill_mask: Callable | None = None
    # the ids this family gives a byte-level vocabulary (data.bpe.LAYOUTS; "": the file's)
    tokenizer_layout: str = ""


def family(name: str) -> Family:
    return FAMILIES.get(name, "model.family")


register = FAMILIES.register
