"""What a TPU chip's compiler says an encoder layer's matmuls alone cost: the ceiling
that a train step built on them cannot pass by the compiler's own cycles.

    python benchmarks/tpu_matmuls.py [--topologies=v5e:1x1,v6e:1x1] \
                                     [--models=base,large] [--tokens=32768] [--seq_len=128]

For each chip and model width it compiles, deviceless and alone, the forward and
backward (both gradients) of each Dense of a layer (the fused QKV projection, the
output projection, the MLP's two) and of attention's two batched matmuls (scores
and values, one head of 64), in bfloat16 with float32 accumulation, at `--tokens`
tokens a chip (the default: the LAMB recipe's micro-batch of 256 x 128 on each of 16
chips). It prints the compiler's summed per-instruction cycles at the chip's clock
against the same FLOPs at the chip's peak, one markdown row each, then one JSON
object. A layer of the real step also moves its activations through norms, GELU,
dropout and softmax; these rows leave all of that out, so its MFU by the same
cycles is at most the "layer's matmuls" row. Needs libtpu. --tiny: width 64 and 256
tokens (the smoke test's size: it proves the script runs, not a figure).
"""

import argparse
import json
import os

os.environ.setdefault("JAX_PLATFORMS", "cpu")
os.environ.setdefault("ALLOW_MULTIPLE_LIBTPU_LOAD", "1")

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import SingleDeviceSharding  # noqa: E402

from pretrainx.train import chips  # noqa: E402
from pretrainx.plan import hlo_bytes
from pretrainx.plan import planner as plan

MODELS = {"base": (768, 3072), "large": (1024, 4096), "tiny": (64, 256)}  # width, MLP
HEAD = 64


def _dense(x, w):
    return jnp.dot(x, w, preferred_element_type=jnp.float32).astype(jnp.bfloat16)


def _scores(q, k):
    return jnp.einsum("bqd,bkd->bqk", q, k,
                      preferred_element_type=jnp.float32).astype(jnp.bfloat16)


def _values(p, v):
    return jnp.einsum("bqk,bkd->bqd", p, v,
                      preferred_element_type=jnp.float32).astype(jnp.bfloat16)


def _forward_and_backward(f):
    def both(a, b, g):  # the output and both gradients, as a train step needs them
        y, vjp = jax.vjp(f, a, b)
        return (y, *vjp(g))
    return both


def matmuls(width, mlp, tokens, seq_len):
    """(name, f, operand shapes, output shape, FLOPs of the forward, is a Dense) for one
    layer."""
    heads, seqs = width // HEAD, tokens // seq_len
    per_head = (seqs * heads, seq_len, HEAD)
    scores = (seqs * heads, seq_len, seq_len)
    dense = [("qkv", width, 3 * width), ("attention out", width, width),
             ("mlp in", width, mlp), ("mlp out", mlp, width)]
    rows = [(name, _dense, [(tokens, k), (k, n)], (tokens, n), 2 * tokens * k * n, True)
            for name, k, n in dense]
    flops = 2 * seqs * heads * seq_len * seq_len * HEAD
    rows += [("attention scores", _scores, [per_head, per_head], scores, flops, False),
             ("attention values", _values, [scores, per_head], per_head, flops, False)]
    return rows


def cycles_seconds(device, f, shapes, out_shape, clock_hz):
    sharding = SingleDeviceSharding(device)
    args = [jax.ShapeDtypeStruct(s, jnp.bfloat16, sharding=sharding)
            for s in (*shapes, out_shape)]
    with plan.xla_flags_libtpu_knows():
        _, text = hlo_bytes.compile_with_text(jax.jit(_forward_and_backward(f)).lower(*args))
    if text is None:
        raise SystemExit("this libtpu printed no program to read the cycles from")
    counted = hlo_bytes.traffic(text, 0.0, 0.0, 0.0, 1.0, 1.0, clock_hz=clock_hz)
    return counted["compiler_cycles_seconds"]  # the sum over its instructions, at the clock


def _row(out, generation, topology, model, name, seconds, at_peak, shapes=None):
    """One priced matmul (with its shapes) or sum (in bold): printed, appended to
    `out` and returned."""
    row = {"topology": topology, "model": model, "matmul": name,
           **({"shapes": shapes} if shapes else {}), "cycles_seconds": seconds,
           "peak_seconds": at_peak, "of_peak": at_peak / seconds}
    label, ratio = ((f"{name} {shapes}", f"{at_peak / seconds:.3f}") if shapes else
                    (f"**{name}**", f"**{at_peak / seconds:.3f}**"))
    print(f"| {generation} | {model} | {label} | {seconds * 1e3:.3f} ms "
          f"| {at_peak * 1e3:.3f} ms | {ratio} |", flush=True)
    out.append(row)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--topologies", default="v5e:1x1,v6e:1x1")
    ap.add_argument("--models", default="base,large")
    ap.add_argument("--tokens", type=int, default=32768)
    ap.add_argument("--seq_len", type=int, default=128)
    ap.add_argument("--tiny", action="store_true")
    args = ap.parse_args()
    models = ["tiny"] if args.tiny else args.models.split(",")
    tokens = 256 if args.tiny else args.tokens
    seq_len = min(args.seq_len, tokens)
    print("| chip | model | matmul (forward + backward) | by the cycles | at peak | of peak |")
    print("|---|---|---|---|---|---|")
    out = []
    for topology in args.topologies.split(","):
        devices, generation, _ = plan.topology_devices(topology)
        chip = chips.CHIPS[generation]
        for model in models:
            width, mlp = MODELS[model]
            priced = []  # (row, is a Dense)
            for name, f, shapes, out_shape, flops, dense in matmuls(width, mlp, tokens,
                                                                   seq_len):
                seconds = cycles_seconds(devices[0], f, shapes, out_shape, chip.clock_hz)
                at_peak = 3 * flops / chip.peak_flops  # forward, and a gradient for each
                priced.append((_row(out, generation, topology, model, name, seconds,
                                    at_peak, shapes), dense))
            for label, wanted in (("the four Dense", lambda d: d),
                                  ("the layer's matmuls", lambda d: True)):
                parts = [r for r, dense in priced if wanted(dense)]
                _row(out, generation, topology, model, label,
                     sum(r["cycles_seconds"] for r in parts),
                     sum(r["peak_seconds"] for r in parts))
    print(json.dumps({"tokens": tokens, "seq_len": seq_len, "rows": out,
                      "note": "the compiler's cycle estimates, deviceless; not measurements"}))


if __name__ == "__main__":
    main()
