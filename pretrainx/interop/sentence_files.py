"""sentence-transformers' files beside an encoder's HF export, so that
`SentenceTransformer(EXPORT_DIR)` loads it as it is: the HF model as module 0 (its
Transformer, the directory's own config.json, weights and tokenizer), a pooling module 1
that reads the last hidden states as the family's fine-tuning pools them ("cls": the
first token's; "mean": of the real tokens; "last": the last real token's), and cosine
similarity. A contrastive fine-tuning's model adds a Normalize module 2 (unit vectors,
as EmbeddingGemma's folder does); the Matryoshka widths it was trained at are named in
its model card (SentenceTransformer's truncate_dim keeps one). pretrainx.load's `embed`
computes the same vectors (inference.py)."""

import json
import os

POOLINGS = ("cls", "mean", "last")


def pooling_config(pooling: str, width: int) -> dict:
    """1_Pooling/config.json: one mode on, the others off."""
    if pooling not in POOLINGS:
        raise ValueError(f"sentence pooling {pooling!r} is not one of {POOLINGS}")
    modes = ("cls_token", "mean_tokens", "max_tokens", "mean_sqrt_len_tokens",
             "weightedmean_tokens", "lasttoken")
    on = {"cls": "cls_token", "mean": "mean_tokens", "last": "lasttoken"}[pooling]
    return {"word_embedding_dimension": int(width), "include_prompt": True,
            **{f"pooling_mode_{mode}": mode == on for mode in modes}}


def write(output: str, pooling: str, width: int, normalize: bool = False) -> list:
    """Writes the files into the HF directory `output` (its tokenizer_config.json is
    read for the longest input); returns their names."""
    tokenizer_config = os.path.join(output, "tokenizer_config.json")
    longest = None
    if os.path.isfile(tokenizer_config):
        with open(tokenizer_config, encoding="utf-8") as f:
            longest = json.load(f).get("model_max_length")
    files = {
        "modules.json": [
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": "sentence_transformers.models.Pooling"}] + ([
            {"idx": 2, "name": "2", "path": "2_Normalize",
             "type": "sentence_transformers.models.Normalize"}] if normalize else []),
        # the tokenizer lower-cases (or not) as its own files say
        "sentence_bert_config.json": {"max_seq_length": longest, "do_lower_case": False},
        "config_sentence_transformers.json": {
            "model_type": "SentenceTransformer", "prompts": {}, "default_prompt_name": None,
            "similarity_fn_name": "cosine"},
        os.path.join("1_Pooling", "config.json"): pooling_config(pooling, width),
    }
    if longest is None:
        del files["sentence_bert_config.json"]["max_seq_length"]
    for name, content in files.items():
        path = os.path.join(output, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            json.dump(content, f, indent=2)
    return sorted(files)
