"""ModernBERT parameters <-> HuggingFace `ModernBertFor*` state dicts and config.json.

HF fuses two projections that we keep apart: `attn.Wqkv` holds query, key and value
as three row blocks ([3 x heads x head_dim, hidden]), and `mlp.Wi` the GeGLU's two
halves ([2 x mlp, hidden]: the activated half first). Norms have no bias; the MLM
decoder is tied to `model.embeddings.tok_embeddings` and keeps its own bias; a task
model has `head` (the MLM head's dense + norm, so a fine-tune starts from it, as in
transformers) and `classifier`. HF's prediction head applies `classifier_activation`
where ours applies model.hidden_act: the two must agree.
"""

import os

import numpy as np

from pretrainx.data import bpe
from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
from pretrainx.interop import hf_tokenizer_files
import pretrainx.interop.hf_tensors as t
from pretrainx.families.modernbert import model as modernbert

ARCHITECTURES = {"mlm": "ModernBertForMaskedLM",
                 "classify": "ModernBertForSequenceClassification",
                 "tokens": "ModernBertForTokenClassification",
                 "span": "ModernBertForQuestionAnswering"}
_QKV = ("query", "key", "value")
# HF's bias switches that ModernBERT as released (and as we build it) has off/on.
_FIXED = {"attention_bias": False, "mlp_bias": False, "norm_bias": False,
          "classifier_bias": False, "decoder_bias": True}


def _norm(ours: tuple, hf: str) -> tuple:
    return (ours + ("scale",), f"{hf}.weight", "same")


def name_pairs(num_layers: int, head: str) -> list:
    """Our path <-> HF name, with the fused tensors as their parts (see _split)."""
    m = "model."
    pairs = [(("model", "token_embed", "embedding"), m + "embeddings.tok_embeddings.weight",
              "same"),
             _norm(("model", "embed_norm"), m + "embeddings.norm"),
             _norm(("model", "final_norm"), m + "final_norm")]
    for i in range(num_layers):
        ours, hf = ("model", f"layer_{i}"), f"{m}layers.{i}."
        if i:
            pairs.append(_norm(ours + ("attention_norm",), hf + "attn_norm"))
        pairs += [(ours + ("attention", p, "kernel"), f"{hf}attn.W{p[0]}.weight", "qkv")
                  for p in _QKV]
        pairs += [(ours + ("attention", "out", "kernel"), hf + "attn.Wo.weight", "out"),
                  _norm(ours + ("mlp_norm",), hf + "mlp_norm"),
                  (ours + ("mlp", "wi_0", "kernel"), hf + "mlp.Wi_0.weight", "linear"),
                  (ours + ("mlp", "wi_1", "kernel"), hf + "mlp.Wi_1.weight", "linear"),
                  (ours + ("mlp", "wo", "kernel"), hf + "mlp.Wo.weight", "linear")]
    pairs += [(("head", "dense", "kernel"), "head.dense.weight", "linear"),
              _norm(("head", "norm"), "head.norm")]
    if head == "mlm":
        pairs.append((("mlm_bias",), "decoder.bias", "same"))
    elif head in ("classify", "tokens", "span"):
        pairs += t.dense_pairs(("classifier",), "classifier")
    return pairs


def split(state: dict, num_layers: int, qkv: bool = True) -> dict:
    """HF's fused Wi (and with `qkv` Wqkv: the decoder's are apart) as the parts the
    name table reads."""
    state = dict(state)
    for i in range(num_layers):
        p = f"model.layers.{i}."
        if qkv:
            blocks = np.split(np.asarray(state.pop(p + "attn.Wqkv.weight")), 3)
            for part, block in zip("qkv", blocks):
                state[f"{p}attn.W{part}.weight"] = block
        first, second = np.split(np.asarray(state.pop(p + "mlp.Wi.weight")), 2)
        state[p + "mlp.Wi_0.weight"], state[p + "mlp.Wi_1.weight"] = first, second
    return state


def fuse(state: dict, num_layers: int, qkv: bool = True) -> dict:
    for i in range(num_layers):
        p = f"model.layers.{i}."
        if qkv:
            state[p + "attn.Wqkv.weight"] = np.concatenate(
                [state.pop(f"{p}attn.W{part}.weight") for part in "qkv"])
        state[p + "mlp.Wi.weight"] = np.concatenate(
            [state.pop(p + "mlp.Wi_0.weight"), state.pop(p + "mlp.Wi_1.weight")])
    return state


