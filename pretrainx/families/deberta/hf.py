"""DeBERTa-v2/v3 parameters <-> HuggingFace `DebertaV2For*` state dicts and config.json.

The encoder is `deberta.embeddings` (word table and LayerNorm; no absolute positions),
`deberta.encoder.rel_embeddings` and its `LayerNorm`, and BERT-named layers whose
attention projections are `query_proj`/`key_proj`/`value_proj` (`pos_query_proj` /
`pos_key_proj` without share_att_key); the MLM head is the legacy `cls.predictions.*`
(HF's default); a sequence classifier is `pooler.dense` (GeLU) and `classifier`.
HF's DebertaV2ForMaskedLM has no enhanced mask decoder: a model trained with one
exports its encoder and head exactly, and its MLM logits in HF are the head on the
last layer without the decoder (export says so).
"""

import functools
import os

from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
from pretrainx.interop import hf_tokenizer_files
import pretrainx.families.bert.hf as hf_bert
import pretrainx.interop.hf_tensors as t
from pretrainx.families.deberta import model as deberta
from pretrainx.families.deberta import rtd_model as deberta_rtd

ARCHITECTURES = {"mlm": "DebertaV2ForMaskedLM", "classify": "DebertaV2ForSequenceClassification",
                 "tokens": "DebertaV2ForTokenClassification",
                 "span": "DebertaV2ForQuestionAnswering"}
LAYER = dict(t.BERT_LAYER, query="attention.self.query_proj", key="attention.self.key_proj",
             value="attention.self.value_proj")


def name_pairs(model_cfg, head: str) -> list:
    e, enc = "deberta.embeddings.", "deberta.encoder."
    pairs = [(("deberta", "token_embed", "embedding"), e + "word_embeddings.weight", "same"),
             (("deberta", "rel_embed", "embedding"), enc + "rel_embeddings.weight", "same")]
    pairs += t.norm_pairs(("deberta", "embed_norm"), e + "LayerNorm")
    pairs += t.norm_pairs(("deberta", "rel_norm"), enc + "LayerNorm")
    if model_cfg.type_vocab_size:
        pairs.append((("deberta", "type_embed", "embedding"), e + "token_type_embeddings.weight",
                      "same"))
    for i in range(model_cfg.num_layers):
        ours, hf = ("deberta", f"layer_{i}"), f"{enc}layer.{i}."
        pairs += t.layer_pairs(ours, hf, LAYER)
        if not model_cfg.share_att_key:
            for proj in ("pos_query", "pos_key"):
                pairs += [(ours + ("attention", proj, "kernel"),
                           f"{hf}attention.self.{proj}_proj.weight", "qkv"),
                          (ours + ("attention", proj, "bias"),
                           f"{hf}attention.self.{proj}_proj.bias", "flat")]
    if head == "mlm":
        pairs += hf_bert.mlm_pairs("cls.predictions.transform.dense",
                                   "cls.predictions.transform.LayerNorm", "cls.predictions.bias")
    elif head == "classify":
        pairs += t.dense_pairs(("pooler",), "pooler.dense") + hf_bert.task_pairs(head)
    elif head in ("tokens", "span"):
        pairs += hf_bert.task_pairs(head)
    return pairs


def _read(hf: dict, state: dict, path: str) -> dict:
    config_file = os.path.join(path, "config.json")
    if hf.get("position_biased_input", True) or not hf.get("relative_attention", False):
        raise UserError(f"{config_file}: pretrainx's DeBERTa has relative attention and no "
                        "absolute positions in the encoder (position_biased_input false), as "
                        "DeBERTa-v2/v3; this is another variant")
    if sorted(hf.get("pos_att_type") or []) != ["c2p", "p2c"]:
        raise UserError(f"{config_file}: pos_att_type {hf.get('pos_att_type')} (expected "
                        "c2p and p2c)")
    if hf.get("conv_kernel_size", 0) or "layer_norm" not in str(hf.get("norm_rel_ebd", "")):
        raise UserError(f"{config_file}: conv_kernel_size or norm_rel_ebd other than "
                        "DeBERTa-v3's (no convolution, LayerNorm'ed relative table)")
    m = hf_bert.model_config_from_hf(hf, deberta.default_config(), config_file)
    m.type_vocab_size = hf.get("type_vocab_size", 0)
    m.layer_norm_eps = hf.get("layer_norm_eps", 1e-7)
    m.position_buckets = hf.get("position_buckets", 256)
    m.max_relative_positions = hf.get("max_relative_positions", -1)
    if m.max_relative_positions < 1:
        m.max_relative_positions = m.max_position_embeddings
    m.share_att_key = bool(hf.get("share_att_key", False))
    head = t.head_of(hf, ARCHITECTURES)
    state = {k.replace("lm_predictions.lm_head.", "cls.predictions.transform.", 1): v
             for k, v in state.items()}
    # DebertaV2Model.save_pretrained writes its tensors without the "deberta." prefix
    state = {("deberta." + k if k.startswith(("embeddings.", "encoder.")) else k): v
             for k, v in state.items()}
    params = t.from_hf(state, name_pairs(m, head), m.num_heads, path,
                       f"a {ARCHITECTURES.get(head, 'DebertaV2Model')} with {m.num_layers} layers")
    tokenizer, lower_case = hf_lib.tokenizer_of(path)
    return dict(model=m, params=params, tokenizer=tokenizer, lower_case=lower_case, head=head,
                labels=t.labels_of(hf, head))


