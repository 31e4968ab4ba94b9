"""Qwen3 parameters <-> HuggingFace `Qwen3ForCausalLM` state dicts and config.json.

A block's attention and SwiGLU are transformers' Llama-style tensors
(interop/hf_gated_decoder.py); here its two norms and the model's. The output layer is
tied to `embed_tokens` unless config.json says tie_word_embeddings=false (the larger
sizes), which interop/hf.py reads and writes for every family.
"""

import os

import numpy as np

from pretrainx.data import bpe
from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
from pretrainx.interop import hf_gated_decoder, hf_tokenizer_files
from pretrainx.families.qwen3 import model as qwen3

_NORMS = (("attention_norm", "input_layernorm"), ("mlp_norm", "post_attention_layernorm"))


def to_hf_state(params, cfg) -> dict:
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    h = cfg.hidden_size
    out = {"model.embed_tokens.weight": f32(params["token_embed"]["embedding"]),
           "model.norm.weight": f32(params["final_norm"]["scale"])}
    for i in range(cfg.num_layers):
        p, name = params[f"layer_{i}"], f"model.layers.{i}."
        out.update(hf_gated_decoder.block_to_hf(p, name, h))
        for ours, theirs in _NORMS:
            out[name + f"{theirs}.weight"] = f32(p[ours]["scale"])
    out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def from_hf_state(state, cfg, source: str) -> dict:
    def get(name):
        if name not in state:
            raise UserError(f"{source}: no tensor {name} (expected for a Qwen3 with "
                            f"{cfg.num_layers} layers)")
        return np.asarray(state[name], np.float32)

    h, d = cfg.hidden_size, cfg.head_dim
    params = {"token_embed": {"embedding": get("model.embed_tokens.weight")},
              "final_norm": {"scale": get("model.norm.weight")}}
    for i in range(cfg.num_layers):
        name = f"model.layers.{i}."
        params[f"layer_{i}"] = {
            **hf_gated_decoder.block_from_hf(get, name, h, d),
            **{ours: {"scale": get(name + f"{theirs}.weight")} for ours, theirs in _NORMS}}
    return params


def to_hf_config(cfg, eos_id: int) -> dict:
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
            "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
            "intermediate_size": cfg.mlp_dim, "num_hidden_layers": cfg.num_layers,
            "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
            "head_dim": cfg.head_dim, "hidden_act": cfg.hidden_act,
            "max_position_embeddings": cfg.max_position_embeddings,
            "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta,
            "attention_bias": False, "attention_dropout": cfg.attention_dropout_rate,
            "initializer_range": cfg.initializer_range, "use_sliding_window": False,
            "tie_word_embeddings": True, "bos_token_id": int(eos_id),
            "eos_token_id": int(eos_id), "torch_dtype": "float32"}


def model_config_from_hf(hf: dict, base, source: str):
    """Our model keys from a Qwen3 config.json (transformers 4.57's keys, or 5's
    rope_parameters); what it cannot hold (sliding windows, attention biases, RoPE
    scaling) is refused in one line."""
    rope = hf.get("rope_parameters") or {}
    theta = hf.get("rope_theta", rope.get("rope_theta"))
    scaling = hf.get("rope_scaling") or (rope if rope.get("rope_type", "default") != "default"
                                         else None)
    for bad, why in ((hf.get("use_sliding_window"), "use_sliding_window"),
                     (hf.get("attention_bias"), "attention_bias"),
                     (scaling, "rope scaling"),
                     (hf.get("hidden_act", "silu") != "silu", "a hidden_act other than silu")):
        if bad:
            raise UserError(f"{source}: {why} is not supported for qwen3")
    m = base
    m.vocab_size = hf["vocab_size"]
    m.hidden_size = hf["hidden_size"]
    m.mlp_dim = hf["intermediate_size"]
    m.num_layers = hf["num_hidden_layers"]
    m.num_heads = hf["num_attention_heads"]
    m.num_kv_heads = hf.get("num_key_value_heads") or hf["num_attention_heads"]
    m.head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
    m.max_position_embeddings = hf.get("max_position_embeddings", m.max_position_embeddings)
    m.rms_norm_eps = hf.get("rms_norm_eps", 1e-6)
    m.rope_theta = float(theta if theta is not None else 10_000.0)
    m.attention_dropout_rate = float(hf.get("attention_dropout", 0.0))
    m.initializer_range = hf.get("initializer_range", 0.02)
    m.tie_output = True  # interop/hf.py unties it where config.json says so
    return m


def _read(hf: dict, state: dict, path: str) -> dict:
    model = model_config_from_hf(hf, qwen3.default_config(), os.path.join(path, "config.json"))
    tokenizer, _ = hf_lib.tokenizer_of(path)
    return dict(model=model, params=from_hf_state(state, model, path), tokenizer=tokenizer,
                lower_case=False, head="causal_lm")


def _write(pretrained, params, tokenizer):
    return (to_hf_state(params, pretrained.model),
            to_hf_config(pretrained.model, getattr(tokenizer, "eot_id", tokenizer.sep_id)))


def _write_tokenizer(pretrained, tokenizer, output) -> list:
    special = {"eos_token": bpe.END_OF_TEXT, "pad_token": bpe.END_OF_TEXT}
    return hf_tokenizer_files.write_decoder_tokenizer(pretrained, output, special)


# (output layer, word table): tied unless config.json says tie_word_embeddings=false
TIED = (("lm_head.weight", "model.embed_tokens.weight"),)


def _caveat(pretrained) -> str:
    """HF's Qwen3ForCausalLM has no switch for bidirectional attention: the folder holds the
    weights, and HF runs them causally."""
    if pretrained.model.causal:
        return ""
    return ("this model attends both ways (model.causal=False); transformers' Qwen3ForCausalLM "
            "has no such switch and runs the exported weights causally, so its states differ "
            "from pretrainx.embed's")


ADAPTER = hf_lib.Adapter(name="qwen3", tied=TIED, model_type="qwen3", read=_read,
                         write=_write, write_tokenizer=_write_tokenizer,
                         caveat=_caveat)