def glu_halves(params: dict, num_layers: int, join: bool) -> dict:
    """Our fused wi kernel [embed, 2, mlp] <-> its halves wi_0 / wi_1 [embed, mlp]."""
    params = {k: dict(v) if isinstance(v, dict) else v for k, v in params.items()}
    model = params["model"] = dict(params["model"])
    for i in range(num_layers):
        layer = model[f"layer_{i}"] = dict(model[f"layer_{i}"])
        mlp = layer["mlp"] = dict(layer["mlp"])
        if join:
            mlp["wi"] = {"kernel": np.stack([mlp.pop("wi_0")["kernel"],
                                             mlp.pop("wi_1")["kernel"]], axis=1)}
        else:
            wi = np.asarray(mlp.pop("wi")["kernel"])
            mlp["wi_0"], mlp["wi_1"] = {"kernel": wi[:, 0]}, {"kernel": wi[:, 1]}
    return params


def _theta(hf: dict, layers: str, config_file: str, causal: bool) -> float:
    """RoPE's base in the global (`full_attention`) or local (`sliding_attention`)
    layers: transformers 5 writes `rope_parameters` per kind of layer, 4.x
    `global_rope_theta` and `local_rope_theta` (missing: the encoder's 10,000; 4.x's
    decoder applies the global base everywhere)."""
    given = (hf.get("rope_parameters") or {}).get(layers)
    if given:
        if given.get("rope_type", "default") != "default":
            raise UserError(f"{config_file}: rope_parameters.{layers}.rope_type="
                            f"{given['rope_type']!r} is not supported (plain RoPE only)")
        return float(given["rope_theta"])
    glob = float(hf.get("global_rope_theta", 160_000.0))
    if layers == "full_attention":
        return glob
    return float(hf.get("local_rope_theta") or (glob if causal else 10_000.0))


def model_config(hf: dict, config_file: str, causal: bool = False):
    """Our model keys from config.json (an encoder's, or with `causal` a decoder's);
    what we do not build is refused, naming the key."""
    for key, value in _FIXED.items():
        if hf.get(key, value) != value:
            raise UserError(f"{config_file}: {key}={hf[key]} is not supported (ModernBERT as "
                            f"released has {key}={value})")
    act = hf.get("hidden_activation", "gelu")
    if hf.get("classifier_activation", "gelu") != act:
        raise UserError(f"{config_file}: classifier_activation={hf['classifier_activation']} "
                        f"differs from hidden_activation={act}; pretrainx applies one")
    if hf.get("embedding_dropout", 0.0) != hf.get("mlp_dropout", 0.0):
        raise UserError(f"{config_file}: embedding_dropout and mlp_dropout differ; pretrainx's "
                        "model.dropout_rate is both")
    acts = {v: k for k, v in hf_lib.ACT_TO_HF.items()}
    if act not in acts:
        raise UserError(f"{config_file}: hidden_activation={act!r} is not supported")
    m = modernbert.default_config(causal)
    m.update(num_layers=hf["num_hidden_layers"], hidden_size=hf["hidden_size"],
             num_heads=hf["num_attention_heads"], mlp_dim=hf["intermediate_size"],
             vocab_size=hf["vocab_size"], hidden_act=acts[act],
             max_position_embeddings=hf.get("max_position_embeddings", 8192),
             layer_norm_eps=hf.get("norm_eps", 1e-5),
             initializer_range=hf.get("initializer_range", 0.02),
             global_rope_theta=_theta(hf, "full_attention", config_file, causal),
             local_rope_theta=_theta(hf, "sliding_attention", config_file, causal),
             global_attn_every_n_layers=hf.get("global_attn_every_n_layers", 3),
             local_attention=hf.get("local_attention", 128),
             dropout_rate=hf.get("embedding_dropout", 0.0),
             attention_dropout_rate=hf.get("attention_dropout", 0.0),
             classifier_pooling=hf.get("classifier_pooling", m.classifier_pooling),
             classifier_dropout=hf.get("classifier_dropout", 0.0))
    return m


