"""T5Gemma (Zhang et al. 2025): an encoder-decoder of Gemma 2 blocks on UL2's mixture.

    python -m pretrainx.main --config=configs/t5gemma.py:quickstart --workdir=/tmp/t5gemma
    python -m pretrainx.main --config=configs/t5gemma.py:quickstart \
        --config.data.denoisers=S --config.data.denoiser_weights=1 \
        --config.data.mode_tokens= --workdir=/tmp/t5gemma_prefixlm

The argument is ENCODER-DECODER in Gemma 2's sizes (2b-2b, 9b-2b, 9b-9b: the released
pairs; 2B is Gemma 2 2B's shape, 26 layers of 2,304, 9B is Gemma 2 9B's, 42 layers of
3,584; both 256,000 pieces, tied output, soft-caps 50 and 30, windows of 4,096), or
`quickstart`: 2 + 2 layers x 128 with a 4,000-piece vocabulary that keeps UL2's mode
tokens whole, rows of 256 + 256, 300 steps of 8 rows on the bundled novels (a CPU, in
minutes). The objective is t5gemma_ul2: UL2's mixture, or its S denoiser alone
(PrefixLM, as above). T5Gemma adapts released Gemma 2 decoders (init_from); the sizes
here give the shapes it adapts into.
"""

from pretrainx.data import bundled
from pretrainx.objectives import default_config

# Gemma 2's shapes: layers, width, feed-forward, heads, key/value heads
GEMMA2 = {"2b": (26, 2304, 9216, 8, 4), "9b": (42, 3584, 14336, 16, 8)}


def _stack(m, prefix: str, shape) -> None:
    layers, width, mlp, heads, kv = shape
    m[("num_decoder_layers" if prefix else "num_layers")] = layers
    m.update({prefix + "hidden_size": width, prefix + "mlp_dim": mlp,
              prefix + "num_heads": heads, prefix + "num_kv_heads": kv,
              prefix + "head_dim": 256 if width > 128 else 32,
              prefix + "query_pre_attn_scalar": 256 if width > 128 else 32})


def get_config(arg: str = "2b-2b"):
    c = default_config("t5gemma_ul2")
    if arg == "quickstart":
        shape = (2, 128, 256, 4, 2)
        _stack(c.model, "", shape)
        _stack(c.model, "decoder_", shape)
        c.model.update(vocab_size=4224, sliding_window=64, decoder_sliding_window=64,
                       dtype="float32")
        c.update(total_steps=300, global_batch_size=8, seq_len=256, log_every=25,
                 eval_every=150, eval_steps=4, checkpoint_every=150, keep_checkpoints=2)
        c.data.targets_length = 256
        c.data.num_sentinels = 100  # X at 3 x 50% cuts at most 64 spans from 256 inputs
        c.optimizer.update(learning_rate=3e-3, warmup_steps=30)
        bundled.use_books(c.data, tokenizer="spm_ul2_4k.model")
        return c
    encoder, _, decoder = arg.partition("-")
    if encoder not in GEMMA2 or decoder not in GEMMA2:
        raise ValueError(f"configs/t5gemma.py:{arg}: expected ENCODER-DECODER from "
                         f"{', '.join(GEMMA2)} (2b-2b, 9b-2b, 9b-9b) or quickstart")
    _stack(c.model, "", GEMMA2[encoder])
    _stack(c.model, "decoder_", GEMMA2[decoder])
    c.model.dtype = "bfloat16"
    c.mesh.data, c.mesh.fsdp = 1, -1
    return c
