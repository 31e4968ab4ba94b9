"""ALBERT parameters <-> HuggingFace `AlbertFor*` state dicts and config.json.

HF's ALBERT keeps a layer's parameters in groups: one group (num_hidden_groups 1) is
our share_layers = True (`layer_shared`), one group a layer is share_layers = False.
Its E -> hidden projection is `albert.encoder.embedding_hidden_mapping_in` (always
there; an unfactorised model writes the identity), the pooler a bare
`albert.pooler` Linear, the MLM head `predictions.*` (hidden -> E, LayerNorm, the tied
E-wide table) and the sentence-order head `sop_classifier.classifier`.
"""

import functools
import os

import numpy as np

from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
from pretrainx.interop import hf_tokenizer_files
import pretrainx.families.bert.hf as hf_bert
import pretrainx.interop.hf_tensors as t
from pretrainx.families.albert import model as albert
from pretrainx.models import transformer_encoder as enc

ARCHITECTURES = {"pretrain": "AlbertForPreTraining", "mlm": "AlbertForMaskedLM",
                 "classify": "AlbertForSequenceClassification",
                 "tokens": "AlbertForTokenClassification", "span": "AlbertForQuestionAnswering"}
LAYER = {"query": "attention.query", "key": "attention.key", "value": "attention.value",
         "out": "attention.dense", "attention_norm": "attention.LayerNorm", "wi": "ffn",
         "wo": "ffn_output", "mlp_norm": "full_layer_layer_norm"}
_PROJECTION = "albert.encoder.embedding_hidden_mapping_in"


def name_pairs(model_cfg, head: str) -> list:
    pairs = t.embedding_pairs(("bert",), "albert.embeddings.")
    if enc.factorised(model_cfg):
        pairs += t.dense_pairs(("bert", "embedding_projection"), _PROJECTION)
    shared = model_cfg.share_layers
    for i in range(1 if shared else model_cfg.num_layers):
        ours = ("bert", "layer_shared" if shared else f"layer_{i}")
        pairs += t.layer_pairs(ours, f"albert.encoder.albert_layer_groups.{i}.albert_layers.0.",
                               LAYER)
    if head in ("pretrain", "classify", "encoder"):
        pairs += t.dense_pairs(("pooler",), "albert.pooler")
    if head in ("pretrain", "mlm"):
        pairs += hf_bert.mlm_pairs("predictions.dense", "predictions.LayerNorm",
                                   "predictions.bias")
    if head == "pretrain":
        pairs += t.dense_pairs(("nsp",), "sop_classifier.classifier")
    elif head in ("classify", "tokens", "span"):
        pairs += hf_bert.task_pairs(head)
    return pairs


def _read(hf: dict, state: dict, path: str) -> dict:
    config_file = os.path.join(path, "config.json")
    model = hf_bert.model_config_from_hf(hf, albert.default_config(), config_file)
    model.embedding_size = hf.get("embedding_size", 128)
    model.layer_norm_eps = hf.get("layer_norm_eps", 1e-12)
    model.dropout_rate = hf.get("hidden_dropout_prob", 0.0)
    model.attention_dropout_rate = hf.get("attention_probs_dropout_prob", 0.0)
    groups, layers = hf.get("num_hidden_groups", 1), model.num_layers
    if hf.get("inner_group_num", 1) != 1 or groups not in (1, layers):
        raise UserError(f"{config_file}: num_hidden_groups={groups} with inner_group_num="
                        f"{hf.get('inner_group_num', 1)}; pretrainx holds one layer shared by "
                        "all (1 group) or one layer a group")
    model.share_layers = groups == 1
    head = t.head_of(hf, ARCHITECTURES)
    params = t.from_hf(state, name_pairs(model, head), model.num_heads, path,
                       f"a {ARCHITECTURES.get(head, 'AlbertModel')} with {layers} layers in "
                       f"{groups} group(s)", optional=lambda name: name.startswith("albert.pooler"))
    if not enc.factorised(model):
        mapping = state.get(_PROJECTION + ".weight")
        if mapping is not None and not (np.array_equal(mapping, np.eye(len(mapping)))
                                        and not np.any(state[_PROJECTION + ".bias"])):
            raise UserError(f"{path}: embedding_size equals hidden_size but "
                            f"{_PROJECTION} is not the identity, which pretrainx cannot hold")
    tokenizer, lower_case = hf_lib.tokenizer_of(path)
    return dict(model=model, params=params, tokenizer=tokenizer, lower_case=lower_case,
                head=head, labels=t.labels_of(hf, head))


def _write(pretrained, params, tokenizer):
    m, head = pretrained.model, pretrained.head
    state = t.to_hf(params, name_pairs(m, head))
    if not enc.factorised(m):  # HF always projects E -> hidden
        state[_PROJECTION + ".weight"] = np.eye(m.hidden_size, dtype=np.float32)
        state[_PROJECTION + ".bias"] = np.zeros(m.hidden_size, np.float32)
    if head in ("pretrain", "mlm"):
        state["predictions.decoder.weight"] = state["albert.embeddings.word_embeddings.weight"]
        state["predictions.decoder.bias"] = state["predictions.bias"]
    config = hf_bert.to_hf_config(m, head, tokenizer.pad_id,
                                  pretrained.labels if head in ("classify", "tokens") else None)
    config.update(model_type="albert", architectures=[ARCHITECTURES.get(head, "AlbertModel")],
                  embedding_size=enc.embedding_size(m), inner_group_num=1,
                  num_hidden_groups=1 if m.get("share_layers") else m.num_layers,
                  classifier_dropout_prob=m.dropout_rate,
                  bos_token_id=int(tokenizer.cls_id), eos_token_id=int(tokenizer.sep_id))
    return state, config


# (output layer, word table): tied unless config.json says tie_word_embeddings=false
TIED = (("predictions.decoder.weight",
         "albert.embeddings.word_embeddings.weight"),)

ADAPTER = hf_lib.Adapter(name="albert", tied=TIED, model_type="albert", read=_read,
                         write=_write, check=hf_bert.check_architecture,
                         write_tokenizer=functools.partial(
                             hf_tokenizer_files.write_encoder_tokenizer, spm_class="AlbertTokenizer",
                             spm_file="spiece.model"))
