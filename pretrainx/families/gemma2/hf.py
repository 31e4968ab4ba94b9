"""Gemma 2 parameters <-> HuggingFace `Gemma2ForCausalLM` (model_type gemma2): Llama-style
attention and GeGLU tensors (interop/hf_gated_decoder.py, no QK-norm), four norms a
layer stored as Gemma's scale, the output layer tied to the word table."""

import os

import numpy as np

from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
from pretrainx.interop import hf_gated_decoder
from pretrainx.families.gemma2 import model as gemma2
from pretrainx.families.t5gemma import hf as t5gemma_hf
from pretrainx.families.t5gemma import model as t5gemma

_NORMS = (("self_attention_norm", "input_layernorm"),
          ("post_self_attention_norm", "post_attention_layernorm"),
          ("mlp_norm", "pre_feedforward_layernorm"),
          ("post_mlp_norm", "post_feedforward_layernorm"))


def to_hf_state(params, cfg) -> dict:
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    out = {"model.embed_tokens.weight": f32(params["token_embed"]["embedding"]),
           "model.norm.weight": f32(params["final_norm"]["scale"])}
    for i in range(cfg.num_layers):
        p, name = params[f"layer_{i}"], f"model.layers.{i}."
        out.update(hf_gated_decoder.attention_to_hf(p["self_attention"], name + "self_attn.",
                                                    qk_norm=False))
        out.update(hf_gated_decoder.mlp_to_hf(p["mlp"], name + "mlp."))
        for ours, theirs in _NORMS:
            out[name + f"{theirs}.weight"] = f32(p[ours]["scale"])
    out["lm_head.weight"] = out["model.embed_tokens.weight"]
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def from_hf_state(state, cfg, source: str) -> dict:
    def get(name):
        if name not in state:
            raise UserError(f"{source}: no tensor {name} (expected for a Gemma 2 with "
                            f"{cfg.num_layers} layers)")
        return np.asarray(state[name], np.float32)

    params = {"token_embed": {"embedding": get("model.embed_tokens.weight")},
              "final_norm": {"scale": get("model.norm.weight")}}
    for i in range(cfg.num_layers):
        name = f"model.layers.{i}."
        params[f"layer_{i}"] = {
            "self_attention": hf_gated_decoder.attention_from_hf(get, name + "self_attn.",
                                                                 cfg.head_dim, qk_norm=False),
            "mlp": hf_gated_decoder.mlp_from_hf(get, name + "mlp."),
            **{ours: {"scale": get(name + f"{theirs}.weight")} for ours, theirs in _NORMS}}
    return params


def to_hf_config(cfg, tokenizer) -> dict:
    return {
        "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
        "vocab_size": cfg.vocab_size, "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.mlp_dim, "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads, "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim, "hidden_activation": "gelu_pytorch_tanh",
        "max_position_embeddings": cfg.max_position_embeddings,
        "rms_norm_eps": cfg.rms_norm_eps, "rope_theta": cfg.rope_theta,
        "query_pre_attn_scalar": cfg.query_pre_attn_scalar,
        "sliding_window": cfg.sliding_window,
        "layer_types": ["full_attention" if t5gemma.is_global(i) else "sliding_attention"
                        for i in range(cfg.num_layers)],
        "final_logit_softcapping": cfg.final_logit_softcapping or None,
        "attn_logit_softcapping": cfg.attn_logit_softcapping or None,
        "attention_bias": False, "attention_dropout": cfg.attention_dropout_rate,
        "initializer_range": cfg.initializer_range, "tie_word_embeddings": True,
        "pad_token_id": int(tokenizer.pad_id), "eos_token_id": int(tokenizer.sep_id),
        "bos_token_id": int(tokenizer.cls_id if tokenizer.cls_id >= 0 else tokenizer.pad_id),
        "torch_dtype": "float32"}


def model_config_from_hf(hf: dict, base, source: str):
    rope = hf.get("rope_parameters") or {}
    if hf.get("attention_bias") or hf.get("rope_scaling") or rope.get(
            "rope_type", "default") != "default":
        raise UserError(f"{source}: attention biases or RoPE scaling are not supported for "
                        "gemma2")
    m = base
    m.vocab_size = hf["vocab_size"]
    m.hidden_size = hf["hidden_size"]
    m.mlp_dim = hf["intermediate_size"]
    m.num_layers = hf["num_hidden_layers"]
    m.num_heads = hf["num_attention_heads"]
    m.num_kv_heads = hf.get("num_key_value_heads") or hf["num_attention_heads"]
    m.head_dim = hf.get("head_dim", 256)
    m.query_pre_attn_scalar = hf.get("query_pre_attn_scalar", 256)
    m.sliding_window = hf.get("sliding_window") or 4096
    m.max_position_embeddings = hf.get("max_position_embeddings", 8192)
    m.rms_norm_eps = hf.get("rms_norm_eps", 1e-6)
    m.rope_theta = float(hf.get("rope_theta", rope.get("rope_theta", 10000.0)))
    m.attn_logit_softcapping = float(hf.get("attn_logit_softcapping") or 0.0)
    m.final_logit_softcapping = float(hf.get("final_logit_softcapping") or 0.0)
    m.initializer_range = hf.get("initializer_range", 0.02)
    pattern = ["full_attention" if t5gemma.is_global(i) else "sliding_attention"
               for i in range(m.num_layers)]
    if hf.get("layer_types") and list(hf["layer_types"]) != pattern:
        raise UserError(f"{source}: layer_types are not Gemma 2's alternation")
    return m


def _read(hf: dict, state: dict, path: str) -> dict:
    model = model_config_from_hf(hf, gemma2.default_config(), os.path.join(path, "config.json"))
    tokenizer, _ = hf_lib.tokenizer_of(path)
    return dict(model=model, params=from_hf_state(state, model, path), tokenizer=tokenizer,
                lower_case=False, head="causal_lm")


def _write(pretrained, params, tokenizer):
    return to_hf_state(params, pretrained.model), to_hf_config(pretrained.model, tokenizer)


ADAPTER = hf_lib.Adapter(name="gemma2", model_type="gemma2", read=_read, write=_write,
                         write_tokenizer=t5gemma_hf.write_tokenizer, can_untie=False)
