"""T5Gemma parameters <-> HuggingFace `T5GemmaForConditionalGeneration` state dicts and
config.json (model_type t5gemma, an `encoder` and a `decoder` module config).

Each stack is Gemma 2's tensors under model.encoder. / model.decoder. (Llama-style
attention and GeGLU, interop/hf_gated_decoder.py, without QK-norm), four norms a layer
(six in the decoder: the cross-attention's pair), Gemma's (1 + scale) norms stored as
the scale. The output layer lm_head.out_proj is tied to the decoder's word table.
"""

import os

import numpy as np

from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
from pretrainx.interop import hf_gated_decoder, hf_tokenizer_files
from pretrainx.families.t5gemma import model as t5gemma

_NORMS = (("self_attention_norm", "pre_self_attn_layernorm"),
          ("post_self_attention_norm", "post_self_attn_layernorm"),
          ("mlp_norm", "pre_feedforward_layernorm"),
          ("post_mlp_norm", "post_feedforward_layernorm"))
_CROSS_NORMS = (("cross_attention_norm", "pre_cross_attn_layernorm"),
                ("post_cross_attention_norm", "post_cross_attn_layernorm"))


def _stacks(cfg):
    return (("encoder", t5gemma.stack(cfg, False)), ("decoder", t5gemma.stack(cfg, True)))


def to_hf_state(params, cfg) -> dict:
    f32 = lambda x: np.asarray(x, np.float32)  # noqa: E731
    out = {}
    for side, shape in _stacks(cfg):
        top = f"model.{side}."
        out[top + "embed_tokens.weight"] = f32(params[f"{side}_embed"]["embedding"])
        out[top + "norm.weight"] = f32(params[f"{side}_norm"]["scale"])
        for i in range(shape.num_layers):
            p, name = params[f"{side}_{i}"], f"{top}layers.{i}."
            out.update(hf_gated_decoder.attention_to_hf(p["self_attention"],
                                                        name + "self_attn.", qk_norm=False))
            out.update(hf_gated_decoder.mlp_to_hf(p["mlp"], name + "mlp."))
            norms = _NORMS + (_CROSS_NORMS if side == "decoder" else ())
            if side == "decoder":
                out.update(hf_gated_decoder.attention_to_hf(
                    p["cross_attention"], name + "cross_attn.", qk_norm=False))
            for ours, theirs in norms:
                out[name + f"{theirs}.weight"] = f32(p[ours]["scale"])
    out["lm_head.out_proj.weight"] = (out["model.decoder.embed_tokens.weight"]
                                      if cfg.tie_output else f32(params["output"]["kernel"]).T)
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def from_hf_state(state, cfg, source: str) -> dict:
    def get(name):
        if name not in state:
            raise UserError(f"{source}: no tensor {name} (expected for a T5Gemma of "
                            f"{cfg.num_layers} + {cfg.num_decoder_layers} layers)")
        return np.asarray(state[name], np.float32)

    params = {}
    for side, shape in _stacks(cfg):
        top = f"model.{side}."
        params[f"{side}_embed"] = {"embedding": get(top + "embed_tokens.weight")}
        params[f"{side}_norm"] = {"scale": get(top + "norm.weight")}
        for i in range(shape.num_layers):
            name = f"{top}layers.{i}."
            layer = {"self_attention": hf_gated_decoder.attention_from_hf(
                         get, name + "self_attn.", shape.head_dim, qk_norm=False),
                     "mlp": hf_gated_decoder.mlp_from_hf(get, name + "mlp.")}
            norms = _NORMS
            if side == "decoder":
                layer["cross_attention"] = hf_gated_decoder.attention_from_hf(
                    get, name + "cross_attn.", shape.head_dim, qk_norm=False)
                norms = _NORMS + _CROSS_NORMS
            layer.update({ours: {"scale": get(name + f"{theirs}.weight")}
                          for ours, theirs in norms})
            params[f"{side}_{i}"] = layer
    if not cfg.tie_output:
        params["output"] = {"kernel": get("lm_head.out_proj.weight").T}
    return params


def _module_config(cfg, side: str, shape) -> dict:
    return {
        "model_type": "t5_gemma_module", "vocab_size": cfg.vocab_size,
        "hidden_size": shape.hidden_size, "intermediate_size": shape.mlp_dim,
        "num_hidden_layers": shape.num_layers, "num_attention_heads": shape.num_heads,
        "num_key_value_heads": shape.num_kv_heads, "head_dim": shape.head_dim,
        "hidden_activation": "gelu_pytorch_tanh", "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta, "query_pre_attn_scalar": shape.query_pre_attn_scalar,
        "sliding_window": shape.sliding_window,
        "layer_types": ["full_attention" if t5gemma.is_global(i) else "sliding_attention"
                        for i in range(shape.num_layers)],
        "final_logit_softcapping": cfg.final_logit_softcapping or None,
        "attn_logit_softcapping": cfg.attn_logit_softcapping or None,
        "attention_bias": False, "initializer_range": cfg.initializer_range,
        "is_decoder": side == "decoder"}


