"""BERT parameters <-> HuggingFace `transformers` BERT state dicts and config.json.

LayerNorm scale/bias are HF's weight/bias (gamma/beta in older, TF-converted files).
The heads map to BertForPreTraining's `cls.*` (BertForMaskedLM's without NSP), and to
the `classifier` / `qa_outputs` of BertForSequenceClassification,
BertForTokenClassification and BertForQuestionAnswering. SpanBERT exports as a
BertForMaskedLM: its span-boundary head has no place in HF's classes and stays ours.
"""

import os

from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
import pretrainx.interop.hf_tensors as t
from pretrainx.interop import hf_tokenizer_files
from pretrainx.families.bert import model as bert
from pretrainx.models import transformer_encoder as enc

ARCHITECTURES = {"pretrain": "BertForPreTraining", "mlm": "BertForMaskedLM",
                 "classify": "BertForSequenceClassification",
                 "tokens": "BertForTokenClassification", "span": "BertForQuestionAnswering"}


def encoder_pairs(num_layers: int, prefix: str = "bert.") -> list:
    """The embeddings and the layer stack under our "bert" subtree."""
    pairs = t.embedding_pairs(("bert",), prefix + "embeddings.")
    for i in range(num_layers):
        pairs += t.layer_pairs(("bert", f"layer_{i}"), f"{prefix}encoder.layer.{i}.")
    return pairs


def mlm_pairs(transform: str, norm: str, bias: str) -> list:
    """The MLM head: transform dense, its LayerNorm and the output bias (the decoder's
    weight is the tied word table)."""
    return (t.dense_pairs(("mlm_transform",), transform) + t.norm_pairs(("mlm_norm",), norm)
            + [(("mlm_bias",), bias, "same")])


def task_pairs(head: str) -> list:
    """A fine-tuning head's classifier (classify, tokens) or start/end layer (span)."""
    return t.dense_pairs(("classifier",), "qa_outputs" if head == "span" else "classifier")


def name_pairs(num_layers: int, head: str) -> list:
    """Every (our path, HF name, kind) of a BERT with `head`."""
    pairs = encoder_pairs(num_layers)
    if head in ("pretrain", "classify", "encoder"):
        pairs += t.dense_pairs(("pooler",), "bert.pooler.dense")
    if head in ("pretrain", "mlm"):
        pairs += mlm_pairs("cls.predictions.transform.dense",
                           "cls.predictions.transform.LayerNorm", "cls.predictions.bias")
    if head == "pretrain":
        pairs += t.dense_pairs(("nsp",), "cls.seq_relationship")
    elif head in ("classify", "tokens", "span"):
        pairs += task_pairs(head)
    return pairs


def to_hf_state(params: dict, model_cfg, head: str) -> dict:
    """Our (unrolled, float32 numpy) params -> {HF name: array}."""
    out = t.to_hf(params, name_pairs(model_cfg.num_layers, head))
    if head in ("pretrain", "mlm"):  # tied to the word embeddings and to cls.predictions.bias
        out["cls.predictions.decoder.weight"] = out["bert.embeddings.word_embeddings.weight"]
        out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    return out


def _canonical(state: dict) -> dict:
    """HF names as BertFor* saves them: `bert.` prefix, LayerNorm weight/bias."""
    has_prefix = any(k.startswith("bert.") for k in state)
    out = {}
    for key, value in state.items():
        key = key.replace("LayerNorm.gamma", "LayerNorm.weight").replace(
            "LayerNorm.beta", "LayerNorm.bias")
        if not has_prefix and (key.startswith(("embeddings.", "encoder.", "pooler."))):
            key = "bert." + key
        out[key] = value
    return out


def from_hf_state(state: dict, model_cfg, head: str, source: str) -> dict:
    """{HF name: array} -> our params (unrolled). A missing tensor or a shape that
    differs from the config's names the tensor and the file. BertModel's pooler may be
    absent (BertForMaskedLM-style files)."""
    what = (f"a {ARCHITECTURES.get(head, 'BertModel')} with {model_cfg.num_layers} layers")
    return t.from_hf(_canonical(state), name_pairs(model_cfg.num_layers, head),
                     model_cfg.num_heads, source, what,
                     optional=lambda name: head == "encoder" and name.startswith("bert.pooler"))


