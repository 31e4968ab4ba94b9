"""XLM-R Base (Conneau et al. 2020): RoBERTa's objective over one hundred languages.

    python -m pretrainx.main --config=configs/xlmr_base.py --workdir=gs://BUCKET/xlmr_base \
        --config.data.train_files='/data/cc100/en/*.txt;/data/cc100/de/*.txt;...' \
        --config.data.train_source_names=en,de,... \
        --config.data.tokenizer=/data/xlmr/spiece.model

    python -m pretrainx.main --config=configs/xlmr_base.py --describe   # 278,295,186 parameters

What the paper sets (section 3 and 4): RoBERTa-base's encoder (12 layers, 768 wide, 12
heads, 514 positions, post-LN) with a 250,002-piece SentencePiece unigram vocabulary
(250K pieces + fairseq's specials) and no language embeddings; MLM only with dynamic
masking on 512-token rows; languages sampled with probability ~ size^0.3
(`data.mixing_alpha=0.3`: sizes are the sources' token counts, counted once, or read
from `python -m pretrainx.data prepare`'s manifest); batch 8,192, 1.5M updates.

Parameters: --describe prints 278,295,186, exactly what transformers counts for
XLMRobertaForMaskedLM (the MLM head's transform and bias included); the paper's
"270M" leaves the head out. 192M of them are the embedding table.

Drift, named: the paper does not state its learning rate or warmup; they stay
RoBERTa-base's (Adam b2 0.98, eps 1e-6, peak 6e-4, 24K warmup, linear decay). Train a
vocabulary for your languages with `python -m pretrainx.tokenizer train --alpha=0.3
--input='en/*.txt;de/*.txt;...' --vocab_size=250000 --lower_case=false`
(it writes [PAD] [UNK] [CLS] [SEP] [MASK] first, not fairseq's <s> <pad> </s> <unk>
layout: the model's shape is the same). A run exports as XLMRobertaForMaskedLM, and
a released XLM-R folder continues with --config.init_from=/models/xlm-roberta-base (its
sentencepiece.bpe.model read in fairseq's ids).
"""

from pretrainx.config import sibling_config


def get_config():
    c = sibling_config(__file__, "roberta.py", "base")
    c.total_steps = 1_500_000
    c.model.vocab_size = 250_002
    c.data.lower_case = False
    c.data.mixing_alpha = 0.3
    return c
