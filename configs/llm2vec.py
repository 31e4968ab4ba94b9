"""LLM2Vec's first two steps (BehnamGhader et al. 2024) on a decoder: attention made
bidirectional (model.causal=False) and masked next-token prediction (MNTP), continued
from a causal-LM run or a released model.

    python -m pretrainx.main --config=configs/gemma3.py:quickstart --workdir=/tmp/gemma3
    python -m pretrainx.main --config=configs/llm2vec.py:quickstart --workdir=/tmp/mntp \
        --config.init_from=/tmp/gemma3
    python -m pretrainx.main --config=configs/llm2vec.py:gemma3 --workdir=gs://BUCKET/mntp \
        --config.init_from=/models/gemma-3-1b-pt --config.data.train_files='/data/*.jsonl'

`FAMILY` (gemma3, qwen3, gpt2, modernbert: Ettin's decoder) is the paper's MNTP run for
that family's decoder
(pretrainx/objectives/mntp.py: 20% of tokens, 80/10/10, 1,000 steps of 32 x 512, 5e-5);
with init_from the model keys and tokenizer come from the folder, and the attention
stays bidirectional. `quickstart` continues configs/gemma3.py:quickstart's run for 200
steps on the same books at a rate a 3M model trained for 300 steps can use (1e-3); the
masked-token loss falls from where the causal model, reading both ways for the first
time, starts. `ettin_quickstart` does the same from configs/ettin_quickstart.py:decoder's
run (its ModernBERT [MASK] piece, the states mean-pooled).
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


# quickstarts: (the causal run continued, its config's argument, the MNTP objective)
QUICKSTARTS = {"quickstart": ("gemma3", "quickstart", "gemma3_mntp"),
               "ettin_quickstart": ("ettin_quickstart", "decoder", "modernbert_mntp")}


def get_config(which: str = "gemma3"):
    if which not in QUICKSTARTS:
        c = default_config(f"{which}_mntp")
        c.model.dtype = "bfloat16"
        return c
    name, arg, objective = QUICKSTARTS[which]
    base = _quickstart_of(name, arg)
    c = default_config(objective)
    pooling = c.model.classifier_pooling if "classifier_pooling" in c.model else None
    c.model = base.model
    c.model.causal = False
    if pooling:
        c.model.classifier_pooling = pooling
    c.data.update(train_files=base.data.train_files, eval_files=base.data.eval_files,
                  tokenizer=base.data.tokenizer)
    c.update(total_steps=200, global_batch_size=16, seq_len=64, log_every=50, eval_every=100,
             eval_steps=8, checkpoint_every=100, keep_checkpoints=2)
    c.optimizer.learning_rate = 1e-3
    if "max_predictions_per_seq" in c.data:  # an encoder's key MNTP leaves unread
        c.data.max_predictions_per_seq = min(c.data.max_predictions_per_seq, c.seq_len)
    return c
