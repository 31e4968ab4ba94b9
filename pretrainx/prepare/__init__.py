"""Preparing data before a run: `data_cli` (python -m pretrainx.data: --stats, --show,
prepare, build_tfds), `examples` (a config's corpora tokenized once into ArrayRecord
shards of examples), `tokenizer` (training SentencePiece, WordPiece and word
vocabularies) and `extend_vocab` (adding domain words to a released vocabulary).
These build objectives' examples, so they sit above the data package, which only
reads what they write."""
