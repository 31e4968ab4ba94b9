"""RoBERTa (Liu et al., 2019): BERT's model, dynamic masking of full sentences.

Its model, objective(s) and HuggingFace adapter; they register themselves."""
