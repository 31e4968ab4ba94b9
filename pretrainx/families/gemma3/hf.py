"""Gemma 3 parameters <-> HuggingFace `Gemma3ForCausalLM` / `Gemma3TextModel` state dicts
and config.json (model_type gemma3_text).

A block's attention and GeGLU are transformers' Llama-style tensors, as Qwen3's
(interop/hf_gated_decoder.py), with four norms a block, Gemma's (1 + scale) norms, whose
stored weight is the scale itself on both sides. A causal model is written as
Gemma3ForCausalLM (tensors under `model.`, the output layer tied); a bidirectional one
(model.causal=False) as
Gemma3TextModel with use_bidirectional_attention=True, the layout EmbeddingGemma ships
(tensors at the top level, no output layer). Both layouts are read.
"""

import os

import numpy as np

from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
from pretrainx.interop import hf_gated_decoder, hf_tokenizer_files
from pretrainx.families.gemma3 import model as gemma3

_NORMS = (("attention_norm", "input_layernorm"),
          ("post_attention_norm", "post_attention_layernorm"),
          ("mlp_norm", "pre_feedforward_layernorm"),
          ("post_mlp_norm", "post_feedforward_layernorm"))


def _prefix(cfg) -> str:
    """Where the decoder's tensors sit: under `model.` in Gemma3ForCausalLM, at the top
    in Gemma3TextModel (the bidirectional export)."""
    return "model." if cfg.causal else ""


def to_hf_state(params, cfg) -> dict:
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    h, top = cfg.hidden_size, _prefix(cfg)
    out = {top + "embed_tokens.weight": f32(params["token_embed"]["embedding"]),
           top + "norm.weight": f32(params["final_norm"]["scale"])}
    for i in range(cfg.num_layers):
        p, name = params[f"layer_{i}"], f"{top}layers.{i}."
        out.update(hf_gated_decoder.block_to_hf(p, name, h))
        for ours, theirs in _NORMS:
            out[name + f"{theirs}.weight"] = f32(p[ours]["scale"])
    if cfg.causal:
        out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def from_hf_state(state, cfg, source: str) -> dict:
    top = "model." if "model.embed_tokens.weight" in state else ""

    def get(name):
        if top + name not in state:
            raise UserError(f"{source}: no tensor {top + name} (expected for a Gemma 3 with "
                            f"{cfg.num_layers} layers)")
        return np.asarray(state[top + name], np.float32)

    h, d = cfg.hidden_size, cfg.head_dim
    params = {"token_embed": {"embedding": get("embed_tokens.weight")},
              "final_norm": {"scale": get("norm.weight")}}
    for i in range(cfg.num_layers):
        name = f"layers.{i}."
        params[f"layer_{i}"] = {
            **hf_gated_decoder.block_from_hf(get, name, h, d),
            **{ours: {"scale": get(name + f"{theirs}.weight")} for ours, theirs in _NORMS}}
    return params


def layer_types(cfg) -> list:
    return ["full_attention" if gemma3.is_global(cfg, i) else "sliding_attention"
            for i in range(cfg.num_layers)]


def to_hf_config(cfg, tokenizer) -> dict:
    """config.json in the keys transformers 4.57 and 5 both read (5 maps rope_theta and
    rope_local_base_freq into its rope_parameters). The window is the causal one in
    both layouts: transformers halves it itself under use_bidirectional_attention."""
    config = {
        "model_type": "gemma3_text", "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size, "intermediate_size": cfg.mlp_dim,
        "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads, "head_dim": cfg.head_dim,
        "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta,
        "rope_local_base_freq": cfg.local_rope_theta, "rope_scaling": None,
        "query_pre_attn_scalar": cfg.query_pre_attn_scalar,
        "sliding_window": cfg.sliding_window, "sliding_window_pattern":
            cfg.sliding_window_pattern, "layer_types": layer_types(cfg),
        "final_logit_softcapping": None, "attn_logit_softcapping": None,
        "attention_bias": False, "attention_dropout": cfg.attention_dropout_rate,
        "initializer_range": cfg.initializer_range, "tie_word_embeddings": True,
        "pad_token_id": int(tokenizer.pad_id), "bos_token_id": int(tokenizer.cls_id),
        "eos_token_id": int(tokenizer.sep_id), "torch_dtype": "float32",
        "use_bidirectional_attention": not cfg.causal}
    config["architectures"] = ["Gemma3ForCausalLM" if cfg.causal else "Gemma3TextModel"]
    return config


