"""BERT parameters <-> HuggingFace `transformers` BERT state dicts and config.json.

Our kernels are [in, out] (attention's split into heads); torch Linear weights
are [out, in]. LayerNorm scale/bias are HF's weight/bias (gamma/beta in older,
TF-converted files). The heads map to BertForPreTraining's `cls.*`, and to the
`classifier` / `qa_outputs` of BertForSequenceClassification,
BertForTokenClassification and BertForQuestionAnswering.
"""

import os
import shutil

import numpy as np

from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
from pretrainx.models import bert

_ACT_TO_HF = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "tanh": "tanh"}
_ACT_FROM_HF = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu_fast": "gelu_tanh",
                "gelu": "gelu", "relu": "relu", "tanh": "tanh"}
ARCHITECTURES = {"pretrain": "BertForPreTraining", "classify": "BertForSequenceClassification",
                 "tokens": "BertForTokenClassification", "span": "BertForQuestionAnswering"}


def _layer_pairs(i):
    """(our path, HF name, kind) of one encoder layer."""
    hf = f"bert.encoder.layer.{i}."
    ours = ("bert", f"layer_{i}")
    pairs = []
    for name in ("query", "key", "value"):
        pairs += [(ours + ("attention", name, "kernel"), f"{hf}attention.self.{name}.weight", "qkv"),
                  (ours + ("attention", name, "bias"), f"{hf}attention.self.{name}.bias", "flat")]
    pairs += [(ours + ("attention", "out", "kernel"), f"{hf}attention.output.dense.weight", "out"),
              (ours + ("attention", "out", "bias"), f"{hf}attention.output.dense.bias", "same")]
    for norm, where in (("attention_norm", "attention.output.LayerNorm"),
                        ("mlp_norm", "output.LayerNorm")):
        pairs += [(ours + (norm, "scale"), f"{hf}{where}.weight", "same"),
                  (ours + (norm, "bias"), f"{hf}{where}.bias", "same")]
    for dense, where in (("wi", "intermediate.dense"), ("wo", "output.dense")):
        pairs += [(ours + ("mlp", dense, "kernel"), f"{hf}{where}.weight", "linear"),
                  (ours + ("mlp", dense, "bias"), f"{hf}{where}.bias", "same")]
    return pairs


def name_pairs(num_layers: int, head: str) -> list:
    """Every (our path, HF name, kind) of a model; kind says how the array converts."""
    e = "bert.embeddings."
    pairs = [(("bert", "token_embed", "embedding"), e + "word_embeddings.weight", "same"),
             (("bert", "position_embed", "embedding"), e + "position_embeddings.weight", "same"),
             (("bert", "type_embed", "embedding"), e + "token_type_embeddings.weight", "same"),
             (("bert", "embed_norm", "scale"), e + "LayerNorm.weight", "same"),
             (("bert", "embed_norm", "bias"), e + "LayerNorm.bias", "same")]
    for i in range(num_layers):
        pairs += _layer_pairs(i)
    if head in ("pretrain", "classify", "encoder"):
        pairs += [(("pooler", "kernel"), "bert.pooler.dense.weight", "linear"),
                  (("pooler", "bias"), "bert.pooler.dense.bias", "same")]
    if head == "pretrain":
        pairs += [(("mlm_transform", "kernel"), "cls.predictions.transform.dense.weight", "linear"),
                  (("mlm_transform", "bias"), "cls.predictions.transform.dense.bias", "same"),
                  (("mlm_norm", "scale"), "cls.predictions.transform.LayerNorm.weight", "same"),
                  (("mlm_norm", "bias"), "cls.predictions.transform.LayerNorm.bias", "same"),
                  (("mlm_bias",), "cls.predictions.bias", "same"),
                  (("nsp", "kernel"), "cls.seq_relationship.weight", "linear"),
                  (("nsp", "bias"), "cls.seq_relationship.bias", "same")]
    elif head != "encoder":
        name = "qa_outputs" if head == "span" else "classifier"
        pairs += [(("classifier", "kernel"), f"{name}.weight", "linear"),
                  (("classifier", "bias"), f"{name}.bias", "same")]
    return pairs


