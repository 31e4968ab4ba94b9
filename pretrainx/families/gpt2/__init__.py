"""GPT-2 (Radford et al., 2019): the causal decoder.

Its model, objective(s) and HuggingFace adapter; they register themselves."""
