"""ELECTRA-Base pretraining recipe (Clark et al. 2020): see configs/electra.py.

    python -m pretrainx.main --config=configs/electra_base.py --workdir=gs://BUCKET/electra_base \
        --config.data.train_files='/data/wiki_books/*.txt' \
        --config.data.tokenizer=/data/bert-base-uncased/vocab.txt

Parameters: 109,483,009 in the discriminator (BERT-Base's encoder without the pooler,
108,891,648, + the replaced-token head), + a generator of 1/3 the width (L12/H256/A4/
I1024, its E 768 -> 256 projection and MLM head: 9,903,418; the embeddings are the
discriminator's). 766K steps of 256 x 512 tokens, lr 2e-4, warmup 10K.
"""

from pretrainx.config import sibling_config


def get_config():
    return sibling_config(__file__, "electra.py", "base")
