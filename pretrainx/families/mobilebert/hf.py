"""MobileBERT parameters <-> HuggingFace `transformers` MobileBERT state dicts and
config.json (MobileBertForPreTraining, MobileBertForMaskedLM and the task heads).

The MLM decoder is the word table [vocab, E] (tied) extended by `cls.predictions.dense`,
stored as HF stores it ([hidden - E, vocab]). NoNorm's weight/bias are our scale/bias.
"""

import os

from pretrainx.errors import UserError
import pretrainx.families.bert.hf as hf_bert
import pretrainx.interop.hf as hf_lib
from pretrainx.interop import hf_tokenizer_files
import pretrainx.interop.hf_tensors as t
from pretrainx.families.mobilebert import model as mobilebert

ARCHITECTURES = {"pretrain": "MobileBertForPreTraining", "mlm": "MobileBertForMaskedLM",
                 "classify": "MobileBertForSequenceClassification",
                 "tokens": "MobileBertForTokenClassification",
                 "span": "MobileBertForQuestionAnswering"}
_PREFIX = "mobilebert."


def _layer_pairs(cfg, i: int) -> list:
    ours, hf = ("bert", f"layer_{i}"), f"{_PREFIX}encoder.layer.{i}."
    pairs = []
    for proj in ("query", "key", "value"):
        pairs += [(ours + (proj, "kernel"), f"{hf}attention.self.{proj}.weight", "qkv"),
                  (ours + (proj, "bias"), f"{hf}attention.self.{proj}.bias", "flat")]
    pairs += [(ours + ("out", "kernel"), f"{hf}attention.output.dense.weight", "out"),
              (ours + ("out", "bias"), f"{hf}attention.output.dense.bias", "same")]
    dense = {"bottleneck_input": "bottleneck.input.dense", "mlp_wi": "intermediate.dense",
             "mlp_wo": "output.dense", "bottleneck_output": "output.bottleneck.dense"}
    norms = {"bottleneck_input_norm": "bottleneck.input.LayerNorm",
             "attention_norm": "attention.output.LayerNorm", "mlp_norm": "output.LayerNorm",
             "bottleneck_output_norm": "output.bottleneck.LayerNorm"}
    if cfg.key_query_shared_bottleneck and not cfg.bottleneck_attention:
        dense["bottleneck_attention"] = "bottleneck.attention.dense"
        norms["bottleneck_attention_norm"] = "bottleneck.attention.LayerNorm"
    for j in range(cfg.num_ffn - 1):
        dense[f"ffn_{j}_wi"] = f"ffn.{j}.intermediate.dense"
        dense[f"ffn_{j}_wo"] = f"ffn.{j}.output.dense"
        norms[f"ffn_{j}_norm"] = f"ffn.{j}.output.LayerNorm"
    for name, hf_name in dense.items():
        pairs += t.dense_pairs(ours + (name,), hf + hf_name)
    for name, hf_name in norms.items():
        pairs += t.norm_pairs(ours + (name,), hf + hf_name)
    return pairs


def name_pairs(cfg, head: str) -> list:
    """Every (our path, HF name, kind) of a MobileBERT with `head`."""
    pairs = t.embedding_pairs(("bert",), _PREFIX + "embeddings.")
    pairs += t.dense_pairs(("bert", "embedding_transformation"),
                           _PREFIX + "embeddings.embedding_transformation")
    for i in range(cfg.num_layers):
        pairs += _layer_pairs(cfg, i)
    if cfg.classifier_activation and head in ("pretrain", "classify"):
        pairs += t.dense_pairs(("pooler",), _PREFIX + "pooler.dense")
    if head in ("pretrain", "mlm"):
        pairs += hf_bert.mlm_pairs("cls.predictions.transform.dense",
                                   "cls.predictions.transform.LayerNorm",
                                   "cls.predictions.bias")
        pairs += [(("mlm_extra",), "cls.predictions.dense.weight", "same")]
    if head == "pretrain":
        pairs += t.dense_pairs(("nsp",), "cls.seq_relationship")
    elif head in ("classify", "tokens", "span"):
        pairs += hf_bert.task_pairs(head)
    return pairs


def to_hf_state(params: dict, cfg, head: str) -> dict:
    out = t.to_hf(params, name_pairs(cfg, head))
    if head in ("pretrain", "mlm"):  # the tied decoder and its bias
        out["cls.predictions.decoder.weight"] = out[_PREFIX + "embeddings.word_embeddings.weight"]
        out["cls.predictions.decoder.bias"] = out["cls.predictions.bias"]
    return out


