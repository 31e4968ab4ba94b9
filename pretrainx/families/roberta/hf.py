"""RoBERTa parameters <-> HuggingFace `RobertaFor*` and `XLMRobertaFor*` state dicts
and config.json: XLM-R is RoBERTa's model over a SentencePiece vocabulary, so a run whose
tokenizer is SentencePiece (the multilingual recipes) exports as XLM-R, any other as
RoBERTa, and both read back into family roberta.

The encoder's tensors are BERT's under `roberta.`; the MLM head is `lm_head.dense`,
`lm_head.layer_norm` and `lm_head.bias` (the decoder tied to the word table); a
sequence classifier is `classifier.dense` (our pooler's place: dense + tanh on <s>)
and `classifier.out_proj`. HF numbers positions from pad_token_id + 1, so the
tokenizer's <pad> must be our position_offset - 1 (1 in fairseq's layout); a model
trained at another offset (our [PAD]-first SentencePiece ids at RoBERTa's offset 2) is
written with its position table shifted to HF's numbering, which computes the same.

The tokenizer is written as RoBERTa's vocab.json: with GPT-2's files our ids take
fairseq's layout (data/bpe.py:RobertaLayout), and the exported vocab.json holds
those ids, so HF's RobertaTokenizer gives the ids the model was trained on.
"""

import json
import os
import shutil

import numpy as np

from pretrainx.data.sentencepiece_tokenizer import FairseqSentencePiece
from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
import pretrainx.families.bert.hf as hf_bert
import pretrainx.interop.hf_tensors as t
from pretrainx.interop import hf_tokenizer_files, tokenizer_json
from pretrainx.families.roberta import model as roberta

ARCHITECTURES = {"encoder": "RobertaModel", "mlm": "RobertaForMaskedLM",
                 "classify": "RobertaForSequenceClassification",
                 "tokens": "RobertaForTokenClassification", "span": "RobertaForQuestionAnswering"}
XLMR_ARCHITECTURES = {head: "XLM" + name for head, name in ARCHITECTURES.items()}
POSITIONS = "roberta.embeddings.position_embeddings.weight"


def name_pairs(num_layers: int, head: str) -> list:
    pairs = hf_bert.encoder_pairs(num_layers, "roberta.")
    if head == "encoder":
        pairs += t.dense_pairs(("pooler",), "roberta.pooler.dense")
    elif head == "mlm":
        pairs += hf_bert.mlm_pairs("lm_head.dense", "lm_head.layer_norm", "lm_head.bias")
    elif head == "classify":
        pairs += (t.dense_pairs(("pooler",), "classifier.dense")
                  + t.dense_pairs(("classifier",), "classifier.out_proj"))
    else:
        pairs += hf_bert.task_pairs(head)
    return pairs


def _read(hf: dict, state: dict, path: str, architectures: dict = ARCHITECTURES) -> dict:
    config_file = os.path.join(path, "config.json")
    model = hf_bert.model_config_from_hf(hf, roberta.default_config(), config_file)
    model.position_offset = int(hf.get("pad_token_id", 1)) + 1
    model.layer_norm_eps = hf.get("layer_norm_eps", 1e-5)
    model.type_vocab_size = hf.get("type_vocab_size", 1)
    head = t.head_of(hf, architectures)
    state = {("roberta." + k if k.startswith(("embeddings.", "encoder.", "pooler.")) else k): v
             for k, v in state.items()}
    params = t.from_hf(state, name_pairs(model.num_layers, head), model.num_heads, path,
                       f"a {architectures.get(head, architectures['encoder'])} with "
                       f"{model.num_layers} layers",
                       optional=lambda name: name.startswith("roberta.pooler"))
    tokenizer, _ = hf_lib.tokenizer_of(path)
    return dict(model=model, params=params, tokenizer=tokenizer, lower_case=False, head=head,
                labels=t.labels_of(hf, head))


def _check(pretrained) -> None:
    hf_bert.check_architecture(pretrained)
    if pretrained.head == "pretrain":
        raise UserError(f"{pretrained.source} has a next-sentence head, which no HF RoBERTa "
                        "class holds")


def positions_from_pad(table: np.ndarray, position_offset: int, pad_id: int) -> np.ndarray:
    """Our position table [rows, E] as HF's RoBERTa reads it: HF gives the p-th token row
    pad_id + 1 + p, we gave it position_offset + p; rows are dropped from the start or
    zero rows (never read) put before it, so each token reads the row it trained with."""
    shift = int(position_offset) - (int(pad_id) + 1)
    if shift >= 0:
        return table[shift:]
    return np.concatenate([np.zeros((-shift, table.shape[1]), table.dtype), table])