def to_hf_config(cfg, tokenizer) -> dict:
    ids = {"pad_token_id": int(tokenizer.pad_id), "eos_token_id": int(tokenizer.sep_id),
           "bos_token_id": int(tokenizer.pad_id)}
    config = {"architectures": ["T5GemmaForConditionalGeneration"], "model_type": "t5gemma",
              "encoder": dict(_module_config(cfg, "encoder", t5gemma.stack(cfg, False)), **ids),
              "decoder": dict(_module_config(cfg, "decoder", t5gemma.stack(cfg, True)), **ids),
              "vocab_size": cfg.vocab_size, "is_encoder_decoder": True,
              "dropout_rate": cfg.dropout_rate, "attention_dropout": cfg.attention_dropout_rate,
              "tie_word_embeddings": bool(cfg.tie_output),
              # our decoder starts from pad, as T5's
              "decoder_start_token_id": int(tokenizer.pad_id), "torch_dtype": "float32", **ids}
    return config


def model_config_from_hf(hf: dict, base, source: str):
    """Our keys from a t5gemma config.json; what the family cannot hold (attention biases,
    RoPE scaling, another layer pattern, different soft-caps or norms a stack) is refused
    in one line."""
    enc, dec = hf.get("encoder") or {}, hf.get("decoder") or {}
    if not enc or not dec:
        raise UserError(f"{source}: no encoder and decoder module configs")
    m = base
    shared = {}
    for side, sub, prefix in (("encoder", enc, ""), ("decoder", dec, "decoder_")):
        rope = sub.get("rope_parameters") or {}
        if sub.get("attention_bias") or (sub.get("rope_scaling") or rope.get(
                "rope_type", "default") != "default"):
            raise UserError(f"{source}: the {side}'s attention biases or RoPE scaling are not "
                            "supported for t5gemma")
        if sub.get("hidden_activation", "gelu_pytorch_tanh") not in (
                "gelu_pytorch_tanh", "gelu_tanh", "gelu_new"):
            raise UserError(f"{source}: the {side}'s hidden_activation "
                            f"{sub['hidden_activation']!r} is not tanh GeLU")
        layers_key = "num_layers" if side == "encoder" else "num_decoder_layers"
        m[layers_key] = sub["num_hidden_layers"]
        m[prefix + "hidden_size"] = sub["hidden_size"]
        m[prefix + "mlp_dim"] = sub["intermediate_size"]
        m[prefix + "num_heads"] = sub["num_attention_heads"]
        m[prefix + "num_kv_heads"] = sub.get("num_key_value_heads") or sub["num_attention_heads"]
        m[prefix + "head_dim"] = sub.get("head_dim", 256)
        m[prefix + "query_pre_attn_scalar"] = sub.get("query_pre_attn_scalar", 256)
        m[prefix + "sliding_window"] = sub.get("sliding_window") or 4096
        pattern = ["full_attention" if t5gemma.is_global(i) else "sliding_attention"
                   for i in range(sub["num_hidden_layers"])]
        if sub.get("layer_types") and list(sub["layer_types"]) != pattern:
            raise UserError(f"{source}: the {side}'s layer_types are not Gemma 2's "
                            "alternation (sliding, global, ...)")
        for key in ("rms_norm_eps", "attn_logit_softcapping", "final_logit_softcapping"):
            shared.setdefault(key, set()).add(sub.get(key))
        theta = sub.get("rope_theta", rope.get("rope_theta", 10000.0))
        shared.setdefault("rope_theta", set()).add(float(theta))
    for key, values in shared.items():
        if len(values) > 1 and key != "final_logit_softcapping":
            raise UserError(f"{source}: the encoder and decoder differ in {key} "
                            f"({sorted(values, key=str)}); t5gemma holds one")
    m.vocab_size = hf.get("vocab_size") or dec["vocab_size"]
    m.rms_norm_eps = shared["rms_norm_eps"].pop() or 1e-6
    m.attn_logit_softcapping = float(shared["attn_logit_softcapping"].pop() or 0.0)
    m.final_logit_softcapping = float(dec.get("final_logit_softcapping") or 0.0)
    m.rope_theta = shared["rope_theta"].pop()
    m.dropout_rate = float(hf.get("dropout_rate", 0.0))
    m.attention_dropout_rate = float(hf.get("attention_dropout", 0.0))
    m.initializer_range = dec.get("initializer_range", 0.02)
    m.tie_output = bool(hf.get("tie_word_embeddings", True))
    return m


def _read(hf: dict, state: dict, path: str) -> dict:
    model = model_config_from_hf(hf, t5gemma.default_config(), os.path.join(path, "config.json"))
    tokenizer, _ = hf_lib.tokenizer_of(path)
    return dict(model=model, params=from_hf_state(state, model, path), tokenizer=tokenizer,
                lower_case=False, head="seq2seq")


def _write(pretrained, params, tokenizer):
    return to_hf_state(params, pretrained.model), to_hf_config(pretrained.model, tokenizer)


def write_tokenizer(pretrained, tokenizer, output) -> list:
    """The SentencePiece files with </s> and <pad> named (Gemma 2's adapter writes the
    same)."""
    special = {"eos_token": tokenizer.id_to_piece(tokenizer.sep_id),
               "pad_token": tokenizer.id_to_piece(tokenizer.pad_id)}
    return hf_tokenizer_files.write_decoder_tokenizer(pretrained, output, special)


ADAPTER = hf_lib.Adapter(name="t5gemma", model_type="t5gemma", read=_read, write=_write,
                         write_tokenizer=write_tokenizer)