def to_hf_config(cfg, head: str, labels=None) -> dict:
    out = {
        "architectures": [ARCHITECTURES.get(head, "MobileBertModel")],
        "model_type": "mobilebert", "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size, "true_hidden_size": cfg.intra_size,
        "intra_bottleneck_size": cfg.intra_size, "embedding_size": cfg.embedding_size,
        "num_hidden_layers": cfg.num_layers, "num_attention_heads": cfg.num_heads,
        "intermediate_size": cfg.mlp_dim, "num_feedforward_networks": cfg.num_ffn,
        "hidden_act": hf_lib.ACT_TO_HF[cfg.hidden_act],
        "hidden_dropout_prob": cfg.dropout_rate,
        "attention_probs_dropout_prob": cfg.attention_dropout_rate,
        "max_position_embeddings": cfg.max_position_embeddings,
        "type_vocab_size": cfg.type_vocab_size, "initializer_range": cfg.initializer_range,
        "layer_norm_eps": cfg.layer_norm_eps, "pad_token_id": int(cfg.pad_token_id),
        "trigram_input": cfg.trigram, "use_bottleneck": True,
        "use_bottleneck_attention": cfg.bottleneck_attention,
        "key_query_shared_bottleneck": cfg.key_query_shared_bottleneck,
        "normalization_type": cfg.normalization, "classifier_activation": cfg.classifier_activation,
        "torch_dtype": "float32",
    }
    return dict(out, **t.label_config(labels))


def model_config_from_hf(hf: dict, source: str):
    """Our model keys from an HF MobileBERT config.json (HF's defaults where it is silent)."""
    if not hf.get("use_bottleneck", True):
        raise UserError(f"{source}: use_bottleneck=false is a plain BERT; read it as one")
    m = mobilebert.default_config()
    m.num_layers = hf.get("num_hidden_layers", 24)
    m.hidden_size = hf.get("hidden_size", 512)
    m.intra_size = hf.get("intra_bottleneck_size", 128)
    m.embedding_size = hf.get("embedding_size", 128)
    m.num_heads = hf.get("num_attention_heads", 4)
    m.mlp_dim = hf.get("intermediate_size", 512)
    m.num_ffn = hf.get("num_feedforward_networks", 4)
    m.vocab_size = hf.get("vocab_size", 30522)
    m.pad_token_id = hf.get("pad_token_id", 0)
    m.max_position_embeddings = hf.get("max_position_embeddings", 512)
    m.type_vocab_size = hf.get("type_vocab_size", 2)
    m.dropout_rate = hf.get("hidden_dropout_prob", 0.0)
    m.attention_dropout_rate = hf.get("attention_probs_dropout_prob", 0.1)
    m.layer_norm_eps = hf.get("layer_norm_eps", 1e-12)
    m.initializer_range = hf.get("initializer_range", 0.02)
    m.trigram = hf.get("trigram_input", True)
    m.normalization = hf.get("normalization_type", "no_norm")
    m.key_query_shared_bottleneck = hf.get("key_query_shared_bottleneck", True)
    m.bottleneck_attention = hf.get("use_bottleneck_attention", False)
    m.classifier_activation = hf.get("classifier_activation", True)
    act = hf.get("hidden_act", "relu")
    acts = {v: k for k, v in hf_lib.ACT_TO_HF.items()}
    if act not in acts:
        raise UserError(f"{source}: hidden_act {act!r} is not supported "
                        f"(expected one of {', '.join(acts)})")
    m.hidden_act = acts[act]
    return m


def _read(hf: dict, state: dict, path: str) -> dict:
    model = model_config_from_hf(hf, os.path.join(path, "config.json"))
    head = t.head_of(hf, ARCHITECTURES)
    what = f"a {ARCHITECTURES.get(head, 'MobileBertModel')} with {model.num_layers} layers"
    params = t.from_hf(state, name_pairs(model, head), model.num_heads, path, what)
    tokenizer, lower_case = hf_lib.tokenizer_of(path)
    return dict(model=model, params=params, tokenizer=tokenizer, lower_case=lower_case,
                head=head, labels=t.labels_of(hf, head))


def _check(pretrained) -> None:
    m = pretrained.model
    if not (m.key_query_shared_bottleneck or m.bottleneck_attention) and \
            m.hidden_size != m.intra_size:
        raise UserError(f"{pretrained.source} reads attention's queries and keys from the "
                        f"{m.hidden_size}-wide layer input (IB-BERT's layout); HF's MobileBERT "
                        f"reads them at the intra width {m.intra_size} only")


def _write(pretrained, params, tokenizer):
    labels = pretrained.labels if pretrained.head in ("classify", "tokens") else None
    return (to_hf_state(params, pretrained.model, pretrained.head),
            to_hf_config(pretrained.model, pretrained.head, labels))


TIED = (("cls.predictions.decoder.weight", _PREFIX + "embeddings.word_embeddings.weight"),)

ADAPTER = hf_lib.Adapter(name="mobilebert", tied=TIED, model_type="mobilebert", read=_read,
                         write=_write, write_tokenizer=hf_tokenizer_files.write_encoder_tokenizer,
                         check=_check, can_untie=False)