def _write(pretrained, params, tokenizer, model_type="roberta", architectures=ARCHITECTURES):
    m, head = pretrained.model, pretrained.head
    state = t.to_hf(params, name_pairs(m.num_layers, head))
    state[POSITIONS] = positions_from_pad(np.asarray(state[POSITIONS]),
                                          m.get("position_offset", 0), tokenizer.pad_id)
    if head == "mlm":
        state["lm_head.decoder.weight"] = state["roberta.embeddings.word_embeddings.weight"]
        state["lm_head.decoder.bias"] = state["lm_head.bias"]
    config = hf_bert.to_hf_config(m, head, tokenizer.pad_id,
                                  pretrained.labels if head in ("classify", "tokens") else None)
    config.update(model_type=model_type,
                  architectures=[architectures.get(head, architectures["encoder"])],
                  max_position_embeddings=len(state[POSITIONS]),
                  bos_token_id=int(tokenizer.cls_id), eos_token_id=int(tokenizer.sep_id))
    return state, config


def _max_length(pretrained) -> int:
    return int(pretrained.model.max_position_embeddings) - pretrained.model.position_offset


def _write_tokenizer(pretrained, tokenizer, output) -> list:
    return hf_tokenizer_files.write_fairseq_bpe(pretrained, tokenizer, output, "RobertaTokenizer",
                             _max_length(pretrained))


def sentencepiece(pretrained) -> bool:
    """Whether the run's tokenizer is SentencePiece (a .model, or a tokenizer.json of a
    unigram model): XLM-R's kind of vocabulary."""
    path = pretrained.tokenizer
    if path.endswith("tokenizer.json"):
        with open(path, encoding="utf-8") as f:
            return json.load(f).get("model", {}).get("type") == "Unigram"
    return path.endswith(".model")


def _check_xlmr(pretrained) -> None:
    _check(pretrained)
    if pretrained.tokenizer.endswith(".model") and not tokenizer_json.is_unigram(
            pretrained.tokenizer):
        raise UserError(f"{pretrained.source}: its tokenizer {pretrained.tokenizer} is a "
                        "SentencePiece BPE model; XLM-R's tokenizer.json is written for unigram "
                        "models only (python -m pretrainx.tokenizer train --model_type=unigram)")


def _write_xlmr_tokenizer(pretrained, tokenizer, output) -> list:
    """XLM-R's tokenizer as tokenizer.json in the ids the run trained with; an imported
    XLM-R (fairseq's ids over its model) also gets its sentencepiece.bpe.model, which
    transformers' slow XLMRobertaTokenizer reads in those ids. Our own [PAD]-first
    SentencePiece model is not written as one: that class would shift its ids."""
    if pretrained.tokenizer.endswith("tokenizer.json"):
        shutil.copyfile(pretrained.tokenizer, os.path.join(output, "tokenizer.json"))
        files = ["tokenizer.json"]
    else:
        files = tokenizer_json.write(tokenizer, output, tokenizer_json.XLMR_FRAMING)
    if isinstance(tokenizer, FairseqSentencePiece):
        shutil.copyfile(pretrained.tokenizer, os.path.join(output, "sentencepiece.bpe.model"))
        files.append("sentencepiece.bpe.model")
    special = hf_lib.special_tokens(tokenizer)
    special.update(bos_token=special["cls_token"], eos_token=special["sep_token"])
    # transformers 5's XLMRobertaTokenizer puts <unk> at 3 whatever tokenizer.json says:
    # ids in another layout are read by the class that takes the file as it is
    fairseq = (tokenizer.cls_id, tokenizer.pad_id, tokenizer.sep_id, tokenizer.unk_id) == (
        0, 1, 2, 3)
    config = dict(tokenizer_class="XLMRobertaTokenizer" if fairseq else "PreTrainedTokenizerFast",
                  model_max_length=_max_length(pretrained))
    return files + hf_lib.write_tokenizer_config(output, config, special)


# (output layer, word table): tied unless config.json says tie_word_embeddings=false
TIED = (("lm_head.decoder.weight",
         "roberta.embeddings.word_embeddings.weight"),)

ADAPTER = hf_lib.Adapter(name="roberta", tied=TIED, model_type="roberta", read=_read,
                         write=_write, write_tokenizer=_write_tokenizer,
                         check=_check, writes=lambda pretrained: not sentencepiece(pretrained))

XLMR_ADAPTER = hf_lib.Adapter(
    name="roberta", tied=TIED, model_type="xlm-roberta",
    read=lambda hf, state, path: _read(hf, state, path, XLMR_ARCHITECTURES),
    write=lambda pretrained, params, tokenizer: _write(
        pretrained, params, tokenizer, "xlm-roberta", XLMR_ARCHITECTURES),
    write_tokenizer=_write_xlmr_tokenizer, check=_check_xlmr, writes=sentencepiece)
