"""DeBERTa (He et al., 2020) and DeBERTa-v3 (2021): disentangled attention, MLM or RTD.

Its model, objective(s) and HuggingFace adapter; they register themselves."""
