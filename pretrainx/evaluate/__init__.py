"""Scoring a trained model without training it further: `heldout` (eval loss and
metrics of a workdir's newest checkpoint, python -m pretrainx.evaluate), `probe` (the
downstream probes a pretraining run starts: fine-tuning, cloze, retrieval,
similarity), `cloze`, `retrieval`, `similarity` (STS-style correlation) and
`word_eval` (static word vectors on word similarity and analogies)."""
