"""DistilBERT (Sanh et al., 2019): a 6-layer student distilled from BERT.

Its model, objective(s) and HuggingFace adapter; they register themselves."""
