"""BERT (Devlin et al., 2018): the encoder, masked LM with next-sentence prediction.

Its model, objective(s) and HuggingFace adapter; they register themselves."""
