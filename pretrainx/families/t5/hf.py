"""T5 parameters <-> HuggingFace `T5ForConditionalGeneration` state dicts and config.

HF keeps one relative-position table per stack in its first block, T5 1.0's tied
output as `shared` (scaled by d_model^-0.5 in the forward pass, as ours), and
T5 1.1's untied one as `lm_head`. Kernels are [in, out] here, [out, in] there.
"""

import os
import shutil

import numpy as np

from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
from pretrainx.families.t5 import model as t5


def _attention(ours, hf):
    pairs = [(ours + (name, "kernel"), f"{hf}.{short}.weight", "qkv")
             for name, short in (("query", "q"), ("key", "k"), ("value", "v"))]
    return pairs + [(ours + ("out", "kernel"), f"{hf}.o.weight", "out")]


def _mlp(ours, hf, gated):
    names = ("wi_0", "wi_1") if gated else ("wi",)
    pairs = [(ours + (n, "kernel"), f"{hf}.DenseReluDense.{n}.weight", "linear") for n in names]
    return pairs + [(ours + ("wo", "kernel"), f"{hf}.DenseReluDense.wo.weight", "linear")]


def name_pairs(cfg) -> list:
    gated = t5.is_gated(cfg)
    pairs = [(("token_embed", "embedding"), "shared.weight", "same"),
             (("encoder_relpos", "rel_embedding"),
              "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", "same"),
             (("decoder_relpos", "rel_embedding"),
              "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight", "same"),
             (("encoder_norm", "scale"), "encoder.final_layer_norm.weight", "same"),
             (("decoder_norm", "scale"), "decoder.final_layer_norm.weight", "same")]
    for i in range(cfg.num_layers):
        hf, ours = f"encoder.block.{i}.layer", (f"encoder_{i}",)
        pairs += _attention(ours + ("attention",), f"{hf}.0.SelfAttention")
        pairs += [(ours + ("attention_norm", "scale"), f"{hf}.0.layer_norm.weight", "same"),
                  (ours + ("mlp_norm", "scale"), f"{hf}.1.layer_norm.weight", "same")]
        pairs += _mlp(ours + ("mlp",), f"{hf}.1", gated)
    for i in range(cfg.num_decoder_layers):
        hf, ours = f"decoder.block.{i}.layer", (f"decoder_{i}",)
        pairs += _attention(ours + ("self_attention",), f"{hf}.0.SelfAttention")
        pairs += _attention(ours + ("cross_attention",), f"{hf}.1.EncDecAttention")
        pairs += [(ours + ("self_attention_norm", "scale"), f"{hf}.0.layer_norm.weight", "same"),
                  (ours + ("cross_attention_norm", "scale"), f"{hf}.1.layer_norm.weight", "same"),
                  (ours + ("mlp_norm", "scale"), f"{hf}.2.layer_norm.weight", "same")]
        pairs += _mlp(ours + ("mlp",), f"{hf}.2", gated)
    if not cfg.tie_output:
        pairs.append((("output", "kernel"), "lm_head.weight", "linear"))
    return pairs


def to_hf_state(params, cfg) -> dict:
    out = {}
    for path, name, kind in name_pairs(cfg):
        x = params
        for key in path:
            x = x[key]
        x = np.asarray(x, np.float32)
        if kind == "qkv":
            x = x.reshape(x.shape[0], -1).T
        elif kind == "out":
            x = x.reshape(-1, x.shape[-1]).T
        elif kind == "linear":
            x = x.T
        out[name] = np.ascontiguousarray(x)
    if cfg.tie_output:
        out["lm_head.weight"] = out["shared.weight"]
    out["encoder.embed_tokens.weight"] = out["shared.weight"]
    out["decoder.embed_tokens.weight"] = out["shared.weight"]
    return out


def from_hf_state(state, cfg, source: str) -> dict:
    params = {}
    for path, name, kind in name_pairs(cfg):
        if name not in state:
            raise UserError(f"{source}: no tensor {name} (expected for a T5 with "
                            f"{cfg.num_layers}+{cfg.num_decoder_layers} layers)")
        x = np.asarray(state[name], np.float32)
        if kind == "qkv":
            x = x.T.reshape(x.shape[1], cfg.num_heads, cfg.head_dim)
        elif kind == "out":
            x = x.T.reshape(cfg.num_heads, cfg.head_dim, x.shape[0])
        elif kind == "linear":
            x = x.T
        tree = params
        for key in path[:-1]:
            tree = tree.setdefault(key, {})
        tree[path[-1]] = x
    return params


