"""What moves BERT-Base's MFU on one GPU: our train step with one lever changed at a
time, and a profile of the plain step that says where its time goes.

    python benchmarks/gpu_levers.py [--levers=sync,async,trace,b512,cudnn,no_dropout,
                                     xla_lhs,trace_ops] [--size=bert_base] [--windows=5]
                                    [--steps=10] [--dtype=bfloat16] [--allow_cpu]
                                    [--budget_s=S] [--json_out=FILE] [--trace_dir=DIR]

Each lever is ours alone (no reference side; benchmarks/gpu.py has those), bf16, timed
over --windows windows of --steps steps after two warm-up steps (median, min, max):

  sync        the step as benchmarks/gpu.py times it: the loss read after every step
  async       the same compiled step, read once per window (as a train loop that logs
              every N steps runs): the host's dispatch overlaps the device's work
  trace       a jax.profiler trace of 3 async steps into --trace_dir (with a Perfetto
              JSON), summed here by device kernel: the top kernels and their share
  no_dropout  every dropout rate 0: what dropout's masks cost in all
  cudnn       attention through cuDNN's fused kernel (applies no attention dropout)
  b512        four times the batch (512 x 128)
  xla_lhs     async under XLA_FLAGS=--xla_gpu_enable_latency_hiding_scheduler=true
              (a child process: XLA reads its flags once)
  trace_ops   the trace again in a child without CUDA graphs (in a graph every kernel
              is the graph's; without, each names its HLO op) and the step's optimized
              HLO dumped beside it (--trace_dir/ops), which maps a fusion to its lines;
              the device's kernels summed by op and by kind (matmul, dropout, ...)

Every lever after `sync` is async, so each compares with `async`. A lever is skipped
(and said so) when the time left is less than the slowest lever took. --allow_cpu runs
on the CPU: at the tiny size a smoke test; with `--levers=trace_ops --dtype=float32
--size=t5_small` (or gpt2_small, base) the profile of the step benchmarks/train_step.py
times, each kernel with its op (docs/benchmarks.md reads T5-small's and GPT-2 small's).
"""

import argparse
import glob
import gzip
import json
import os
import subprocess
import sys
import time

os.environ.setdefault("JAX_PLATFORMS", "cuda")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import jax  # noqa: E402

import gpu  # noqa: E402
import train_step as bench  # noqa: E402
from pretrainx.train import metrics as metrics_lib  # noqa: E402

LEVERS = ("sync", "async", "trace", "b512", "cudnn", "no_dropout", "xla_lhs", "trace_ops")
_STEPS = {}  # sync, async and trace share one compiled step
CHILD_FLAGS = {"xla_lhs": "--xla_gpu_enable_latency_hiding_scheduler=true",
               "trace_ops": "--xla_gpu_enable_command_buffer= --xla_dump_to={hlo} "
                            "--xla_dump_hlo_module_re=.*step.* --xla_dump_hlo_as_text"}
NO_DROPOUT = {"model.dropout_rate": 0.0, "model.attention_dropout_rate": 0.0}


def trace_events(path: str) -> list:
    """The events of a Perfetto trace (.trace.json.gz) as jax.profiler writes it."""
    with gzip.open(path, "rt", encoding="utf-8") as f:
        events = json.load(f)
    return events.get("traceEvents", events) if isinstance(events, dict) else events


def device_kernels(trace_dir: str, top: int = 12) -> dict:
    """Sums the Perfetto trace's complete events by line (process / thread) and name:
    {line: {"us": total, "top": [(name, us, share of the line, count)...]}} for the
    device's lines (every line on a CPU, where none is a device's)."""
    files = sorted(glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"),
                             recursive=True))
    if not files:
        return {"error": f"no *.trace.json.gz under {trace_dir}"}
    events = trace_events(files[-1])
    process, thread = _names(events, "process_name"), _names(events, "thread_name")
    lines = {}
    for e in _device_only(events):
        tid = (e["pid"], e.get("tid"))
        line = f"{process.get(e['pid'], e['pid'])} / {thread.get(tid, e.get('tid'))}"
        us, count = lines.setdefault(line, {}).get(e["name"], (0.0, 0))
        lines[line][e["name"]] = (us + float(e.get("dur", 0)), count + 1)
    summary = {"file": files[-1]}
    for line, totals in sorted(lines.items(), key=lambda kv: -sum(u for u, _ in kv[1].values())):
        whole = sum(us for us, _ in totals.values())
        ranked = sorted(totals.items(), key=lambda kv: -kv[1][0])[:top]
        summary[line] = {"us": round(whole, 1), "top": [
            (n, round(us, 1), round(us / whole, 4) if whole else 0.0, c)
            for n, (us, c) in ranked]}
    return summary


