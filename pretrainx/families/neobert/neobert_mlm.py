"""NeoBERT's objective: ModernBERT's (masked LM only, on [CLS] piece [SEP] rows of the
documents, masks drawn at batch time, the decoder only at the masked positions) with
NeoBERT's network, at 20% masking."""

from pretrainx.families.modernbert import modernbert_mdlm, modernbert_mlm
from pretrainx.families.neobert import model as neobert


class NeoBertMlm(modernbert_mlm.ModernBertMlm):
    title = "NeoBERT"
    network = neobert.NeoBertForMaskedLM
    flops = staticmethod(neobert.flops_per_token)
    flops_formula = "3 * (L * 2*(4*h^2 + 3*h*mlp) + L*4*h*seq + P*2*h*V / seq)"


class NeoBertMdlm(modernbert_mdlm.ModernBertMdlm):
    """Masked diffusion (objectives/mdlm.py) with NeoBERT's network: ModernBERT's MDLM
    rows and loss."""
    title = "NeoBERT (MDLM)"
    network = neobert.NeoBertForMaskedLM
    flops = staticmethod(neobert.flops_per_token)
    flops_formula = NeoBertMlm.flops_formula