def to_hf_config(cfg, pad_id: int, eos_id: int) -> dict:
    return {
        "architectures": ["T5ForConditionalGeneration"], "model_type": "t5",
        "vocab_size": cfg.vocab_size, "d_model": cfg.hidden_size, "d_kv": cfg.head_dim,
        "d_ff": cfg.mlp_dim, "num_layers": cfg.num_layers,
        "num_decoder_layers": cfg.num_decoder_layers, "num_heads": cfg.num_heads,
        "relative_attention_num_buckets": cfg.relative_attention_num_buckets,
        "relative_attention_max_distance": cfg.relative_attention_max_distance,
        "dropout_rate": cfg.dropout_rate, "layer_norm_epsilon": cfg.layer_norm_eps,
        "feed_forward_proj": cfg.feed_forward, "tie_word_embeddings": bool(cfg.tie_output),
        "is_encoder_decoder": True, "pad_token_id": int(pad_id), "eos_token_id": int(eos_id),
        "decoder_start_token_id": int(pad_id), "initializer_factor": 1.0,
        "torch_dtype": "float32",
    }


def model_config_from_hf(hf: dict, base, source: str):
    proj = hf.get("feed_forward_proj", "relu")
    if proj not in t5.FEED_FORWARD:
        raise UserError(f"{source}: feed_forward_proj {proj!r} is not supported "
                        f"({', '.join(t5.FEED_FORWARD)})")
    m = base
    m.vocab_size = hf["vocab_size"]
    m.hidden_size = hf["d_model"]
    m.head_dim = hf["d_kv"]
    m.mlp_dim = hf["d_ff"]
    m.num_layers = hf["num_layers"]
    m.num_decoder_layers = hf.get("num_decoder_layers") or hf["num_layers"]
    m.num_heads = hf["num_heads"]
    m.relative_attention_num_buckets = hf.get("relative_attention_num_buckets", 32)
    m.relative_attention_max_distance = hf.get("relative_attention_max_distance", 128)
    m.dropout_rate = hf.get("dropout_rate", 0.1)
    m.layer_norm_eps = hf.get("layer_norm_epsilon", 1e-6)
    m.feed_forward = proj
    # transformers 5 writes every T5 as tied and says by scale_decoder_outputs whether
    # the decoder's output is scaled: 1.1 (unscaled) is then our untied output layer,
    # holding the word table (lm_head.weight where the file keeps one)
    m.tie_output = bool(hf.get("tie_word_embeddings", True)) and bool(
        hf.get("scale_decoder_outputs", True))
    return m


def _read(hf: dict, state: dict, path: str) -> dict:
    model = model_config_from_hf(hf, t5.default_config(), os.path.join(path, "config.json"))
    if not model.tie_output and "lm_head.weight" not in state and "shared.weight" in state:
        state = dict(state, **{"lm_head.weight": state["shared.weight"]})
    tokenizer, _ = hf_lib.tokenizer_of(path)
    return dict(model=model, params=from_hf_state(state, model, path), tokenizer=tokenizer,
                lower_case=False, head="seq2seq",
                num_sentinels=int(hf_lib.tokenizer_config(path).get("extra_ids", 100)))


def _write(pretrained, params, tokenizer):
    return (to_hf_state(params, pretrained.model),
            to_hf_config(pretrained.model, tokenizer.pad_id, tokenizer.sep_id))


def _write_tokenizer(pretrained, tokenizer, output) -> list:
    shutil.copyfile(pretrained.tokenizer, os.path.join(output, "spiece.model"))
    config = {"tokenizer_class": "T5Tokenizer", "extra_ids": pretrained.num_sentinels,
              "model_max_length": 512, "legacy": True}
    special = hf_lib.special_tokens(tokenizer, names=("eos",))
    return ["spiece.model"] + hf_lib.write_tokenizer_config(output, config, special)


def _caveat(pretrained) -> str:
    if pretrained.model.tie_output:
        return ""
    return ("this T5 has its own output layer (T5 1.1's): transformers 4.x reads it as "
            "written, but transformers 5 (5.23) ties every T5's output layer to the word "
            "table, so there its logits differ from the ones this model computes")


ADAPTER = hf_lib.Adapter(name="t5", model_type="t5", read=_read, write=_write,
                         write_tokenizer=_write_tokenizer, caveat=_caveat)
