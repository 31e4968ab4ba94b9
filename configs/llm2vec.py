"""LLM2Vec's first two steps (BehnamGhader et al. 2024) on a decoder: attention made
bidirectional (model.causal=False) and masked next-token prediction (MNTP), continued
from a causal-LM run or a released model.

    python -m pretrainx.main --config=configs/gemma3.py:quickstart --workdir=/tmp/gemma3
    python -m pretrainx.main --config=configs/llm2vec.py:quickstart --workdir=/tmp/mntp \
        --config.init_from=/tmp/gemma3
    python -m pretrainx.main --config=configs/llm2vec.py:gemma3 --workdir=gs://BUCKET/mntp \
        --config.init_from=/models/gemma-3-1b-pt --config.data.train_files='/data/*.jsonl'

`FAMILY` (gemma3, qwen3, gpt2) is the paper's MNTP run for that family's decoder
(pretrainx/objectives/mntp.py: 20% of tokens, 80/10/10, 1,000 steps of 32 x 512, 5e-5);
with init_from the model keys and tokenizer come from the folder, and the attention
stays bidirectional. `quickstart` continues configs/gemma3.py:quickstart's run for 200
steps on the same books at a rate a 3M model trained for 300 steps can use (1e-3); the
masked-token loss falls from where the causal model, reading both ways for the first
time, starts.
"""

import importlib.util
import os

from pretrainx.objectives import default_config


def _quickstart_of(name: str, size: str):
    """configs/NAME.py:SIZE, this file's sibling."""
    path = os.path.join(os.path.dirname(os.path.realpath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"configs_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.get_config(size)


def get_config(which: str = "gemma3"):
    family = "gemma3" if which == "quickstart" else which
    objective = "causal_lm" if family == "gpt2" else f"{family}_clm"
    if which != "quickstart":
        c = default_config(f"{family}_mntp")
        c.model.dtype = "bfloat16"
        return c
    base = _quickstart_of("gemma3", "quickstart")
    assert base.objective == objective
    c = default_config("gemma3_mntp")
    c.model = base.model
    c.model.causal = False
    c.data.update(train_files=base.data.train_files, eval_files=base.data.eval_files,
                  tokenizer=base.data.tokenizer)
    c.update(total_steps=200, global_batch_size=16, seq_len=64, log_every=50, eval_every=100,
             eval_steps=8, checkpoint_every=100, keep_checkpoints=2)
    c.optimizer.learning_rate = 1e-3
    return c
