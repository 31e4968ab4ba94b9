"""Pretraining strategies and modifications of BERT compared at equal compute on 2 CPU cores:
the grid for python -m pretrainx.compare (issue "Pretraining strategies compared at equal
compute").

    python -m pretrainx.compare --grid=benchmarks/grids/strategies.py --workdir=/tmp/compare
    python -m pretrainx.compare --grid=benchmarks/grids/strategies.py --workdir=/tmp/compare \
        --status

Every transformer cell pretrains for 1.5e13 training FLOPs (the BERT quickstart's 1,228
steps: about 2 minutes on 2 idle cores; equal compute whatever else runs) on the bundled
books (Pride and Prejudice, The Adventures of Sherlock Holmes) with the bundled 4k
vocabulary at about a million parameters, then fine-tunes on SST-2, MRPC, STS-B (500
rows each) and CoNLL-2003 NER (500 sentences), 3 seeds, the rate and epoch chosen on
held-out training rows. The static vectors train their recipes' own steps (their
FLOPs a step are 10^4 below a transformer's). Losses compare within one objective
(BERT and its modifications), not across objectives. The GLU cells narrow the
feed-forward to 341 (2/3 of 512) to keep the parameters, as Shazeer (2020) and Narang
et al. (2021) do. MobileBERT distils the bert cell's model (it comes first), its two
layer stages' FLOPs and the teacher's forward passes inside the budget. A full run is
hours: each cell's record (CELL/cell.json) is what a
rerun reads back, so copying the committed records of
benchmarks/results/cpu-2026-11-28-compare-strategies/cells/ into the workdir resumes.
"""

import os

_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_CONFIGS = os.path.join(_REPO, "configs")
_TEXT = os.path.join(_REPO, "pretrainx", "assets", "text")
_BOOKS = ",".join(os.path.join(_TEXT, f) for f in (
    "pg1342_pride_and_prejudice.txt", "pg1661_adventures_of_sherlock_holmes.txt"))
# a full-size recipe brought to the quickstart's data and size
_SMALL = {"data.train_files": _BOOKS, "data.eval_files": os.path.join(
    _TEXT, "pg11_alice_in_wonderland.txt"),
    "data.tokenizer": os.path.join(_REPO, "pretrainx", "assets", "spm_4k.model"),
    "data.lower_case": True, "model.num_layers": 2, "model.hidden_size": 128,
    "model.num_heads": 2, "model.mlp_dim": 512, "model.vocab_size": 4096,
    "model.dtype": "float32", "seq_len": 128, "global_batch_size": 32,
    "optimizer.learning_rate": 1e-3, "optimizer.warmup_steps": 100,
    "total_steps": 2500, "data.max_predictions_per_seq": 20}


def _config(name: str) -> str:
    return os.path.join(_CONFIGS, name)


CELLS = {
    # strategies
    "bert": {"config": _config("quickstart.py")},
    "roberta": {"config": _config("roberta.py") + ":base", "set": _SMALL},
    "spanbert": {"config": _config("spanbert.py") + ":base", "set": _SMALL},
    "albert": {"config": _config("albert.py") + ":base",
               "set": dict(_SMALL, **{"model.embedding_size": 64})},
    # ELECTRA-Small's own rate (Clark et al. 2020, table 6): at the others' 1e-3 its
    # discriminator settles on "nothing replaced" (recall 0) by step 250 and never leaves
    "electra": {"config": _config("electra.py") + ":small",
                "set": dict(_SMALL, **{"model.embedding_size": 128,
                                       "optimizer.learning_rate": 5e-4})},
    "deberta_v3": {"config": _config("deberta_v3.py") + ":xsmall", "set": _SMALL},
    "crammed": {"config": _config("crammed_quickstart.py")},
    "modernbert": {"config": _config("modernbert_quickstart.py")},
    # a strategy of phases: 128 tokens, the extension to 512, the decay on another mix
    "modernbert_lifecycle": {"config": _config("modernbert_lifecycle_quickstart.py")},
    "neobert": {"config": _config("neobert.py") + ":quickstart"},
    # the bert cell's pretrained model distilled into a MobileBERT of its width (710K
    # parameters): 400 steps a layer of transfer, the rest of the budget distillation;
    # the teacher's own pretraining is not counted (as the paper's IB-BERT is given)
    "mobilebert_from_bert": {"config": _config("mobilebert_distill.py") + ":quickstart",
                             "set": {"distill.teacher": "{workdir}/bert/pretrain"}},
    "word2vec": {"config": _config("word2vec.py") + ":cpu", "budget": {"steps": 120}},
    "glove": {"config": _config("glove.py") + ":cpu", "budget": {"steps": 8922}},
    # modifications of the BERT quickstart
    "bert_relu": {"config": _config("quickstart.py"), "set": {"model.hidden_act": "relu"}},
    "bert_geglu": {"config": _config("quickstart.py"),
                   "set": {"model.glu": True, "model.hidden_act": "gelu", "model.mlp_dim": 341}},
    "bert_swiglu": {"config": _config("quickstart.py"),
                    "set": {"model.glu": True, "model.hidden_act": "silu",
                            "model.mlp_dim": 341}},
    "bert_rmsnorm": {"config": _config("quickstart.py"), "set": {"model.norm": "rmsnorm"}},
    "bert_prenorm": {"config": _config("quickstart.py"), "set": {"model.norm_position": "pre"}},
    "bert_rotary": {"config": _config("quickstart.py"),
                    "set": {"model.position_embedding": "rotary"}},
    "bert_relative": {"config": _config("quickstart.py"),
                      "set": {"model.position_embedding": "relative"}},
    "bert_untied": {"config": _config("quickstart.py"), "set": {"model.tie_output": False}},
    # depth against width at the quickstart's 393,216 weights outside the embedding
    # and norms (12 x layers x hidden^2 with the feed-forward at 4 x hidden)
    "bert_deep_narrow": {"config": _config("quickstart.py"),
                         "set": {"model.num_layers": 8, "model.hidden_size": 64,
                                 "model.mlp_dim": 256}},
    "bert_wide_shallow": {"config": _config("quickstart.py"),  # 388,800
                          "set": {"model.num_layers": 1, "model.hidden_size": 180,
                                  "model.mlp_dim": 720}},
    "bert_shared_layers": {"config": _config("quickstart.py"),
                           "set": {"model.share_layers": True, "model.num_layers": 4}},
}
BUDGET = {"flops": 1.5e13}
TASKS = {
    "sst2_500": {"task": "sst2", "rows": 500, "held_out": 100, "seq_len": 64, "epochs": 5,
                 "batch": 16},
    "mrpc_500": {"task": "mrpc", "rows": 500, "held_out": 100, "seq_len": 128,
                 "epochs": 5, "batch": 16},
    "stsb_500": {"task": "stsb", "rows": 500, "held_out": 100, "seq_len": 64,
                 "epochs": 5, "batch": 16},
    "conll_500": {"task": "conll2003", "rows": 500, "held_out": 100, "seq_len": 64,
                  "epochs": 5, "batch": 16},
}
SEEDS = [0, 1, 2]
LEARNING_RATES = [3e-4, 1e-3]
GLUE_DIR = "../../../shared/data/glue"
