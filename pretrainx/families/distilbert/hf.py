"""DistilBERT parameters <-> HuggingFace `DistilBertFor*` state dicts and config.json.

BERT's tensors under other names: `distilbert.embeddings` (no token-type table),
`distilbert.transformer.layer.i.attention.{q,k,v,out}_lin`, `sa_layer_norm`,
`ffn.lin1`/`lin2`, `output_layer_norm`; the MLM head is `vocab_transform`,
`vocab_layer_norm` and `vocab_projector` (tied to the word table); a sequence
classifier is `pre_classifier` (our pooler's place, ReLU) and `classifier`. HF's
DistilBERT fixes LayerNorm eps at 1e-12.
"""

import os

from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
from pretrainx.interop import hf_tokenizer_files
import pretrainx.families.bert.hf as hf_bert
import pretrainx.interop.hf_tensors as t
from pretrainx.families.distilbert import model as distilbert

ARCHITECTURES = {"mlm": "DistilBertForMaskedLM",
                 "classify": "DistilBertForSequenceClassification",
                 "tokens": "DistilBertForTokenClassification",
                 "span": "DistilBertForQuestionAnswering"}
LAYER = {"query": "attention.q_lin", "key": "attention.k_lin", "value": "attention.v_lin",
         "out": "attention.out_lin", "attention_norm": "sa_layer_norm", "wi": "ffn.lin1",
         "wo": "ffn.lin2", "mlp_norm": "output_layer_norm"}


def name_pairs(num_layers: int, head: str) -> list:
    e = "distilbert.embeddings."
    pairs = [(("bert", "token_embed", "embedding"), e + "word_embeddings.weight", "same"),
             (("bert", "position_embed", "embedding"), e + "position_embeddings.weight", "same")
             ] + t.norm_pairs(("bert", "embed_norm"), e + "LayerNorm")
    for i in range(num_layers):
        pairs += t.layer_pairs(("bert", f"layer_{i}"), f"distilbert.transformer.layer.{i}.", LAYER)
    if head == "mlm":
        pairs += hf_bert.mlm_pairs("vocab_transform", "vocab_layer_norm", "vocab_projector.bias")
    elif head == "classify":
        pairs += (t.dense_pairs(("pooler",), "pre_classifier")
                  + t.dense_pairs(("classifier",), "classifier"))
    elif head in ("tokens", "span"):
        pairs += hf_bert.task_pairs(head)
    return pairs


def _read(hf: dict, state: dict, path: str) -> dict:
    config_file = os.path.join(path, "config.json")
    if hf.get("sinusoidal_pos_embds"):
        raise UserError(f"{config_file}: sinusoidal_pos_embds is not supported (learned only)")
    act = hf.get("activation", "gelu")
    m = distilbert.default_config()
    m = hf_bert.model_config_from_hf(
        {"num_hidden_layers": hf["n_layers"], "hidden_size": hf["dim"],
         "num_attention_heads": hf["n_heads"], "intermediate_size": hf["hidden_dim"],
         "vocab_size": hf["vocab_size"], "type_vocab_size": 0, "hidden_act": act,
         "max_position_embeddings": hf.get("max_position_embeddings", 512),
         "hidden_dropout_prob": hf.get("dropout", 0.1),
         "attention_probs_dropout_prob": hf.get("attention_dropout", 0.1),
         "initializer_range": hf.get("initializer_range", 0.02), "layer_norm_eps": 1e-12},
        m, config_file)
    head = t.head_of(hf, ARCHITECTURES)
    params = t.from_hf(state, name_pairs(m.num_layers, head), m.num_heads, path,
                       f"a {ARCHITECTURES.get(head, 'DistilBertModel')} with {m.num_layers} layers")
    tokenizer, lower_case = hf_lib.tokenizer_of(path)
    return dict(model=m, params=params, tokenizer=tokenizer, lower_case=lower_case, head=head,
                labels=t.labels_of(hf, head))


def _check(pretrained) -> None:
    m = pretrained.model
    hf_bert.check_architecture(pretrained)
    if m.layer_norm_eps != 1e-12 or m.get("position_offset", 0) or m.type_vocab_size:
        raise UserError(f"{pretrained.source}: HF's DistilBERT has LayerNorm eps 1e-12, "
                        "positions from 0 and no token types; this model has "
                        f"layer_norm_eps={m.layer_norm_eps}, position_offset="
                        f"{m.get('position_offset', 0)}, type_vocab_size={m.type_vocab_size}")
    if pretrained.head == "classify" and m.get("pooler_activation", "tanh") != "relu":
        raise UserError(f"{pretrained.source}: HF's DistilBERT classifier applies ReLU after "
                        "pre_classifier; this model's pooler applies "
                        f"{m.get('pooler_activation', 'tanh')}")


def _write(pretrained, params, tokenizer):
    m, head = pretrained.model, pretrained.head
    state = t.to_hf(params, name_pairs(m.num_layers, head))
    if head == "mlm":
        state["vocab_projector.weight"] = state["distilbert.embeddings.word_embeddings.weight"]
    config = {"architectures": [ARCHITECTURES.get(head, "DistilBertModel")],
              "model_type": "distilbert", "vocab_size": m.vocab_size,
              "max_position_embeddings": m.max_position_embeddings,
              "sinusoidal_pos_embds": False, "n_layers": m.num_layers, "n_heads": m.num_heads,
              "dim": m.hidden_size, "hidden_dim": m.mlp_dim, "dropout": m.dropout_rate,
              "attention_dropout": m.attention_dropout_rate,
              "activation": hf_lib.ACT_TO_HF[m.hidden_act],
              "initializer_range": m.initializer_range, "qa_dropout": m.dropout_rate,
              "seq_classif_dropout": m.dropout_rate, "pad_token_id": int(tokenizer.pad_id),
              "tie_weights_": True, "torch_dtype": "float32"}
    config.update(t.label_config(pretrained.labels if head in ("classify", "tokens") else None))
    return state, config


def _write_tokenizer(pretrained, tokenizer, output) -> list:
    # DistilBERT takes no token_type_ids: its tokenizer must not hand them over.
    return hf_tokenizer_files.write_encoder_tokenizer(pretrained, tokenizer, output,
                                   {"model_input_names": ["input_ids", "attention_mask"]})


# (output layer, word table): tied unless config.json says tie_word_embeddings=false
TIED = (("vocab_projector.weight",
         "distilbert.embeddings.word_embeddings.weight"),)

ADAPTER = hf_lib.Adapter(
    name="distilbert", tied=TIED, model_type="distilbert", read=_read,
    write=_write, write_tokenizer=_write_tokenizer,
    check=_check)