def _get(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def _set(tree, path, value):
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def to_hf_state(params: dict, model_cfg, head: str) -> dict:
    """Our (unrolled, float32 numpy) params -> {HF name: array}."""
    out = {}
    for path, name, kind in name_pairs(model_cfg.num_layers, head):
        x = np.asarray(_get(params, path), np.float32)
        if kind in ("qkv", "out", "linear"):
            x = x.reshape(-1, x.shape[-1]) if kind == "out" else x.reshape(x.shape[0], -1)
            x = x.T
        elif kind == "flat":
            x = x.reshape(-1)
        out[name] = np.ascontiguousarray(x)
    if head == "pretrain":  # tied to the word embeddings and to cls.predictions.bias
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
    differs from the config's names the tensor and the file."""
    state = _canonical(state)
    heads = model_cfg.num_heads
    params = {}
    for path, name, kind in name_pairs(model_cfg.num_layers, head):
        if name not in state and head == "encoder" and path[0] == "pooler":
            continue  # BertForMaskedLM and friends have no pooler
        if name not in state:
            raise UserError(f"{source}: no tensor {name} (expected for a "
                            f"{ARCHITECTURES.get(head, 'BertModel')} with "
                            f"{model_cfg.num_layers} layers)")
        x = np.asarray(state[name], np.float32)
        if kind in ("qkv", "out", "linear"):
            x = x.T
            if kind == "qkv":
                x = x.reshape(x.shape[0], heads, -1)
            elif kind == "out":
                x = x.reshape(heads, -1, x.shape[-1])
        elif kind == "flat":
            x = x.reshape(heads, -1)
        _set(params, path, x)
    return params


def to_hf_config(model_cfg, head: str, pad_id: int, labels=None) -> dict:
    c = model_cfg
    out = {
        "architectures": [ARCHITECTURES[head]], "model_type": "bert",
        "vocab_size": c.vocab_size, "hidden_size": c.hidden_size,
        "num_hidden_layers": c.num_layers, "num_attention_heads": c.num_heads,
        "intermediate_size": c.mlp_dim, "hidden_act": _ACT_TO_HF[c.hidden_act],
        "hidden_dropout_prob": c.dropout_rate,
        "attention_probs_dropout_prob": c.attention_dropout_rate,
        "max_position_embeddings": c.max_position_embeddings,
        "type_vocab_size": c.type_vocab_size, "initializer_range": c.initializer_range,
        "layer_norm_eps": c.layer_norm_eps, "pad_token_id": int(pad_id),
        "position_embedding_type": "absolute", "torch_dtype": "float32",
    }
    if labels is not None:
        if len(labels) == 0:  # regression
            out.update(num_labels=1, problem_type="regression")
        else:
            out["id2label"] = {str(i): str(label) for i, label in enumerate(labels)}
            out["label2id"] = {str(label): i for i, label in enumerate(labels)}
    return out


def model_config_from_hf(hf: dict, base, source: str):
    """Our model keys from an HF BERT config.json (`base` supplies the rest)."""
    act = hf.get("hidden_act", "gelu")
    if act not in _ACT_FROM_HF:
        raise UserError(f"{source}: hidden_act {act!r} is not supported "
                        f"(expected one of {', '.join(_ACT_FROM_HF)})")
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
    m.hidden_act = _ACT_FROM_HF[act]
    m.dropout_rate = hf.get("hidden_dropout_prob", 0.1)
    m.attention_dropout_rate = hf.get("attention_probs_dropout_prob", 0.1)
    m.layer_norm_eps = hf.get("layer_norm_eps", 1e-12)
    m.initializer_range = hf.get("initializer_range", 0.02)
    return m


def head_of_architecture(hf: dict) -> str:
    arch = (hf.get("architectures") or ["BertModel"])[0]
    for head, name in ARCHITECTURES.items():
        if name == arch:
            return head
    return "encoder"  # BertModel, BertForMaskedLM, ...: the encoder (and pooler) only


def _labels(hf: dict, head: str):
    """A fine-tuned BERT head's labels from config.json: () for regression."""
    if head not in ("classify", "tokens"):
        return None
    if hf.get("problem_type") == "regression":
        return ()
    id2label = hf.get("id2label") or {"0": "LABEL_0", "1": "LABEL_1"}
    return tuple(id2label[str(i)] for i in range(len(id2label)))


def _read(hf: dict, state: dict, path: str) -> dict:
    model = model_config_from_hf(hf, bert.default_config(), os.path.join(path, "config.json"))
    head = head_of_architecture(hf)
    params = from_hf_state(state, model, head, path)
    tokenizer, lower_case = hf_lib.tokenizer_of(path)
    return dict(model=model, params=params, tokenizer=tokenizer, lower_case=lower_case,
                head=head, labels=_labels(hf, head))


def _check(pretrained) -> None:
    m = pretrained.model
    if m.get("embedding_size", 0) not in (0, m.hidden_size) or m.get("share_layers"):
        # ELECTRA-Small's projected embeddings (and shared layers) have no place in BertModel
        raise UserError(f"{pretrained.source} has factorised embeddings or shared layers "
                        "(model.embedding_size / model.share_layers), which an HF BERT "
                        "cannot hold; HF export writes plain BERT, GPT-2 and T5")


def _write(pretrained, params, tokenizer):
    labels = pretrained.labels if pretrained.head in ("classify", "tokens") else None
    return (to_hf_state(params, pretrained.model, pretrained.head),
            to_hf_config(pretrained.model, pretrained.head, tokenizer.pad_id, labels))


def _write_tokenizer(pretrained, tokenizer, output) -> list:
    max_len = int(pretrained.model.get("max_position_embeddings", 512))
    if pretrained.tokenizer.endswith(".txt"):
        shutil.copyfile(pretrained.tokenizer, os.path.join(output, "vocab.txt"))
        config = {"tokenizer_class": "BertTokenizer", "do_lower_case": pretrained.lower_case,
                  "model_max_length": max_len}
        name = "vocab.txt"
    else:
        # Our SentencePiece BERT vocabularies carry [CLS]/[SEP]/[MASK] as pieces:
        # ALBERT's tokenizer is HF's SentencePiece tokenizer with BERT's layout.
        shutil.copyfile(pretrained.tokenizer, os.path.join(output, "spiece.model"))
        config = {"tokenizer_class": "AlbertTokenizer", "do_lower_case": False,
                  "keep_accents": True, "remove_space": True, "model_max_length": max_len}
        name = "spiece.model"
    return [name] + hf_lib.write_tokenizer_config(output, config, hf_lib.special_tokens(tokenizer))


hf_lib.ADAPTERS.register(hf_lib.Adapter(name="bert", model_type="bert", read=_read,
                                        write=_write, write_tokenizer=_write_tokenizer,
                                        check=_check))