def model_config_from_hf(hf: dict, base, source: str):
    """Our model keys from a gemma3_text config.json (4.57's keys or 5's
    rope_parameters); what the family cannot hold (logit soft-capping, RoPE scaling,
    attention biases, a layer pattern other than every n-th global) is refused in one
    line."""
    rope = hf.get("rope_parameters") or {}
    full, sliding = rope.get("full_attention") or {}, rope.get("sliding_attention") or {}
    scaling = hf.get("rope_scaling") or (full if full.get("rope_type", "default") != "default"
                                         else None)
    for bad, why in ((hf.get("final_logit_softcapping"), "final_logit_softcapping"),
                     (hf.get("attn_logit_softcapping"), "attn_logit_softcapping"),
                     (hf.get("attention_bias"), "attention_bias"),
                     (scaling, "rope scaling"),
                     (hf.get("hidden_activation", "gelu_pytorch_tanh") not in
                      ("gelu_pytorch_tanh", "gelu_tanh", "gelu_new"),
                      "a hidden_activation other than tanh GeLU")):
        if bad:
            raise UserError(f"{source}: {why} is not supported for gemma3")
    m = base
    m.vocab_size = hf["vocab_size"]
    m.hidden_size = hf["hidden_size"]
    m.mlp_dim = hf["intermediate_size"]
    m.num_layers = hf["num_hidden_layers"]
    m.num_heads = hf["num_attention_heads"]
    m.num_kv_heads = hf.get("num_key_value_heads") or hf["num_attention_heads"]
    m.head_dim = hf.get("head_dim", 256)
    m.query_pre_attn_scalar = hf.get("query_pre_attn_scalar", 256)
    m.max_position_embeddings = hf.get("max_position_embeddings", m.max_position_embeddings)
    m.rms_norm_eps = hf.get("rms_norm_eps", 1e-6)
    m.rope_theta = float(hf.get("rope_theta", full.get("rope_theta", 1_000_000.0)))
    m.local_rope_theta = float(hf.get("rope_local_base_freq",
                                      sliding.get("rope_theta", 10_000.0)))
    m.sliding_window = hf.get("sliding_window", 4096)
    m.sliding_window_pattern = hf.get("sliding_window_pattern",
                                      hf.get("_sliding_window_pattern", 6))
    m.attention_dropout_rate = float(hf.get("attention_dropout", 0.0))
    m.initializer_range = hf.get("initializer_range", 0.02)
    m.causal = not hf.get("use_bidirectional_attention", False)
    m.tie_output = True  # interop/hf.py unties it where config.json says so
    if hf.get("layer_types") and list(hf["layer_types"]) != layer_types(m):
        raise UserError(f"{source}: layer_types is not a global layer every "
                        f"{m.sliding_window_pattern} (sliding_window_pattern); gemma3 holds "
                        "only that pattern")
    return m


def _read(hf: dict, state: dict, path: str) -> dict:
    model = model_config_from_hf(hf, gemma3.default_config(), os.path.join(path, "config.json"))
    tokenizer, _ = hf_lib.tokenizer_of(path)
    return dict(model=model, params=from_hf_state(state, model, path), tokenizer=tokenizer,
                lower_case=False, head="causal_lm")


def _write(pretrained, params, tokenizer):
    return to_hf_state(params, pretrained.model), to_hf_config(pretrained.model, tokenizer)


def _write_tokenizer(pretrained, tokenizer, output) -> list:
    special = {"bos_token": tokenizer.id_to_piece(tokenizer.cls_id),
               "eos_token": tokenizer.id_to_piece(tokenizer.sep_id),
               "pad_token": tokenizer.id_to_piece(tokenizer.pad_id)}
    return hf_tokenizer_files.write_decoder_tokenizer(pretrained, output, special)


# (output layer, word table): tied unless config.json says tie_word_embeddings=false
TIED = (("lm_head.weight", "model.embed_tokens.weight"),)

def _check(pretrained) -> None:
    m = pretrained.model
    if not m.causal and not m.tie_output:
        raise UserError(f"{pretrained.source}: a bidirectional Gemma 3 is written as "
                        "Gemma3TextModel, which has no output layer of its own to hold "
                        "model.tie_output=False's")


ADAPTER = hf_lib.Adapter(
    name="gemma3", tied=TIED, model_type="gemma3_text", read=_read, write=_write,
    write_tokenizer=_write_tokenizer, check=_check,
    refuses={"gemma3": "the multimodal Gemma 3 (4B and up: a vision tower beside the "
                       "decoder); pretrainx reads the text decoder, model_type gemma3_text"})