def _read(hf: dict, state: dict, path: str) -> dict:
    m = model_config(hf, os.path.join(path, "config.json"))
    head = t.head_of(hf, ARCHITECTURES)
    what = f"a {ARCHITECTURES.get(head, 'ModernBertModel')} with {m.num_layers} layers"
    for i in range(m.num_layers):
        for name in ("attn.Wqkv.weight", "mlp.Wi.weight"):
            if f"model.layers.{i}.{name}" not in state:
                raise UserError(f"{path}: no tensor model.layers.{i}.{name} (expected for {what})")
    pairs = name_pairs(m.num_layers, head if head != "encoder" else "none")
    params = t.from_hf(split(state, m.num_layers), pairs, m.num_heads, path, what,
                       optional=lambda name: name.startswith("head.") and head == "encoder")
    tokenizer, lower_case = hf_lib.tokenizer_of(path)
    return dict(model=m, params=glu_halves(params, m.num_layers, join=True),
                tokenizer=tokenizer, lower_case=lower_case, head=head,
                labels=t.labels_of(hf, head))


def _write(pretrained, params, tokenizer):
    m, head = pretrained.model, pretrained.head
    halves = glu_halves(params, m.num_layers, join=False)
    state = fuse(t.to_hf(halves, name_pairs(m.num_layers, head)), m.num_layers)
    if head == "mlm":
        state["decoder.weight"] = state["model.embeddings.tok_embeddings.weight"]
    config = config_json(m, tokenizer, ARCHITECTURES.get(head, "ModernBertModel"), "modernbert")
    config.update(t.label_config(pretrained.labels if head in ("classify", "tokens") else None))
    return state, config


def config_json(m, tokenizer, architecture: str, model_type: str) -> dict:
    """config.json of model keys `m` (an encoder's or a decoder's)."""
    act = hf_lib.ACT_TO_HF[m.hidden_act]
    ids = {"pad_token_id": int(tokenizer.pad_id), "cls_token_id": int(tokenizer.cls_id),
           "bos_token_id": int(tokenizer.cls_id), "sep_token_id": int(tokenizer.sep_id),
           "eos_token_id": int(tokenizer.sep_id)}
    return {"architectures": [architecture], "model_type": model_type,
            "vocab_size": m.vocab_size,
            "hidden_size": m.hidden_size, "intermediate_size": m.mlp_dim,
            "num_hidden_layers": m.num_layers, "num_attention_heads": m.num_heads,
            "hidden_activation": act, "classifier_activation": act,
            "max_position_embeddings": m.max_position_embeddings,
            "initializer_range": m.initializer_range, "initializer_cutoff_factor": 2.0,
            "norm_eps": m.layer_norm_eps, "global_rope_theta": m.global_rope_theta,
            "local_rope_theta": m.local_rope_theta,
            "global_attn_every_n_layers": m.global_attn_every_n_layers,
            "local_attention": m.local_attention, "embedding_dropout": m.dropout_rate,
            "mlp_dropout": m.dropout_rate, "attention_dropout": m.attention_dropout_rate,
            "classifier_pooling": m.classifier_pooling,
            "classifier_dropout": m.classifier_dropout, "tie_word_embeddings": True,
            "torch_dtype": "float32", **_FIXED, **ids}


def write_tokenizer(pretrained, tokenizer, output) -> list:
    """The tokenizer in the files its kind needs: a byte-level vocabulary as RoBERTa's
    vocab.json and merges.txt (in the ids the run trained with) and a tokenizer.json of
    them; the others as BERT's (a release's tokenizer.json as it is, a SentencePiece
    model as a tokenizer.json). ModernBERT has no tokenizer class of its own and takes
    no token_type_ids: its tokenizer must not hand them over."""
    no_types = {"model_input_names": ["input_ids", "attention_mask"]}
    if bpe.files_in(pretrained.tokenizer):  # transformers 5 reads its tokenizer.json
        return hf_tokenizer_files.write_fairseq_bpe(
            pretrained, tokenizer, output, "RobertaTokenizer",
            int(pretrained.model.max_position_embeddings), no_types) + (
                hf_tokenizer_files.write_tokenizer_json(output))
    return hf_tokenizer_files.write_encoder_tokenizer(pretrained, tokenizer, output, no_types)


# (output layer, word table): tied unless config.json says tie_word_embeddings=false
TIED = (("decoder.weight",
         "model.embeddings.tok_embeddings.weight"),)

ADAPTER = hf_lib.Adapter(
    name="modernbert", tied=TIED, model_type="modernbert", read=_read,
    write=_write, write_tokenizer=write_tokenizer,
    writes=lambda pretrained: not modernbert.causal(pretrained.model))
