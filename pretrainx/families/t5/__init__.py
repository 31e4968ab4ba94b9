"""T5 (Raffel et al., 2019): the encoder-decoder, span corruption.

Its model, objective(s) and HuggingFace adapter; they register themselves."""
