"""ModernBERT (Warner et al., 2024): RoPE, GeGLU, local/global attention, unpadded.

Its model, objective(s) and HuggingFace adapter; they register themselves."""
