"""The ModernBERT decoder (model.causal: Ettin's decoders) <-> HuggingFace's
`ModernBertDecoderForCausalLM` (transformers >= 4.54, model_type modernbert-decoder).

The decoder's tensors are the encoder's (hf.py) under other names: query, key and value
apart (`attn.q_proj` ...) where the encoder fuses `attn.Wqkv`, and the prediction head
as `lm_head` where the encoder's is `head`; `decoder` (tied, with its bias) is the same.
HF's window (config `local_attention`, `sliding_window` = half of it) counts the token
itself; model.py's causal window is set to match.

transformers 4.57's decoder applies `global_rope_theta` in every layer and 5.x applies
`local_rope_theta` in the local ones, so a decoder whose two bases differ would run
differently on the two; it is refused on export (Ettin's released decoders, after
their context extension, have one base).
"""

import os
import re

from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
import pretrainx.interop.hf_tensors as t
from pretrainx.families.modernbert import hf as hf_encoder
from pretrainx.families.modernbert import model as modernbert

ARCHITECTURE = "ModernBertDecoderForCausalLM"


def _hf_name(encoder_name: str) -> str:
    name = re.sub(r"attn\.W([qkv])\.weight$", r"attn.\1_proj.weight", encoder_name)
    return "lm_head." + name[len("head."):] if name.startswith("head.") else name


def name_pairs(num_layers: int, head: str) -> list:
    """Our path <-> HF name: the encoder's table (with its MLM head, or none) renamed."""
    encoder_head = "mlm" if head == "causal_lm" else "none"
    return [(ours, _hf_name(name), kind)
            for ours, name, kind in hf_encoder.name_pairs(num_layers, encoder_head)]


def _read(hf: dict, state: dict, path: str) -> dict:
    # HF's decoder classifies from the last real token, as model.default_config(True)
    m = hf_encoder.model_config(hf, os.path.join(path, "config.json"), causal=True)
    head = t.head_of(hf, {"causal_lm": ARCHITECTURE})
    what = f"a {ARCHITECTURE if head == 'causal_lm' else 'ModernBertDecoderModel'} with " \
           f"{m.num_layers} layers"
    for i in range(m.num_layers):
        if f"model.layers.{i}.mlp.Wi.weight" not in state:
            raise UserError(f"{path}: no tensor model.layers.{i}.mlp.Wi.weight (expected for "
                            f"{what})")
    params = t.from_hf(hf_encoder.split(state, m.num_layers, qkv=False),
                       name_pairs(m.num_layers, head), m.num_heads, path, what)
    tokenizer, lower_case = hf_lib.tokenizer_of(path)
    return dict(model=m, params=hf_encoder.glu_halves(params, m.num_layers, join=True),
                tokenizer=tokenizer, lower_case=lower_case, head=head)


def _check(pretrained) -> None:
    m = pretrained.model
    if m.local_rope_theta != m.global_rope_theta:
        raise UserError(
            f"model.local_rope_theta={m.local_rope_theta} differs from model.global_rope_theta="
            f"{m.global_rope_theta}: transformers 4.x's ModernBertDecoder applies the global "
            "base in every layer and 5.x the local one in local layers, so no HF export "
            "would run as this model does")
    if pretrained.head != "causal_lm":
        raise UserError(f"a ModernBERT decoder exports with its language-model head; this "
                        f"checkpoint's head is {pretrained.head!r}")


def _write(pretrained, params, tokenizer):
    m = pretrained.model
    halves = hf_encoder.glu_halves(params, m.num_layers, join=False)
    state = hf_encoder.fuse(t.to_hf(halves, name_pairs(m.num_layers, "causal_lm")),
                            m.num_layers, qkv=False)
    state["decoder.weight"] = state["model.embeddings.tok_embeddings.weight"]
    config = hf_encoder.config_json(m, tokenizer, ARCHITECTURE, "modernbert-decoder")
    del config["classifier_pooling"]  # HF's decoder classifies from the last token
    return state, config


ADAPTER = hf_lib.Adapter(
    name="modernbert", tied=hf_encoder.TIED, model_type="modernbert-decoder", read=_read,
    write=_write, write_tokenizer=hf_encoder.write_tokenizer, check=_check,
    writes=lambda pretrained: modernbert.causal(pretrained.model))
