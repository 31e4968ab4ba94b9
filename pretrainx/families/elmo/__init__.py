"""ELMo (Peters et al., 2018): the character CNN and bidirectional LSTM language model.

Its model, objective(s) and HuggingFace adapter; they register themselves."""
