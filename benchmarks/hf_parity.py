"""How close pretrainx's import and export of each family are to transformers' own
models, on the transformers installed here (run it in a 4.x and a 5.x venv).

    python benchmarks/hf_parity.py [--families=bert,roberta,...] [--rows=4]

For each family: a tiny model of transformers' class with random weights (its output
layer tied as the family's releases are; T5 1.1's untied), saved with its tokenizer
files in the layout its releases use (real vocabularies: BERT's vocab.txt, GPT-2's
byte-level files, the bundled SentencePiece models, an XLM-R-layout SentencePiece
model trained on the multilingual corpus). Then, on `--rows` real sentences of Alice
(German fortunes for XLM-R) padded into one batch:

- ours: max |our logits - transformers' logits| over the real positions, our model
  read from the folder by `pretrainx.load` (T5 and BART: the decoder's logits as it
  reads the rows shifted right from its start token; ELECTRA: its generator's);
- round trip: the folder imported and exported by pretrainx, loaded by transformers'
  class again: max |its logits - the original's|;
- tokenizer: whether AutoTokenizer on the export gives, on 20 sentences, the ids
  pretrainx trains the imported model on (its tokenizer in the family's layout and
  framing).

The last line is one JSON object. The figures are float32 on the CPU.
"""

import argparse
import json
import os
import sys
import tempfile

os.environ.setdefault("JAX_PLATFORMS", "cpu")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, REPO)

import numpy as np  # noqa: E402
import torch  # noqa: E402
import transformers as tf  # noqa: E402

import pretrainx  # noqa: E402
from pretrainx import interop  # noqa: E402

SHARED = os.path.join(os.path.dirname(REPO), "shared", "data")
TOKENIZERS = os.path.join(SHARED, "tokenizers")
ASSETS = os.path.join(REPO, "pretrainx", "assets")
SMALL = dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64)
FAMILIES = ("bert", "roberta", "xlm-roberta", "distilbert", "albert", "electra", "deberta-v2",
            "modernbert", "gpt2", "t5", "bart")


def _copy(files: dict, folder: str) -> None:
    for name, source in files.items():
        with open(source, "rb") as f, open(os.path.join(folder, name), "wb") as g:
            g.write(f.read())


def _folder_of(source: str) -> dict:
    return {name: os.path.join(source, name) for name in os.listdir(source)}


def _xlmr_spm(scratch: str) -> str:
    import sentencepiece as spm
    prefix = os.path.join(scratch, "xlmr")
    corpus = os.path.join(SHARED, "corpus", "multilingual")
    spm.SentencePieceTrainer.train(
        input=",".join(os.path.join(corpus, f"fortunes.{lang}.txt")
                       for lang in ("de", "es", "it", "ru", "cs", "pt", "zh")),
        model_prefix=prefix, vocab_size=2000, input_sentence_size=20000,
        shuffle_input_sentence=False, character_coverage=0.9995, minloglevel=2)
    return prefix + ".model"


def _roberta_files(scratch: str) -> dict:
    """A RoBERTa release's vocab.json (fairseq's <s> <pad> </s> <unk> first, <mask> last)
    over GPT-2's pieces, and its merges."""
    from pretrainx.data import bpe
    gpt2 = os.path.join(TOKENIZERS, "gpt2")
    layout = bpe.roberta_ids(bpe.ByteLevelBPETokenizer(*bpe.files_in(gpt2)))
    vocab = os.path.join(scratch, "roberta_vocab.json")
    with open(vocab, "w", encoding="utf-8") as f:
        json.dump(bpe.vocab_json(layout), f, ensure_ascii=False)
    return {"vocab.json": vocab, "merges.txt": os.path.join(gpt2, "merges.txt")}


