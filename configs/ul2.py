"""UL2 (Tay et al. 2022): T5's encoder-decoder trained on the mixture of seven denoisers.

    python -m pretrainx.main --config=configs/ul2.py:quickstart --workdir=/tmp/ul2
    python -m pretrainx.data --config=configs/ul2.py:quickstart --stats
    python -m pretrainx.plan --config=configs/ul2.py:base --topology=v5e:4x4

The mixture (pretrainx/objectives/ul2.py, objective t5_ul2): R (spans of 3 and 8 at
15%), X (3 and 8 at 50%, 64 at 15% and 50%) and S (PrefixLM, the split uniform), each
example's inputs opened by its mode token [NLU], [NLG] or [S2S]; R and X 40% each and
S 20% (the paper's section 4.5), packed as T5's into rows of 512 inputs and 512 targets.

The argument:

* `20b`: the paper's UL2 20B (google/ul2's config): 32 + 32 layers, d_model 4096, 16
  heads of 256, gated-SiLU feed-forward of 16,384, untied output, T5's 32,000-piece
  vocabulary (32,128 rows), no dropout; batch 1,024 of 512 + 512 tokens, Adafactor
  with T5X's inverse square root schedule, 2^21 steps (about 1T input tokens; the
  released model ran 2.65M).
* `base`, `small`, `large`, `v1_1_base`, ...: T5's sizes (configs/t5.py) on the mixture,
  for the deviceless plan; the recipe's batch of 1,024.
* `quickstart`: configs/t5_quickstart.py's model (2 + 2 layers x 256) on the bundled
  novels with a 4,000-piece vocabulary that keeps the three mode tokens whole, rows of
  256 + 256, 300 steps of 8 rows: trains on a CPU in minutes.
* `prefixlm`: the quickstart on S alone without mode tokens: the encoder-decoder's
  PrefixLM (T5's prefix_lm objective; RedLLM's), the inputs a uniform prefix.
"""

from pretrainx.config import sibling_config
from pretrainx.data import bundled
from pretrainx.objectives import default_config


def _adafactor(c) -> None:
    c.optimizer.name = "adafactor"
    c.optimizer.schedule = "rsqrt"
    c.optimizer.learning_rate = 0.01  # x sqrt(10^4 / max(step, 10^4))
    c.optimizer.warmup_steps = 10_000
    c.optimizer.weight_decay = 0.0
    c.optimizer.grad_clip = 0.0


def get_config(size: str = "20b"):
    c = default_config("t5_ul2")
    if size == "prefixlm":
        c = get_config("quickstart")
        c.data.update(denoisers="S", denoiser_weights="1", mode_tokens="")
        return c
    if size == "quickstart":
        base = sibling_config(__file__, "t5_quickstart.py")
        c.model = base.model
        c.update(total_steps=300, global_batch_size=8, seq_len=256, log_every=25,
                 eval_every=150, eval_steps=4, checkpoint_every=150, keep_checkpoints=2)
        c.data.targets_length = 256
        c.data.num_sentinels = 100  # X at 3 x 50% cuts at most 64 spans from 256 inputs
        c.optimizer.update(learning_rate=3e-3, warmup_steps=30)
        bundled.use_books(c.data, tokenizer="spm_ul2_4k.model")
        return c
    c.update(global_batch_size=1024, seq_len=512)
    c.data.targets_length = 512
    c.mesh.data, c.mesh.fsdp = 1, -1
    c.model.dtype = "bfloat16"
    if size == "20b":
        c.model.update(num_layers=32, num_decoder_layers=32, hidden_size=4096, num_heads=16,
                       head_dim=256, mlp_dim=16384, feed_forward="gated-silu",
                       tie_output=False, dropout_rate=0.0, vocab_size=32128)
        c.total_steps = 2 ** 21
        _adafactor(c)
        return c
    t5 = sibling_config(__file__, "t5.py", size)  # its message names the sizes it knows
    c.model = t5.model
    c.optimizer = t5.optimizer
    return c
