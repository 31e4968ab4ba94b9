"""`--describe` prints each objective's FLOPs formula as text beside the number the code
computes for MFU; here the text is evaluated with the recipe's numbers and held to the
code, so the two cannot drift apart."""

import re
import types

import pytest

from conftest import REPO, load_config

# every recipe in configs/ as shipped, and the sizes a recipe's argument picks where the
# default is another: every formula is arithmetic over the model's keys below and the
# objective's flops_symbols (fine-tuning recipes have no pretraining FLOPs formula)
RECIPES = [(p.name, None) for p in sorted((REPO / "configs").glob("*.py"))
           if not p.name.startswith("finetune_")] + [
    ("gpt2.py", "small"), ("t5.py", "v1_1_small"), ("ul2.py", "quickstart"),
    ("t5gemma.py", "quickstart")]


def _expression(formula: str) -> str:
    """The formula up to its first top-level comma (what follows names the symbols),
    with ^ as Python's power."""
    depth = 0
    for i, ch in enumerate(formula):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            formula = formula[:i]
            break
    return formula.replace("^", "**")


def _symbols(cfg, phase) -> dict:
    m = cfg.model
    every = m.get("global_attn_every_n_layers", 1)  # ModernBERT's local/global layers
    depth = m.get("num_layers", 0)  # word vectors have no layers
    return {"min": min, "G": -(-depth // every), "W": m.get("local_attention", 0),
            "L": depth, "L_enc": depth,
            "L_dec": m.get("num_decoder_layers", depth), "h": m.get("hidden_size"),
            "d": m.get("hidden_size"), "mlp": m.get("mlp_dim"), "V": m.vocab_size, "seq": phase.seq_len,
            "S": phase.seq_len, "P": phase.max_predictions,
            "E": m.get("embedding_size", 0) or m.get("hidden_size")}


@pytest.mark.parametrize("name,arg", RECIPES, ids=[n for n, _ in RECIPES])
def test_the_printed_formula_is_the_computed_flops(name, arg):
    from pretrainx import config as config_lib
    from pretrainx import objectives
    cfg = load_config(name, arg)
    objective = objectives.build(cfg, tokenizer=None)
    if cfg.objective == "distil":  # the teacher's forward pass counts: BERT of its vocabulary
        teacher = "quickstart.py" if name.startswith("distil_quickstart") else "bert_base.py"
        objective.teacher = types.SimpleNamespace(model=load_config(teacher).model)
    for phase in config_lib.phases(cfg):
        text = _expression(objective.flops_formula)
        symbols = {**_symbols(cfg, phase), **getattr(objective, "flops_symbols",
                                                      lambda phase: {})(phase)}
        assert set(re.findall(r"[A-Za-z_]+", text)) <= set(symbols), text
        printed = eval(text, {}, symbols)  # noqa: S307 (our own text)
        assert printed == pytest.approx(objective.flops_per_token(phase), rel=1e-9), (
            name, phase.index, objective.flops_formula)
