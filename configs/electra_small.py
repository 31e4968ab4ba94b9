"""ELECTRA-Small pretraining recipe (Clark et al. 2020): see configs/electra.py.

    python -m pretrainx.main --config=configs/electra_small.py --workdir=gs://BUCKET/electra_small \
        --config.data.train_files='/data/wiki_books/*.txt' \
        --config.data.tokenizer=/data/bert-base-uncased/vocab.txt

Parameters: 13,549,057 in the discriminator (HF's ElectraForPreTraining of
google/electra-small-discriminator: 13.5M; the paper's 14M), 13,483,008 of them in
the encoder that fine-tuning takes, + 647,162 in the generator (L12/H64/A1/I256
and its MLM head; the embeddings are the discriminator's). 1M steps of 128 x 128
tokens, lr 5e-4, warmup 10K; the paper trained it on one V100 in 4 days.
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "electra.py", "small")
