"""Tensor name tables between our encoder parameters and HF's BERT-like state dicts,
shared by the BERT, RoBERTa, ALBERT and ELECTRA adapters.

A table is a list of (our path, HF name, kind); the kind says how the array converts.
Our kernels are [in, out] with attention split into heads; torch Linear weights are
[out, in]:

  qkv     query/key/value kernel [embed, heads, kv] <-> [heads * kv, embed]
  flat    query/key/value bias [heads, kv] <-> [heads * kv]
  out     attention output kernel [heads, kv, embed] <-> [embed, heads * kv]
  linear  any other kernel [in, out] <-> [out, in]
  same    as it is
"""

import numpy as np

from pretrainx.errors import UserError

# HF's names for one post-LN layer, BERT's spelling (RoBERTa and ELECTRA share it).
BERT_LAYER = {"query": "attention.self.query", "key": "attention.self.key",
              "value": "attention.self.value", "out": "attention.output.dense",
              "attention_norm": "attention.output.LayerNorm", "wi": "intermediate.dense",
              "wo": "output.dense", "mlp_norm": "output.LayerNorm"}


def layer_pairs(ours: tuple, hf: str, names: dict = None) -> list:
    """One encoder layer: the shared EncoderLayer (models/transformer_encoder.py) at
    path `ours`, HF's at prefix `hf`."""
    n = names or BERT_LAYER
    pairs = []
    for proj in ("query", "key", "value"):
        pairs += [(ours + ("attention", proj, "kernel"), f"{hf}{n[proj]}.weight", "qkv"),
                  (ours + ("attention", proj, "bias"), f"{hf}{n[proj]}.bias", "flat")]
    pairs += [(ours + ("attention", "out", "kernel"), f"{hf}{n['out']}.weight", "out"),
              (ours + ("attention", "out", "bias"), f"{hf}{n['out']}.bias", "same")]
    for dense in ("wi", "wo"):
        pairs += dense_pairs(ours + ("mlp", dense), hf + n[dense])
    for norm in ("attention_norm", "mlp_norm"):
        pairs += norm_pairs(ours + (norm,), hf + n[norm])
    return pairs


def embedding_pairs(ours: tuple, hf: str) -> list:
    """Word, position and type tables and their LayerNorm (HF's `X.embeddings.`)."""
    return [(ours + ("token_embed", "embedding"), hf + "word_embeddings.weight", "same"),
            (ours + ("position_embed", "embedding"), hf + "position_embeddings.weight", "same"),
            (ours + ("type_embed", "embedding"), hf + "token_type_embeddings.weight", "same")
            ] + norm_pairs(ours + ("embed_norm",), hf + "LayerNorm")


def dense_pairs(ours: tuple, hf: str) -> list:
    return [(ours + ("kernel",), f"{hf}.weight", "linear"), (ours + ("bias",), f"{hf}.bias", "same")]


def norm_pairs(ours: tuple, hf: str) -> list:
    return [(ours + ("scale",), f"{hf}.weight", "same"), (ours + ("bias",), f"{hf}.bias", "same")]


def get(tree, path):
    for key in path:
        tree = tree[key]
    return tree


def put(tree, path, value):
    for key in path[:-1]:
        tree = tree.setdefault(key, {})
    tree[path[-1]] = value


def to_hf(params: dict, pairs: list) -> dict:
    """Our (unrolled, float32) params -> {HF name: array} for every pair of the table."""
    out = {}
    for path, name, kind in pairs:
        x = np.asarray(get(params, path), np.float32)
        if kind in ("qkv", "out", "linear"):
            x = x.reshape(-1, x.shape[-1]) if kind == "out" else x.reshape(x.shape[0], -1)
            x = x.T
        elif kind == "flat":
            x = x.reshape(-1)
        out[name] = x
    return out


def from_hf(state: dict, pairs: list, heads: int, source: str, what: str,
            optional=lambda name: False) -> dict:
    """{HF name: array} -> our params (unrolled) for every pair of the table. A tensor
    missing (unless `optional(name)`) names the tensor, the source and `what` was
    expected; a reshape that does not fit raises ValueError (hf.load names the file)."""
    params = {}
    for path, name, kind in pairs:
        if name not in state:
            if optional(name):
                continue
            raise UserError(f"{source}: no tensor {name} (expected for {what})")
        x = np.asarray(state[name], np.float32)
        if kind in ("qkv", "out", "linear"):
            x = x.T
            if kind == "qkv":
                x = x.reshape(x.shape[0], heads, -1)
            elif kind == "out":
                x = x.reshape(heads, -1, x.shape[-1])
        elif kind == "flat":
            x = x.reshape(heads, -1)
        put(params, path, x)
    return params


def labels_of(hf: dict, head: str):
    """A fine-tuned head's labels from config.json: () for regression, None for heads
    that have none."""
    if head not in ("classify", "tokens"):
        return None
    if hf.get("problem_type") == "regression":
        return ()
    id2label = hf.get("id2label") or {"0": "LABEL_0", "1": "LABEL_1"}
    return tuple(id2label[str(i)] for i in range(len(id2label)))


def label_config(labels) -> dict:
    """config.json's num_labels / id2label / label2id for a head's labels."""
    if labels is None:
        return {}
    if len(labels) == 0:  # regression
        return {"num_labels": 1, "problem_type": "regression"}
    return {"id2label": {str(i): str(label) for i, label in enumerate(labels)},
            "label2id": {str(label): i for i, label in enumerate(labels)}}


def head_of(hf: dict, architectures: dict, default: str = "encoder") -> str:
    """Our head name for config.json's first architecture (`architectures`: head ->
    HF class name); other classes read as `default`."""
    arch = (hf.get("architectures") or [""])[0]
    for head, name in architectures.items():
        if name == arch:
            return head
    return default