def to_hf_config(model_cfg, head: str, pad_id: int, labels=None) -> dict:
    c = model_cfg
    out = {
        "architectures": [ARCHITECTURES.get(head, "BertModel")], "model_type": "bert",
        "vocab_size": c.vocab_size, "hidden_size": c.hidden_size,
        "num_hidden_layers": c.num_layers, "num_attention_heads": c.num_heads,
        "intermediate_size": c.mlp_dim, "hidden_act": hf_lib.ACT_TO_HF[c.hidden_act],
        "hidden_dropout_prob": c.dropout_rate,
        "attention_probs_dropout_prob": c.attention_dropout_rate,
        "max_position_embeddings": c.max_position_embeddings,
        "type_vocab_size": c.type_vocab_size, "initializer_range": c.initializer_range,
        "layer_norm_eps": c.layer_norm_eps, "pad_token_id": int(pad_id),
        "position_embedding_type": "absolute", "torch_dtype": "float32",
    }
    return dict(out, **t.label_config(labels))


def model_config_from_hf(hf: dict, base, source: str):
    """Our model keys from an HF BERT-like config.json (`base` supplies the rest)."""
    act = hf.get("hidden_act", "gelu")
    if act not in hf_lib.ACT_FROM_HF:
        raise UserError(f"{source}: hidden_act {act!r} is not supported "
                        f"(expected one of {', '.join(hf_lib.ACT_FROM_HF)})")
    if hf.get("position_embedding_type", "absolute") != "absolute":
        raise UserError(f"{source}: position_embedding_type "
                        f"{hf['position_embedding_type']!r} is not supported (absolute only)")
    m = base
    m.num_layers = hf["num_hidden_layers"]
    m.hidden_size = hf["hidden_size"]
    m.num_heads = hf["num_attention_heads"]
    m.mlp_dim = hf["intermediate_size"]
    m.vocab_size = hf["vocab_size"]
    m.max_position_embeddings = hf.get("max_position_embeddings", 512)
    m.type_vocab_size = hf.get("type_vocab_size", 2)
    m.hidden_act = hf_lib.ACT_FROM_HF[act]
    m.dropout_rate = hf.get("hidden_dropout_prob", 0.1)
    m.attention_dropout_rate = hf.get("attention_probs_dropout_prob", 0.1)
    m.layer_norm_eps = hf.get("layer_norm_eps", 1e-12)
    m.initializer_range = hf.get("initializer_range", 0.02)
    return m


def _read(hf: dict, state: dict, path: str) -> dict:
    model = model_config_from_hf(hf, bert.default_config(), os.path.join(path, "config.json"))
    head = t.head_of(hf, ARCHITECTURES)
    params = from_hf_state(state, model, head, path)
    tokenizer, lower_case = hf_lib.tokenizer_of(path)
    return dict(model=model, params=params, tokenizer=tokenizer, lower_case=lower_case,
                head=head, labels=t.labels_of(hf, head))


def _check(pretrained) -> None:
    m = pretrained.model
    if enc.factorised(m) or m.get("share_layers"):
        raise UserError(f"{pretrained.source} has factorised embeddings or shared layers "
                        "(model.embedding_size / model.share_layers), which an HF BERT "
                        "cannot hold; train it as family albert to export an ALBERT")
    check_architecture(pretrained)


def check_architecture(pretrained) -> None:
    """Refuses a model with BERT's architecture modified (model.norm, ...): an HF
    BERT-like class has post-LayerNorm, learned positions and an ungated feed-forward."""
    changed = enc.modified(pretrained.model)
    if changed:
        raise UserError(f"{pretrained.source} sets {', '.join(changed)}, which no HF "
                        "BERT-like class holds (post-LayerNorm, learned positions, an "
                        "ungated feed-forward)")


def _write(pretrained, params, tokenizer):
    labels = pretrained.labels if pretrained.head in ("classify", "tokens") else None
    return (to_hf_state(params, pretrained.model, pretrained.head),
            to_hf_config(pretrained.model, pretrained.head, tokenizer.pad_id, labels))


# (output layer, word table): tied unless config.json says tie_word_embeddings=false
TIED = (("cls.predictions.decoder.weight",
         "bert.embeddings.word_embeddings.weight"),)

ADAPTER = hf_lib.Adapter(name="bert", tied=TIED, model_type="bert", read=_read,
                         write=_write, write_tokenizer=hf_tokenizer_files.write_encoder_tokenizer,
                         check=_check)
