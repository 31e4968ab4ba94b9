"""BART parameters <-> HuggingFace `BartForConditionalGeneration` state dicts and config,
and a fine-tuned classifier <-> `BartForSequenceClassification` (its
`classification_head.dense` / `out_proj` are our pooler / classifier).

HF keeps the shared token table as `model.shared` (and copies it as each stack's
`embed_tokens` and as `lm_head`), each stack's position table with its two offset rows
(`embed_positions`, 1026 x d for 1,024 positions), and `final_logits_bias` as a
[1, vocab] buffer. Kernels are [in, out] here, [out, in] there; biases are 1-D.
"""

import os

import numpy as np

from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
from pretrainx.interop import hf_tokenizer_files
from pretrainx.interop import hf_tensors as t
from pretrainx.families.bart import model as bart


def _attention(ours, hf):
    pairs = []
    for name, short in (("query", "q_proj"), ("key", "k_proj"), ("value", "v_proj")):
        pairs += [(ours + (name, "kernel"), f"{hf}.{short}.weight", "qkv"),
                  (ours + (name, "bias"), f"{hf}.{short}.bias", "flat")]
    return pairs + [(ours + ("out", "kernel"), f"{hf}.out_proj.weight", "out"),
                    (ours + ("out", "bias"), f"{hf}.out_proj.bias", "same")]


def _mlp(ours, hf):
    return (t.dense_pairs(ours + ("mlp", "wi"), f"{hf}.fc1")
            + t.dense_pairs(ours + ("mlp", "wo"), f"{hf}.fc2")
            + t.norm_pairs(ours + ("mlp_norm",), f"{hf}.final_layer_norm"))


def name_pairs(cfg) -> list:
    """Every tensor but final_logits_bias, a [1, vocab] buffer in HF."""
    pairs = [(("token_embed", "embedding"), "model.shared.weight", "same")]
    for stack in ("encoder", "decoder"):
        pairs += [((f"{stack}_position_embed", "embedding"),
                   f"model.{stack}.embed_positions.weight", "same")]
        pairs += t.norm_pairs((f"{stack}_embed_norm",), f"model.{stack}.layernorm_embedding")
    for i in range(cfg.num_layers):
        hf, ours = f"model.encoder.layers.{i}", (f"encoder_{i}",)
        pairs += _attention(ours + ("attention",), f"{hf}.self_attn")
        pairs += t.norm_pairs(ours + ("attention_norm",), f"{hf}.self_attn_layer_norm")
        pairs += _mlp(ours, hf)
    for i in range(cfg.num_decoder_layers):
        hf, ours = f"model.decoder.layers.{i}", (f"decoder_{i}",)
        pairs += _attention(ours + ("self_attention",), f"{hf}.self_attn")
        pairs += t.norm_pairs(ours + ("self_attention_norm",), f"{hf}.self_attn_layer_norm")
        pairs += _attention(ours + ("cross_attention",), f"{hf}.encoder_attn")
        pairs += t.norm_pairs(ours + ("cross_attention_norm",), f"{hf}.encoder_attn_layer_norm")
        pairs += _mlp(ours, hf)
    return pairs


ARCHITECTURES = {"seq2seq": "BartForConditionalGeneration",
                 "classify": "BartForSequenceClassification"}
_HEAD_PAIRS = (t.dense_pairs(("pooler",), "classification_head.dense")
               + t.dense_pairs(("classifier",), "classification_head.out_proj"))


def to_hf_state(params, cfg, head: str = "seq2seq") -> dict:
    if head == "classify":
        out = t.to_hf(params, name_pairs(cfg) + _HEAD_PAIRS)
        out["model.encoder.embed_tokens.weight"] = out["model.shared.weight"]
        out["model.decoder.embed_tokens.weight"] = out["model.shared.weight"]
        return out
    out = t.to_hf(params, name_pairs(cfg))
    out["final_logits_bias"] = np.asarray(params["final_logits_bias"], np.float32)[None, :]
    for tied in ("model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
                 "lm_head.weight"):
        out[tied] = out["model.shared.weight"]
    return out


def from_hf_state(state, cfg, source: str, head: str = "seq2seq") -> dict:
    state = dict(state)
    if "model.shared.weight" not in state and "model.encoder.embed_tokens.weight" in state:
        state["model.shared.weight"] = state["model.encoder.embed_tokens.weight"]
    pairs = name_pairs(cfg) + (_HEAD_PAIRS if head == "classify" else [])
    params = t.from_hf(state, pairs, cfg.num_heads, source,
                       f"a {ARCHITECTURES[head]} with {cfg.num_layers}+"
                       f"{cfg.num_decoder_layers} layers")
    bias = state.get("final_logits_bias", np.zeros((1, cfg.vocab_size), np.float32))
    params["final_logits_bias"] = np.asarray(bias, np.float32).reshape(-1)
    return params


