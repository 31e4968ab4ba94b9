"""tokenizer.json of a SentencePiece unigram model, in the ids a run trained with.

transformers 5 builds its tokenizers from tokenizer.json, and a class with no
SentencePiece reader of its own (BERT's, ModernBERT's, XLM-R's over our [PAD]-first ids)
reads nothing else. Built with HF's `tokenizers` as transformers' SpmConverter builds
one: the model's pieces and scores in our id order, its precompiled normaliser, a right
strip and a run of spaces as one "▁", Metaspace pre-tokenising, the special pieces
matched whole, and the family's [CLS] A [SEP] framing.
"""

import os

from pretrainx.errors import UserError

# (single, pair) framing with the family's start and end pieces named cls and sep
BERT_FRAMING = ("{cls}:0 $A:0 {sep}:0", "{cls}:0 $A:0 {sep}:0 $B:1 {sep}:1")
XLMR_FRAMING = ("{cls} $A {sep}", "{cls} $A {sep} {sep} $B {sep}")


def _proto(path: str):
    from sentencepiece import sentencepiece_model_pb2
    proto = sentencepiece_model_pb2.ModelProto()
    try:
        with open(path, "rb") as f:
            proto.ParseFromString(f.read())
    except Exception as e:  # protobuf's DecodeError and OSError
        raise UserError(f"cannot read SentencePiece model {path}: {e}") from None
    return proto


def is_unigram(path: str) -> bool:
    """Whether `path` is a SentencePiece unigram model (a BPE one has no exact
    tokenizer.json here: its merges are not in the file)."""
    return path.endswith(".model") and _proto(path).trainer_spec.model_type == 1


def write(tokenizer, output: str, framing=BERT_FRAMING) -> list:
    """tokenizer.json in `output` for `tokenizer` (a SentencePiece tokenizer: ours or
    XLM-R's fairseq ids over one); returns the file names written."""
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers
    from tokenizers import AddedToken, processors
    proto = _proto(tokenizer.path)
    scores = {p.piece: p.score for p in proto.pieces}
    specials = {int(i) for i in tokenizer.special_ids()}
    pieces = [tokenizer.id_to_piece(i) for i in range(tokenizer.vocab_size)]
    vocab = [(p, 0.0 if i in specials else scores.get(p, 0.0)) for i, p in enumerate(pieces)]
    built = Tokenizer(models.Unigram(vocab, unk_id=int(tokenizer.unk_id),
                                     byte_fallback=proto.trainer_spec.byte_fallback))
    spaces = [normalizers.Strip(left=False, right=True),
              normalizers.Replace(Regex(" {2,}"), "\u2581")]
    charsmap = proto.normalizer_spec.precompiled_charsmap
    built.normalizer = normalizers.Sequence(
        ([normalizers.Precompiled(charsmap)] if charsmap else []) + spaces)
    prepend = "always" if proto.normalizer_spec.add_dummy_prefix else "never"
    built.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme=prepend)
    built.decoder = decoders.Metaspace(replacement="\u2581", prepend_scheme=prepend)
    built.add_special_tokens([AddedToken(vocab[i][0], special=True, normalized=False)
                              for i in sorted(specials)])
    cls, sep = tokenizer.id_to_piece(tokenizer.cls_id), tokenizer.id_to_piece(tokenizer.sep_id)
    single, pair = (f.format(cls=cls, sep=sep) for f in framing)
    built.post_processor = processors.TemplateProcessing(
        single=single, pair=pair,
        special_tokens=list(dict.fromkeys([(cls, int(tokenizer.cls_id)),
                                           (sep, int(tokenizer.sep_id))])))
    built.save(os.path.join(output, "tokenizer.json"))
    return ["tokenizer.json"]
