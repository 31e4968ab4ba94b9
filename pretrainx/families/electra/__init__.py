"""ELECTRA (Clark et al., 2020): a generator and a discriminator, replaced token detection.

Its model, objective(s) and HuggingFace adapter; they register themselves."""