def to_hf_config(cfg, tokenizer, head: str = "seq2seq", labels=None) -> dict:
    return {
        "architectures": [ARCHITECTURES[head]], "model_type": "bart",
        "vocab_size": cfg.vocab_size, "d_model": cfg.hidden_size,
        "encoder_layers": cfg.num_layers, "decoder_layers": cfg.num_decoder_layers,
        "encoder_attention_heads": cfg.num_heads, "decoder_attention_heads": cfg.num_heads,
        "encoder_ffn_dim": cfg.mlp_dim, "decoder_ffn_dim": cfg.mlp_dim,
        "max_position_embeddings": cfg.max_position_embeddings,
        "activation_function": cfg.hidden_act, "dropout": cfg.dropout_rate,
        "attention_dropout": cfg.attention_dropout_rate,
        "activation_dropout": cfg.activation_dropout_rate, "init_std": cfg.initializer_range,
        "scale_embedding": False, "is_encoder_decoder": True, "tie_word_embeddings": True,
        "pad_token_id": int(tokenizer.pad_id), "bos_token_id": int(tokenizer.cls_id),
        "eos_token_id": int(tokenizer.sep_id), "decoder_start_token_id": int(tokenizer.sep_id),
        "forced_eos_token_id": int(tokenizer.sep_id), "torch_dtype": "float32",
        "classifier_dropout": 0.0, **t.label_config(labels),
    }


def model_config_from_hf(hf: dict, base, source: str):
    for key, wanted in (("scale_embedding", False), ("normalize_before", False),
                        ("add_final_layer_norm", False)):
        if bool(hf.get(key, False)) != wanted:
            raise UserError(f"{source}: {key}={hf.get(key)} is not BART's (mBART and "
                            "Pegasus-style variants are not supported)")
    if hf["encoder_attention_heads"] != hf["decoder_attention_heads"] or \
            hf["encoder_ffn_dim"] != hf["decoder_ffn_dim"]:
        raise UserError(f"{source}: encoder and decoder of different widths are not supported")
    m = base
    m.vocab_size = hf["vocab_size"]
    m.hidden_size = hf["d_model"]
    m.num_layers = hf["encoder_layers"]
    m.num_decoder_layers = hf["decoder_layers"]
    m.num_heads = hf["encoder_attention_heads"]
    m.mlp_dim = hf["encoder_ffn_dim"]
    m.max_position_embeddings = hf["max_position_embeddings"]
    m.hidden_act = hf.get("activation_function", "gelu")
    m.dropout_rate = hf.get("dropout", 0.1)
    m.attention_dropout_rate = hf.get("attention_dropout", 0.0)
    m.activation_dropout_rate = hf.get("activation_dropout", 0.0)
    m.initializer_range = hf.get("init_std", 0.02)
    m.decoder_start_id = hf.get("decoder_start_token_id", 2)
    return m


def _read(hf: dict, state: dict, path: str) -> dict:
    model = model_config_from_hf(hf, bart.default_config(), os.path.join(path, "config.json"))
    tokenizer, _ = hf_lib.tokenizer_of(path)
    head = t.head_of(hf, ARCHITECTURES, default="seq2seq")
    return dict(model=model, params=from_hf_state(state, model, path, head), tokenizer=tokenizer,
                lower_case=False, head=head, labels=t.labels_of(hf, head))


def _write(pretrained, params, tokenizer):
    head = pretrained.head if pretrained.head == "classify" else "seq2seq"
    labels = pretrained.labels if head == "classify" else None
    return (to_hf_state(params, pretrained.model, head),
            to_hf_config(pretrained.model, tokenizer, head, labels))


def _write_tokenizer(pretrained, tokenizer, output) -> list:
    return hf_tokenizer_files.write_fairseq_bpe(pretrained, tokenizer, output, "BartTokenizer",
                                        pretrained.model.max_position_embeddings)


# (output layer, word table): tied unless config.json says tie_word_embeddings=false
TIED = (("lm_head.weight",
         "model.shared.weight"),)

ADAPTER = hf_lib.Adapter(name="bart", tied=TIED, can_untie=False,
                         model_type="bart", read=_read, write=_write,
                         write_tokenizer=_write_tokenizer)
