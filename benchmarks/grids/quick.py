"""A quick comparison (minutes on 2 CPU cores): the BERT quickstart, two modifications of it,
ModernBERT's quickstart and GloVe, 2 minutes of pretraining each, fine-tuned on SST-2's
first 500 training rows (100 held out to choose the rate and epoch), 3 seeds.

    python -m pretrainx.compare --grid=benchmarks/grids/quick.py --workdir=/tmp/compare-quick

benchmarks/grids/strategies.py is the full grid.
"""

import os

_CONFIGS = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "configs")

CELLS = {
    "bert": {"config": os.path.join(_CONFIGS, "quickstart.py")},
    "bert_relu": {"config": os.path.join(_CONFIGS, "quickstart.py"),
                  "set": {"model.hidden_act": "relu"}},
    "bert_untied": {"config": os.path.join(_CONFIGS, "quickstart.py"),
                    "set": {"model.tie_output": False}},
    "modernbert": {"config": os.path.join(_CONFIGS, "modernbert_quickstart.py")},
    "glove": {"config": os.path.join(_CONFIGS, "glove.py") + ":cpu"},
}
BUDGET = {"minutes": 2}
TASKS = {"sst2_500": {"task": "sst2", "rows": 500, "held_out": 100, "seq_len": 64,
                      "epochs": 5, "batch": 16}}
SEEDS = [0, 1, 2]
LEARNING_RATES = [3e-4, 1e-3]
GLUE_DIR = "../../../shared/data/glue"