def hlo_sources(text: str) -> dict:
    """{kernel name: "op_name (file:line)"} from an optimized HLO module's text: each
    instruction's own metadata, or for a fusion without any its fused computation's
    (its root's, else the first instruction's that has some), else what it makes (its
    shape); " [+dot]" marks a fusion that holds a matrix multiply. Kernels are named
    after their instruction, with '_' for '.' on a GPU."""
    import re
    computation, roots, own, calls, shapes, dots, library_dots = None, {}, {}, {}, {}, set(), set()
    for line in text.splitlines():
        head = re.match(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if head and "=" not in line.split("{")[0]:
            computation = head.group(1)
            continue
        inst = re.match(r"^\s*(ROOT\s+)?%?([\w.\-]+) = ", line)
        if not inst:
            continue
        meta = re.search(r'op_name="([^"]*)"(?:.*?source_file="([^"]*)")?'
                         r'(?:.*?source_line=(\d+))?', line)
        where = meta.group(1) if meta else ""
        if meta and meta.group(2):
            where += f" ({os.path.basename(meta.group(2))}:{meta.group(3) or ''})"
        if computation and where and (inst.group(1) or computation not in roots):
            roots[computation] = where  # the root's, else the first with any
        own[inst.group(2)] = where
        shape = re.match(r"^\s*(?:ROOT\s+)?%?[\w.\-]+ = (\S+?)(?:\{[\d,]*\})? ", line)
        if shape:  # what an op without metadata makes, at least
            shapes[inst.group(2)] = shape.group(1)
        if computation and (" dot(" in line or " convolution(" in line):
            dots.add(computation)
        if re.search(r'custom_call_target="__cu(blas|dnn)[^"]*(matmul|gemm)', line):
            library_dots.add(inst.group(2))  # cuBLAS's and cuDNN's matrix multiplies
        called = re.search(r"calls=%?([\w.\-]+)", line)
        if called:
            calls[inst.group(2)] = called.group(1)
    names = {}
    for name, where in own.items():
        where = where or roots.get(calls.get(name, ""), "") or shapes.get(name, "")
        if calls.get(name) in dots or name in library_dots:  # a fusion around a matrix
            where += " [+dot]"  # multiply (XLA:CPU's, XLA:GPU's gemm_fusion), or a cuBLAS call
        if where:
            names[name] = names[name.replace(".", "_")] = where
    return names


def _names(events: list, kind: str) -> dict:
    """A trace's metadata names: {pid: name} for "process_name", {(pid, tid): name} for
    "thread_name"."""
    return {(e["pid"] if kind == "process_name" else (e["pid"], e.get("tid"))):
            e.get("args", {}).get("name", "") for e in events
            if e.get("ph") == "M" and e.get("name") == kind}


def _device_only(events: list) -> list:
    """The complete events on the device's lines (every line where none is a device's,
    as on a CPU): the host's launch records carry the same kernel names."""
    device = {p for p, n in _names(events, "process_name").items() if "/device:" in n}
    return [e for e in events if e.get("ph") == "X" and (not device or e.get("pid") in device)]


def op_kind(where: str) -> str:
    """What a kernel computes, from its op's name (JAX's op_name path): a matrix multiply,
    work outside the model's forward and backward passes (the optimizer's update, the
    gradient norm), dropout, a layer norm, a layout transpose, or other elementwise."""
    if "[+dot]" in where or where.endswith("dot_general"):
        return "matmul"
    if "jvp(" not in where:
        return "outside the model (optimizer, gradient norm)"
    path = where.split(" (")[0].split("/")
    if any("Dropout" in part for part in path):
        return "dropout"
    if any("norm" in part.lower() for part in path[:-1]):
        return "layer norm"
    if path[-1].startswith("transpose"):
        return "layout transpose"
    return "other elementwise"


def by_op(trace_file: str, sources: dict, top: int = 12) -> dict:
    """Every device kernel of the trace (each layer's copy counted together) summed by
    the op it computes: the share of kernel time in matrix multiplies (fusions that hold
    one, cuBLAS's calls), the `top` other ops by share, and each `op_kind`'s share and
    kernel count. A kernel's op is its HLO instruction's (`sources`: by the instruction
    the event names, which a trace outside CUDA graphs does, else by the kernel's name),
    else the op name the event carries."""
    import re
    ops, kinds, matmul = {}, {}, 0.0
    for e in _device_only(trace_events(trace_file)):
        args = e.get("args") or {}
        where = (sources.get(args.get("hlo_op", ""), "") or sources.get(e.get("name"), "")
                 or args.get("name", ""))
        if not where:
            continue
        us = float(e.get("dur", 0))
        kind = op_kind(where)
        share, count = kinds.get(kind, (0.0, 0))
        kinds[kind] = (share + us, count + 1)
        if kind == "matmul":
            matmul += us
        else:
            op = re.sub(r"(layer|encoder|decoder|block)_\d+", r"\1_N", where.split(" (")[0])
            ops[op] = ops.get(op, 0.0) + us
    whole = matmul + sum(ops.values()) or 1.0
    ranked = sorted(ops.items(), key=lambda kv: -kv[1])[:top]
    return {"matmul_share": round(matmul / whole, 4),
            "others": [(op, round(us / whole, 4)) for op, us in ranked],
            "kinds": [(k, round(us / whole, 4), n) for k, (us, n)
                      in sorted(kinds.items(), key=lambda kv: -kv[1][0])]}


def one_lever(lever, size, windows, steps, peak, trace_dir, dtype="bfloat16") -> dict:
    if lever in CHILD_FLAGS:  # XLA reads its flags once per process: a child measures it
        ops = os.path.join(trace_dir, "ops")
        flags = CHILD_FLAGS[lever].format(hlo=os.path.join(ops, "hlo"))
        env = dict(os.environ, XLA_FLAGS=f"{os.environ.get('XLA_FLAGS', '')} {flags}")
        inner = "async" if lever == "xla_lhs" else "trace"
        argv = [sys.executable, __file__, f"--levers={inner}", f"--size={size}",
                f"--windows={windows}", f"--steps={steps}", f"--trace_dir={ops}",
                f"--dtype={dtype}"]
        argv += ["--allow_cpu"] if jax.devices()[0].platform != "gpu" else []
        done = subprocess.run(argv, env=env, capture_output=True, text=True)
        if done.returncode:
            return {"error": done.stderr[-1500:]}
        return json.loads(done.stdout.strip().splitlines()[-1])[inner]
    big = "bert_base_b512" if lever == "b512" and size == "bert_base" else size
    which = (big, "cudnn" if lever == "cudnn" else "xla", lever == "no_dropout")
    if which not in _STEPS:
        _STEPS.clear()  # one model's state on the device at a time
        _STEPS[which] = bench.our_step(big, dtype, which[1],
                                       NO_DROPOUT if which[2] else None)
    one_step, tokens, flops, _, _ = _STEPS[which]
    if lever == "trace":
        for _ in range(2):
            one_step()
        with jax.profiler.trace(trace_dir, create_perfetto_trace=True):
            for _ in range(3):
                loss = one_step(False)
            float(loss)
        found = device_kernels(trace_dir)
        dumped = sorted(glob.glob(os.path.join(trace_dir, "hlo", "*after_optimizations.txt")))
        if dumped:  # trace_ops' child: name each top kernel's op and source line
            sources = {}
            for path in dumped:
                with open(path, encoding="utf-8") as f:
                    sources.update(hlo_sources(f.read()))
            for line in found.values():
                if isinstance(line, dict):
                    line["top"] = [(*k, sources.get(k[0], "")) for k in line["top"]]
            found["by_op"] = by_op(found["file"], sources)
        return found
    row = bench.time_windows(one_step, tokens, windows, steps, wait_each_step=lever == "sync")
    row["mfu"] = flops / tokens * row["tokens_per_sec"] / peak
    row["size"] = big
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--levers", default=",".join(LEVERS))
    parser.add_argument("--size", default="bert_base")
    parser.add_argument("--windows", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--budget_s", type=float, default=0.0)
    parser.add_argument("--json_out", default="")
    parser.add_argument("--trace_dir", default="gpu_levers_trace")
    parser.add_argument("--dtype", default="bfloat16",
                        help="the compute dtype (float32 profiles a CPU step as "
                             "benchmarks/train_step.py times it)")
    parser.add_argument("--allow_cpu", action="store_true",
                        help="run on the CPU (tiny size: a smoke test, no figures)")
    args = parser.parse_args()
    levers = args.levers.split(",")
    unknown = [x for x in levers if x not in LEVERS]
    if unknown:
        parser.error(f"--levers: unknown {unknown}; known: {', '.join(LEVERS)}")
    device = gpu.visible_gpu(args.allow_cpu)
    # a name both scripts size (gpt2_small) takes the GPU's batch on a GPU, the CPU's here
    cpu_sizes = dict(bench.SIZES)
    bench.SIZES.update(gpu.GPU_SIZES)
    if device.platform != "gpu":
        bench.SIZES.update(cpu_sizes)
    if args.size not in bench.SIZES:
        parser.error(f"--size: unknown {args.size!r}; known: {', '.join(bench.SIZES)}")
    peak, source = metrics_lib.peak_flops_per_device()
    results = {"device": device.device_kind, "peak_flops": peak, "jax": jax.__version__}
    print(f"device: {device.device_kind}; peak {peak / 1e12:.0f} TFLOP/s ({source})",
          file=sys.stderr, flush=True)
    start, slowest = time.perf_counter(), 0.0
    for lever in levers:
        spent = time.perf_counter() - start
        if args.budget_s and spent + slowest > args.budget_s:
            results[lever] = {"skipped": f"time budget: {spent:.0f} of {args.budget_s:.0f} s"}
        else:
            began = time.perf_counter()
            try:
                results[lever] = one_lever(lever, args.size, args.windows, args.steps, peak,
                                           args.trace_dir, args.dtype)
            except Exception as e:  # one lever failing leaves the others' figures
                results[lever] = {"error": f"{type(e).__name__}: {str(e)[:500]}"}
            slowest = max(slowest, time.perf_counter() - began)
            results[lever]["seconds"] = round(time.perf_counter() - began, 1)
        print(f"{lever}: {json.dumps(results[lever])}", file=sys.stderr, flush=True)
        gpu.write_results(args.json_out, results)
    print(json.dumps(results))


if __name__ == "__main__":
    main()
