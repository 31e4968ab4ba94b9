"""Text in, fixed-shape batches out: sources (files, globs, JSONL, Parquet/Arrow,
TFDS, hf://) read as documents, tokenizers (WordPiece, SentencePiece, byte-level BPE,
tokenizer.json), the corpus and its example cache, grain pipelines with packing and
segment ids, mixtures with temperature. It knows no objective: an objective hands it
the functions that turn documents into examples and examples into rows."""
