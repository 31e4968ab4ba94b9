"""RoBERTa parameters <-> HuggingFace `RobertaFor*` state dicts and config.json.

The encoder's tensors are BERT's under `roberta.`; the MLM head is `lm_head.dense`,
`lm_head.layer_norm` and `lm_head.bias` (the decoder tied to the word table); a
sequence classifier is `classifier.dense` (our pooler's place: dense + tanh on <s>)
and `classifier.out_proj`. HF numbers positions from pad_token_id + 1, so the
tokenizer's <pad> must be our position_offset - 1 (1 in fairseq's layout).

The tokenizer is written as RoBERTa's vocab.json: with GPT-2's files our ids take
fairseq's layout (data/bpe.py:RobertaLayout), and the exported vocab.json holds
those ids, so HF's RobertaTokenizer gives the ids the model was trained on.
"""

import json
import os
import shutil

from pretrainx.data import bpe
from pretrainx.errors import UserError
import pretrainx.interop.hf as hf_lib
import pretrainx.families.bert.hf as hf_bert
import pretrainx.interop.hf_tensors as t
from pretrainx.families.roberta import model as roberta

ARCHITECTURES = {"mlm": "RobertaForMaskedLM", "classify": "RobertaForSequenceClassification",
                 "tokens": "RobertaForTokenClassification", "span": "RobertaForQuestionAnswering"}


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


def _read(hf: dict, state: dict, path: str) -> dict:
    config_file = os.path.join(path, "config.json")
    model = hf_bert.model_config_from_hf(hf, roberta.default_config(), config_file)
    model.position_offset = int(hf.get("pad_token_id", 1)) + 1
    model.layer_norm_eps = hf.get("layer_norm_eps", 1e-5)
    model.type_vocab_size = hf.get("type_vocab_size", 1)
    head = t.head_of(hf, ARCHITECTURES)
    state = {("roberta." + k if k.startswith(("embeddings.", "encoder.", "pooler.")) else k): v
             for k, v in state.items()}
    params = t.from_hf(state, name_pairs(model.num_layers, head), model.num_heads, path,
                       f"a {ARCHITECTURES.get(head, 'RobertaModel')} with {model.num_layers} "
                       "layers", optional=lambda name: name.startswith("roberta.pooler"))
    tokenizer, _ = hf_lib.tokenizer_of(path)
    return dict(model=model, params=params, tokenizer=tokenizer, lower_case=False, head=head,
                labels=t.labels_of(hf, head))


def _check(pretrained) -> None:
    if pretrained.head == "pretrain":
        raise UserError(f"{pretrained.source} has a next-sentence head, which no HF RoBERTa "
                        "class holds")


def _write(pretrained, params, tokenizer):
    m, head = pretrained.model, pretrained.head
    if tokenizer.pad_id + 1 != m.position_offset:
        raise UserError(f"{pretrained.source}: HF's RoBERTa numbers positions from <pad> + 1 = "
                        f"{tokenizer.pad_id + 1}; this model's model.position_offset is "
                        f"{m.get('position_offset', 0)}")
    state = t.to_hf(params, name_pairs(m.num_layers, head))
    if head == "mlm":
        state["lm_head.decoder.weight"] = state["roberta.embeddings.word_embeddings.weight"]
        state["lm_head.decoder.bias"] = state["lm_head.bias"]
    config = hf_bert.to_hf_config(m, head, tokenizer.pad_id,
                                  pretrained.labels if head in ("classify", "tokens") else None)
    config.update(model_type="roberta",
                  architectures=[ARCHITECTURES.get(head, "RobertaModel")],
                  bos_token_id=int(tokenizer.cls_id), eos_token_id=int(tokenizer.sep_id))
    return state, config


def write_fairseq_bpe(pretrained, tokenizer, output, tokenizer_class: str,
                      max_length: int, extra: dict | None = None) -> list:
    """vocab.json in the ids the run trained with (fairseq's layout of GPT-2's files),
    merges.txt, and the special tokens <s> </s> <pad> <unk> <mask>: RoBERTa's and BART's.
    `extra` adds to tokenizer_config.json."""
    _, merges = bpe.files_in(pretrained.tokenizer)
    with open(os.path.join(output, "vocab.json"), "w", encoding="utf-8") as f:
        json.dump(bpe.vocab_json(tokenizer), f, ensure_ascii=False)
    shutil.copyfile(merges, os.path.join(output, "merges.txt"))
    special = hf_lib.special_tokens(tokenizer)
    special.update(bos_token=special["cls_token"], eos_token=special["sep_token"])
    config = dict(tokenizer_class=tokenizer_class, model_max_length=int(max_length),
                  add_prefix_space=False, **(extra or {}))
    return ["vocab.json", "merges.txt"] + hf_lib.write_tokenizer_config(output, config, special)


def write_tokenizer_json(output: str) -> list:
    """tokenizer.json of the vocab.json, merges.txt and special tokens just written to
    `output` (tokenizers' byte-level BPE, framed `cls text sep`): for classes that
    transformers 5 builds from tokenizer.json alone (ModernBERT's)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    with open(os.path.join(output, "special_tokens_map.json"), encoding="utf-8") as f:
        special = json.load(f)
    built = Tokenizer(models.BPE.from_file(os.path.join(output, "vocab.json"),
                                           os.path.join(output, "merges.txt")))
    built.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    built.decoder = decoders.ByteLevel()
    built.add_special_tokens(sorted(set(special.values())))
    cls, sep = special["cls_token"], special["sep_token"]
    ids = [(t, built.token_to_id(t)) for t in dict.fromkeys((cls, sep))]
    built.post_processor = processors.TemplateProcessing(
        single=f"{cls} $A {sep}", pair=f"{cls} $A {sep} $B {sep}", special_tokens=ids)
    built.save(os.path.join(output, "tokenizer.json"))
    return ["tokenizer.json"]


def _write_tokenizer(pretrained, tokenizer, output) -> list:
    max_len = int(pretrained.model.max_position_embeddings) - pretrained.model.get(
        "position_offset", 0)
    return write_fairseq_bpe(pretrained, tokenizer, output, "RobertaTokenizer", max_len)


# (output layer, word table): tied unless config.json says tie_word_embeddings=false
TIED = (("lm_head.decoder.weight",
         "roberta.embeddings.word_embeddings.weight"),)

ADAPTER = hf_lib.Adapter(name="roberta", tied=TIED, model_type="roberta", read=_read,
                         write=_write, write_tokenizer=_write_tokenizer,
                         check=_check)