def _write(pretrained, params, tokenizer):
    m, head = pretrained.model, pretrained.head
    head = "encoder" if head == "pretrain" else head  # v3: the discriminator's encoder
    state = t.to_hf(params, name_pairs(m, head))
    if head == "mlm":
        state["cls.predictions.decoder.weight"] = state["deberta.embeddings.word_embeddings.weight"]
        state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
    return state, _config(m, head, tokenizer,
                          pretrained.labels if head in ("classify", "tokens") else None)


def _config(m, head: str, tokenizer, labels=None) -> dict:
    config = hf_bert.to_hf_config(m, head, tokenizer.pad_id, labels)
    config.update(model_type="deberta-v2",
                  architectures=[ARCHITECTURES.get(head, "DebertaV2Model")],
                  relative_attention=True, position_biased_input=False,
                  pos_att_type=["p2c", "c2p"], position_buckets=m.position_buckets,
                  max_relative_positions=m.max_relative_positions,
                  share_att_key=bool(m.share_att_key), norm_rel_ebd="layer_norm",
                  pooler_hidden_size=m.hidden_size, pooler_dropout=m.dropout_rate,
                  pooler_hidden_act=hf_lib.ACT_TO_HF[m.hidden_act], legacy=True)
    config.pop("position_embedding_type")
    return config


def _companions(pretrained, params, tokenizer) -> dict:
    """A v3 run's generator, in a directory of its own (as Microsoft released none, the
    layout is ELECTRA's on the hub: OUTPUT/generator)."""
    if pretrained.head != "pretrain" or "generator" not in params:
        return {}
    gen = deberta_rtd.generator_config(pretrained.model)
    state = t.to_hf(params["generator"], name_pairs(gen, "mlm"))
    state["cls.predictions.decoder.weight"] = state["deberta.embeddings.word_embeddings.weight"]
    state["cls.predictions.decoder.bias"] = state["cls.predictions.bias"]
    return {"generator": (state, _config(gen, "mlm", tokenizer))}


def _caveat(pretrained) -> str:
    if pretrained.head == "pretrain":
        return ("the discriminator is written as DebertaV2Model (its word table E_G + "
                "E_delta, as GDES computes it) and the generator as generator/ "
                "DebertaV2ForMaskedLM; the replaced-token head has no HF class and is not "
                "written")
    if pretrained.head == "mlm" and pretrained.model.enhanced_mask_decoder:
        return ("HF's DebertaV2ForMaskedLM has no enhanced mask decoder: the encoder and MLM "
                "head are written exactly, the decoder's position table (emd_position) is not, "
                "and HF's MLM logits are the head on the last layer without it")
    return ""


# (output layer, word table): tied unless config.json says tie_word_embeddings=false
TIED = (("cls.predictions.decoder.weight",
         "deberta.embeddings.word_embeddings.weight"),)

ADAPTER = hf_lib.Adapter(
    name="deberta", tied=TIED, model_type="deberta-v2", read=_read,
    write=_write, write_tokenizer=functools.partial(
        hf_tokenizer_files.write_encoder_tokenizer, spm_file="spm.model"),
    companions=_companions, caveat=_caveat,
    refuses={"deberta": "DeBERTa v1 (DebertaForMaskedLM, whose attention keeps q, k and v in "
                        "one in_proj matrix with separate q and v biases, and relative "
                        "positions without v2's log buckets) is not supported; pretrainx "
                        "reads and writes DeBERTa-v2 and v3 (model_type deberta-v2)"})
