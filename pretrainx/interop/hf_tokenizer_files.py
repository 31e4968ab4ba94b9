"""The tokenizer files of an HF folder, written for the tokenizer a run trained with:
a [CLS] text [SEP] encoder's (WordPiece's vocab.txt, a tokenizer.json, a SentencePiece
model) and a byte-level BPE's in fairseq's ids (RoBERTa's, BART's, ModernBERT's)."""

import json
import os
import shutil

from pretrainx.data import bpe
from pretrainx.interop import hf as hf_lib
from pretrainx.interop import tokenizer_json


def write_encoder_tokenizer(pretrained, tokenizer, output, extra: dict | None = None,
                    spm_class: str = "PreTrainedTokenizerFast", spm_file: str = "") -> list:
    """The tokenizer files for a [CLS] text [SEP] encoder: vocab.txt as BertTokenizer
    reads it; a tokenizer.json (an imported fast-only one) as it is; a SentencePiece
    unigram model as a tokenizer.json of it in the run's ids, read by the class that
    takes the file as it is (transformers 5's BertTokenizer, ElectraTokenizer and
    DebertaV2Tokenizer rebuild their own pipeline and give other ids; ALBERT's
    `spm_class` keeps the file's), with the model itself as `spm_file` where a
    family's slow class reads one (ALBERT's spiece.model, DeBERTa's spm.model). A
    SentencePiece BPE model has no exact tokenizer.json here: it is written as
    spiece.model under AlbertTokenizer, which reads it in transformers 4. `extra` adds
    to tokenizer_config.json."""
    max_len = int(pretrained.model.max_position_embeddings)
    source = pretrained.tokenizer
    if source.endswith(".txt"):
        shutil.copyfile(source, os.path.join(output, "vocab.txt"))
        config = {"tokenizer_class": "BertTokenizer", "do_lower_case": pretrained.lower_case}
        names = ["vocab.txt"]
    elif source.endswith("tokenizer.json"):
        shutil.copyfile(source, os.path.join(output, "tokenizer.json"))
        config = {"tokenizer_class": "PreTrainedTokenizerFast"}
        names = ["tokenizer.json"]
    elif tokenizer_json.is_unigram(source):
        names = tokenizer_json.write(tokenizer, output, tokenizer_json.BERT_FRAMING)
        if spm_file:
            shutil.copyfile(source, os.path.join(output, spm_file))
            names.append(spm_file)
        config = {"tokenizer_class": spm_class, "do_lower_case": False, "keep_accents": True}
    else:
        shutil.copyfile(source, os.path.join(output, "spiece.model"))
        config = {"tokenizer_class": "AlbertTokenizer", "do_lower_case": False,
                  "keep_accents": True, "remove_space": True}
        names = ["spiece.model"]
    config.update(model_max_length=max_len, **(extra or {}))
    return names + hf_lib.write_tokenizer_config(output, config, hf_lib.special_tokens(tokenizer))


def write_fairseq_bpe(pretrained, tokenizer, output, tokenizer_class: str,
                      max_length: int, extra: dict | None = None) -> list:
    """vocab.json in the ids the run trained with (fairseq's layout of GPT-2's files),
    merges.txt, and the special tokens <s> </s> <pad> <unk> <mask>: RoBERTa's and BART's.
    A run on a folder's tokenizer.json alone (what transformers 5 saves for them) writes
    that file as it is: it holds those ids already. `extra` adds to tokenizer_config.json."""
    if pretrained.tokenizer.endswith("tokenizer.json"):
        shutil.copyfile(pretrained.tokenizer, os.path.join(output, "tokenizer.json"))
        files = ["tokenizer.json"]
    else:
        _, merges = bpe.files_in(pretrained.tokenizer)
        with open(os.path.join(output, "vocab.json"), "w", encoding="utf-8") as f:
            json.dump(bpe.vocab_json(tokenizer), f, ensure_ascii=False)
        shutil.copyfile(merges, os.path.join(output, "merges.txt"))
        files = ["vocab.json", "merges.txt"]
    special = hf_lib.special_tokens(tokenizer)
    special.update(bos_token=special["cls_token"], eos_token=special["sep_token"])
    config = dict(tokenizer_class=tokenizer_class, model_max_length=int(max_length),
                  add_prefix_space=False, **(extra or {}))
    return files + hf_lib.write_tokenizer_config(output, config, special)


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


def write_decoder_tokenizer(pretrained, output: str, special: dict) -> list:
    """A decoder's tokenizer files: an imported tokenizer.json (Qwen's, Gemma's) as it
    is, read by PreTrainedTokenizerFast; GPT-2's byte-level files (a run trained here on
    them) under GPT2Tokenizer, which splits text as they were trained to. `special`:
    tokenizer_config.json's token entries (eos_token, pad_token, ...)."""
    if pretrained.tokenizer.endswith("tokenizer.json"):
        shutil.copyfile(pretrained.tokenizer, os.path.join(output, "tokenizer.json"))
        files, config = ["tokenizer.json"], {"tokenizer_class": "PreTrainedTokenizerFast"}
    else:
        files = ["vocab.json", "merges.txt"]
        for source, name in zip(bpe.files_in(pretrained.tokenizer), files):
            shutil.copyfile(source, os.path.join(output, name))
        config = {"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": False}
    config.update(model_max_length=int(pretrained.model.max_position_embeddings))
    return files + hf_lib.write_tokenizer_config(output, config, special)
