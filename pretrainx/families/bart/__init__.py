"""BART (Lewis et al., 2019): the denoising encoder-decoder.

Its model, objective(s) and HuggingFace adapter; they register themselves."""
