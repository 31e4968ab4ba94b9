"""The crammed BERT (Geiping and Goldstein, 2022): BERT trained in a day on one GPU.

Its model, objective(s) and HuggingFace adapter; they register themselves."""
