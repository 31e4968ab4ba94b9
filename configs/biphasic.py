"""CLM then MLM in one run (Gisserot-Boukhlef et al. 2025, "Should We Still Pretrain
Encoders with Masked Language Modeling?"): the first part of the steps trains the model
as a decoder (next-token prediction, causal attention), the rest as an encoder (MLM,
bidirectional attention), one set of parameters and one optimizer state throughout.

    python -m pretrainx.main --config=configs/biphasic.py --workdir=/tmp/biphasic
    python -m pretrainx.main --config=configs/biphasic.py:0.25 --workdir=/tmp/biphasic25

The model is Ettin's at CPU size (configs/ettin_quickstart.py: ModernBERT, 3 layers x
128, whose encoder and decoder share every parameter), on the bundled novels, 1,500
steps. `:FRACTION` is the CLM share of the steps: the paper compares 25%, 50% and 75%
CLM against MLM alone at equal steps and finds every split above MLM alone; 0.5 (the
default) is the middle of that grid. The phases: `clm` (objective modernbert_clm,
model.causal=True, the last token pooled for classifiers) and `mlm` (modernbert,
causal False, [CLS] pooled), with one learning-rate schedule over both. Drift, named:
the paper's models are EuroBERT's (Llama-style, RoPE 10,000, 2,048 tokens) trained on
FineWeb-Edu with a 40% MLM rate; here ModernBERT's architecture and 30% rate, as the
family trains. Measured (MLM accuracy, the compare grid's tasks, 3 seeds, against MLM
and CLM alone): benchmarks/biphasic.py and docs/recipes.md's CLM-then-MLM section.
"""

from pretrainx.config import sibling_config
from pretrainx.objectives import default_config


def get_config(clm_fraction: str = "0.5"):
    share = float(clm_fraction)
    if not 0.0 < share < 1.0:
        raise ValueError(f"configs/biphasic.py:{clm_fraction}: the CLM share of the steps "
                         "must be in (0, 1)")
    c = sibling_config(__file__, "ettin_quickstart.py")
    decoder, encoder = default_config("modernbert_clm"), default_config("modernbert")
    c.objective = decoder.objective  # the first phase's; the run's model starts causal
    c.model.causal = decoder.model.causal
    c.model.classifier_pooling = decoder.model.classifier_pooling
    c.phase_order = "clm,mlm"
    c.phases.clm = dict(steps=int(round(share * c.total_steps)))
    c.phases.mlm = dict(objective=encoder.objective,
                        model=dict(causal=encoder.model.causal,
                                   classifier_pooling=encoder.model.classifier_pooling))
    return c