def _modernbert_files(scratch: str) -> tuple:
    """ModernBERT's release layout: tokenizer.json alone (a byte-level BPE with BERT's
    special tokens after its pieces; GPT-2's pieces stand in for OLMo's) and a
    tokenizer_config.json naming PreTrainedTokenizerFast and those tokens."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors
    gpt2 = os.path.join(TOKENIZERS, "gpt2")
    tok = Tokenizer(models.BPE.from_file(os.path.join(gpt2, "vocab.json"),
                                         os.path.join(gpt2, "merges.txt")))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    names = ("[UNK]", "[CLS]", "[SEP]", "[PAD]", "[MASK]")
    tok.add_special_tokens(list(names))
    ids = {t: tok.token_to_id(t) for t in names}
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[(t, ids[t]) for t in ("[CLS]", "[SEP]")])
    path, config = os.path.join(scratch, "tokenizer.json"), os.path.join(scratch, "mb.json")
    tok.save(path)
    with open(config, "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "[UNK]",
                   "cls_token": "[CLS]", "sep_token": "[SEP]", "pad_token": "[PAD]",
                   "mask_token": "[MASK]",
                   "model_input_names": ["input_ids", "attention_mask"]}, f)
    return {"tokenizer.json": path, "tokenizer_config.json": config}, ids


def build(family: str, folder: str, scratch: str):
    """(transformers model, its tokenizer) of `family`, saved into `folder`."""
    os.makedirs(folder)
    bert_vocab = _folder_of(os.path.join(TOKENIZERS, "bert-base-uncased"))
    gpt2_files = _folder_of(os.path.join(TOKENIZERS, "gpt2"))
    spm = {"spiece.model": os.path.join(ASSETS, "spm_4k.model")}
    if family == "bert":
        model, files = tf.BertForMaskedLM(tf.BertConfig(vocab_size=30522, **SMALL)), bert_vocab
    elif family == "roberta":
        model = tf.RobertaForMaskedLM(tf.RobertaConfig(vocab_size=50265, pad_token_id=1,
                                                       max_position_embeddings=514, **SMALL))
        files = _roberta_files(scratch)
    elif family == "xlm-roberta":
        files = {"sentencepiece.bpe.model": _xlmr_spm(scratch)}
        model = tf.XLMRobertaForMaskedLM(tf.XLMRobertaConfig(
            vocab_size=2002, pad_token_id=1, max_position_embeddings=514, **SMALL))
    elif family == "distilbert":
        model = tf.DistilBertForMaskedLM(tf.DistilBertConfig(
            vocab_size=30522, dim=32, n_layers=2, n_heads=2, hidden_dim=64))
        files = bert_vocab
    elif family == "albert":
        model = tf.AlbertForMaskedLM(tf.AlbertConfig(vocab_size=4096, embedding_size=16,
                                                     **SMALL))
        files = spm
    elif family == "electra":
        model = tf.ElectraForMaskedLM(tf.ElectraConfig(vocab_size=30522, embedding_size=16,
                                                       **SMALL))
        files = bert_vocab
    elif family == "deberta-v2":
        model = tf.DebertaV2ForMaskedLM(tf.DebertaV2Config(
            vocab_size=4096, relative_attention=True, position_buckets=8,
            max_relative_positions=32, pos_att_type=["p2c", "c2p"],
            position_biased_input=False, norm_rel_ebd="layer_norm", share_att_key=True,
            **SMALL))
        files = {"spm.model": spm["spiece.model"]}
    elif family == "modernbert":
        files, ids = _modernbert_files(scratch)
        model = tf.ModernBertForMaskedLM(tf.ModernBertConfig(
            vocab_size=50265, pad_token_id=ids["[PAD]"], cls_token_id=ids["[CLS]"],
            sep_token_id=ids["[SEP]"], bos_token_id=ids["[CLS]"], eos_token_id=ids["[SEP]"],
            global_attn_every_n_layers=1, **SMALL))
    elif family == "gpt2":
        model = tf.GPT2LMHeadModel(tf.GPT2Config(vocab_size=50257, n_embd=32, n_layer=2,
                                                 n_head=2, n_positions=64))
        files = gpt2_files
    elif family == "t5":
        model = tf.T5ForConditionalGeneration(tf.T5Config(
            vocab_size=4100, d_model=32, d_kv=16, d_ff=64, num_layers=2, num_heads=2,
            feed_forward_proj="gated-gelu", tie_word_embeddings=False,
            decoder_start_token_id=0))
        files = {"spiece.model": os.path.join(ASSETS, "spm_t5_4k.model")}
    elif family == "bart":
        model = tf.BartForConditionalGeneration(tf.BartConfig(
            vocab_size=50265, d_model=32, encoder_layers=1, decoder_layers=1,
            encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=64,
            decoder_ffn_dim=64, max_position_embeddings=130))
        files = gpt2_files
    else:
        raise SystemExit(f"unknown family {family}: expected one of {', '.join(FAMILIES)}")
    model.eval().save_pretrained(folder)
    _copy(files, folder)
    # tokenizer_config.json as the releases have it where the class's defaults differ
    # from the vocabulary (the bundled SentencePiece models' [PAD] [UNK]; T5's extra ids)
    spm_specials = dict(pad_token="[PAD]", unk_token="[UNK]", cls_token="[CLS]",
                        sep_token="[SEP]", mask_token="[MASK]", do_lower_case=False,
                        keep_accents=True)
    config = {"t5": {"tokenizer_class": "T5Tokenizer", "extra_ids": 4},
              "albert": dict(tokenizer_class="AlbertTokenizer", **spm_specials),
              "deberta-v2": dict(tokenizer_class="DebertaV2Tokenizer", **spm_specials)}
    if family in config:
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump(config[family], f)
    return model, tf.AutoTokenizer.from_pretrained(folder)


def _sentences(family: str, rows: int) -> list:
    if family == "xlm-roberta":
        path = os.path.join(SHARED, "corpus", "multilingual", "fortunes.de.txt")
    else:
        path = os.path.join(ASSETS, "text", "pg11_alice_in_wonderland.txt")
    with open(path, encoding="utf-8") as f:
        lines = [" ".join(p.split()) for p in f.read().split("\n\n")[40:]]
    return [line[:120] for line in lines if len(line.split()) > 8][:rows]


def _logits(model, batch) -> np.ndarray:
    kwargs = dict(input_ids=torch.tensor(batch["input_ids"]),
                  attention_mask=torch.tensor(batch["attention_mask"]))
    if model.config.is_encoder_decoder:  # the decoder reads the rows shifted right
        ids = kwargs["input_ids"]
        start = torch.full_like(ids[:, :1], model.config.decoder_start_token_id)
        kwargs["decoder_input_ids"] = torch.cat([start, ids[:, :-1]], dim=1)
    with torch.no_grad():
        return model(**kwargs).logits.numpy()


def measure(family: str, scratch: str, rows: int) -> dict:
    torch.manual_seed(0)
    folder = os.path.join(scratch, family)
    theirs, tokenizer = build(family, folder, scratch)
    texts = _sentences(family, rows)
    if tokenizer.pad_token is None:  # GPT-2's: rows are right-padded and masked
        tokenizer.pad_token = tokenizer.eos_token
    encoded = tokenizer(texts, padding=True, return_tensors="np")
    batch = {k: np.asarray(encoded[k]) for k in ("input_ids", "attention_mask")}
    real = batch["attention_mask"].astype(bool)
    reference = _logits(theirs, batch)
    rows_ids = [list(ids[m]) for ids, m in zip(batch["input_ids"], real)]
    ours = pretrainx.load(folder)(ids=rows_ids)
    width = ours["logits"].shape[1]
    mask = ours["attention_mask"].astype(bool)
    out = {"ours": float(np.abs(ours["logits"] - reference[:, :width])[mask].max())}
    exported = os.path.join(scratch, family + "_out")
    interop.hf.save(interop.load(folder), exported)
    again = tf.AutoModelForSeq2SeqLM if theirs.config.is_encoder_decoder else (
        tf.AutoModelForCausalLM if family == "gpt2" else tf.AutoModelForMaskedLM)
    back = again.from_pretrained(exported).eval()
    out["round_trip"] = float(np.abs(_logits(back, batch) - reference)[real].max())
    auto = tf.AutoTokenizer.from_pretrained(exported)
    ours = _our_ids(folder)
    out["tokenizer_same"] = all(auto(t)["input_ids"] == ours(t) for t in _sentences(family, 20))
    return out


def _our_ids(folder: str):
    """text -> the ids pretrainx trains the imported model on, framed as its family
    frames a row: [CLS] text [SEP] (<s> </s>), GPT-2's pieces alone, T5's with </s>."""
    from pretrainx import models
    from pretrainx.data.tokenizers import load_tokenizer
    pretrained = interop.load(folder)
    tok = load_tokenizer(pretrained.tokenizer, lower_case=pretrained.lower_case,
                         layout=models.family(pretrained.family).tokenizer_layout)
    frame = {"gpt2": lambda ids: ids, "t5": lambda ids: ids + [tok.sep_id]}.get(
        pretrained.family, lambda ids: [tok.cls_id] + ids + [tok.sep_id])
    return lambda text: frame([int(i) for i in tok.encode(text)])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--rows", type=int, default=4)
    args = parser.parse_args()
    result = {"transformers": tf.__version__, "torch": torch.__version__.split("+")[0]}
    print(f"transformers {result['transformers']}, torch {result['torch']}, float32, CPU")
    print(f"{'family':12} {'ours vs HF':>11} {'round trip':>11}  tokenizer")
    with tempfile.TemporaryDirectory() as scratch:
        for family in [f for f in args.families.split(",") if f]:
            row = result[family] = measure(family, scratch, args.rows)
            ours = f"{row['ours']:.1e}" if "ours" in row else "-"
            print(f"{family:12} {ours:>11} {row['round_trip']:>11.1e}  "
                  f"{'same ids' if row['tokenizer_same'] else 'OTHER IDS'}", flush=True)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
