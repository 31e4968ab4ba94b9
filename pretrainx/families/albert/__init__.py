"""ALBERT (Lan et al., 2019): factorised embeddings, shared layers, sentence-order prediction.

Its model, objective(s) and HuggingFace adapter; they register themselves."""
