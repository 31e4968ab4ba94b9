"""DeBERTa-base with the masked-LM objective and the enhanced mask decoder (He et al.
2021; v2's 128K SentencePiece vocabulary): families/deberta/deberta_mlm.py has the recipe.

    python -m pretrainx.main --config=configs/deberta_mlm.py --workdir=gs://BUCKET/deberta_mlm \
        --config.data.train_files='/data/corpus/*.txt' --config.data.tokenizer=/data/deberta/spm.model

12 layers of 768, relative positions in 256 log buckets up to 512, no absolute
positions in the encoder; 1M steps of 2K x 512 tokens at 2e-4. The paper reports
MNLI-m 88.8 for DeBERTa-base (MLM with the EMD, 78G of text).
"""

from pretrainx.objectives import default_config


def get_config():
    c = default_config("deberta_mlm")
    c.model.dtype = "bfloat16"  # compute; parameters and optimizer state stay float32
    c.mesh.data = 1
    c.mesh.fsdp = -1
    return c
