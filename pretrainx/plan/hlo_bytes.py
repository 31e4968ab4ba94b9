"""Where a compiled step's HBM bytes go: each top-level instruction of the optimized
HLO (a fusion, a matmul, a collective) reads its operands and writes its result, so
its bytes are theirs, counted as the compiler lays them out in memory (TPU tiles pad
the two most minor dimensions, T(8,128) for instance, and a padded dimension is
traffic too). Grouped by the model code that made them (the `op_name` metadata), this
says what bounds a step that the roofline finds bytes-bound.

The compiler's cost analysis calls its total "bytes accessed". The count here is
independent, from the text: where the program has no loops it comes within a few
percent of that figure (the cost model looks inside fusions to see how much of an
operand is read); where it has loops, this count runs each body once per iteration,
which the cost analysis does not.

A TPU compile also writes its own per-instruction estimate into each fusion's backend
config (`estimated_cycles`); their sum over the step, loops counted per iteration, at
the chip's clock is the compiler's sequential per-op model of the step
(`compiler_cycles_seconds`), a second estimate beside the roofline."""

import collections
import contextlib
import math
import pathlib
import re
import tempfile
import warnings

_DTYPE_BYTES = {"pred": 1, "s4": 0.5, "u4": 0.5, "s8": 1, "u8": 1, "f8e4m3fn": 1,
                "f8e5m2": 1, "bf16": 2, "f16": 2, "s16": 2, "u16": 2, "f32": 4, "s32": 4,
                "u32": 4, "f64": 8, "s64": 8, "u64": 8, "c64": 8, "c128": 16}
# dtype[dims]{layout}: the layout (minor to major), its first tile and its memory space
# (S(1) is on-chip memory on a TPU: what lives there costs no HBM traffic)
_ARRAY = re.compile(r"\b([a-z]+[0-9]*[a-z0-9]*)\[([0-9,]*)\]"
                    r"(?:\{([0-9,]*)(?::T\((\d+)(?:,(\d+))?\))?([^}]*)\})?")
_INSTRUCTION = re.compile(r"^\s*(?:ROOT )?%([\w.\-]+) = (.*?) ([\w\-]+)\((.*)$")
_FREE = {"parameter", "constant", "bitcast", "tuple", "get-tuple-element", "after-all",
         "partition-id", "replica-id", "iota", "while", "call", "conditional"}
UNPRINTABLE = "this libtpu cannot print the compiled program"  # a plan's note


def arrays(type_text: str, padded: bool = True) -> list:
    """(bytes, on_chip) of each array in an HLO type, in order; `padded` rounds the
    two most minor dimensions up to the layout's tile."""
    out = []
    for dtype, dims, layout, tile_major, tile_minor, rest in _ARRAY.findall(type_text):
        if dtype not in _DTYPE_BYTES:
            continue
        shape = [int(d) for d in dims.split(",") if d]
        if padded and layout and tile_major and shape:
            order = [int(i) for i in layout.split(",") if i]
            tile = [int(tile_major)] + ([int(tile_minor)] if tile_minor else [])
            for dim, size in zip(reversed(order[:len(tile)]), tile):  # most minor last
                shape[dim] = -(-shape[dim] // size) * size
        on_chip = bool(re.search(r"S\([1-9]\)", rest))
        out.append((math.prod(shape) * _DTYPE_BYTES[dtype], on_chip))
    return out


def array_bytes(type_text: str, padded: bool = True) -> float:
    """Bytes of every array in an HLO type (a tuple's arrays summed)."""
    return sum(b for b, _ in arrays(type_text, padded))


def _computations(hlo_text: str):
    """{name: [instruction lines]} and the entry computation's name."""
    comps, entry, current = {}, None, None
    for line in hlo_text.splitlines():
        if line and not line[0].isspace() and line.rstrip().endswith("{"):
            head = line.split(" ", 2)
            current = head[1] if head[0] == "ENTRY" else head[0]
            current = current.lstrip("%")
            entry = current if head[0] == "ENTRY" else entry
            comps[current] = []
        elif line.startswith("}"):
            current = None
        elif current is not None:
            comps[current].append(line)
    return comps, entry


def trip_count(condition_lines) -> int:
    """Iterations of a loop whose condition is `counter < N` (a scan's, a windowed
    einsum's): N, counting from 0 as both do; 1 when the condition is another form."""
    constants = {}
    for line in condition_lines:
        m = re.match(r"\s*%([\w.\-]+) = [su]\d+\[\][^ ]* constant\((\d+)\)", line)
        if m:
            constants[m.group(1)] = int(m.group(2))
    for line in condition_lines:
        m = re.search(r"ROOT %[\w.\-]+ = pred\[\][^ ]* compare\(%([\w.\-]+), %([\w.\-]+)\), "
                      r"direction=LT", line)
        if m and m.group(2) in constants:
            return constants[m.group(2)]
    return 1


def _async_opcode(comps, calls: str) -> str:
    """An async-start's opcode as jax prints it (slice-start, copy-start): the opcode
    of its wrapped computation's root, with "-start"."""
    callee = re.search(r"calls=%([\w.\-]+)", calls)
    for line in comps.get(callee.group(1), ()) if callee else ():
        m = _INSTRUCTION.match(line)
        if m and line.lstrip().startswith("ROOT"):
            return m.group(3) + "-start"
    return "async-start"


def _run_instructions(hlo_text: str):
    """(comps, {name: result type}, [(match of _INSTRUCTION, times run)]) for each
    instruction of the entry computation and of the loops and calls it runs, times
    the iterations of the loops around it (XLA's cost analysis counts a loop body once;
    on v5e an FSDP matmul becomes a loop over weight shards)."""
    comps, entry = _computations(hlo_text)
    types = {}
    for lines in comps.values():
        for line in lines:
            m = _INSTRUCTION.match(line)
            if m:
                types[m.group(1)] = m.group(2)
    run, todo = [], [(entry, 1)]
    while todo:
        name, times = todo.pop()
        for line in comps.get(name, ()):
            m = _INSTRUCTION.match(line)
            if not m:
                continue
            opcode, calls = m.group(3), m.group(4).split("metadata=")[0]
            if opcode == "while":
                cond = re.search(r"condition=%([\w.\-]+)", calls)
                body = re.search(r"body=%([\w.\-]+)", calls)
                trips = trip_count(comps.get(cond.group(1), ())) if cond else 1
                todo += [(body.group(1), times * trips)] if body else []
            elif opcode in ("call", "conditional"):
                todo += [(c, times) for c in re.findall(
                    r"(?:to_apply=|branch_computations=\{|, )%([\w.\-]+)", calls)]
            run.append((m, times))
    return comps, types, run


def _opcode(comps, m) -> str:
    """An instruction's opcode, libtpu's async-start given the one it wraps."""
    opcode = m.group(3)
    if opcode == "async-start":  # libtpu's own dump spells slice-start this way
        opcode = _async_opcode(comps, m.group(4).split("metadata=")[0])
    return opcode


def _operands_and_result(comps, types, m, padded):
    """(opcode, [[(bytes, on_chip)] per operand], [(bytes, on_chip)] written) of one
    instruction (a match of _INSTRUCTION), an async start's result cut to the
    destination it writes."""
    out_type, rest = m.group(2), m.group(4)
    opcode = _opcode(comps, m)
    args = rest.split("), ")[0] if "), " in rest else rest.rstrip(")")
    operands = [arrays(types.get(o, ""), padded) for o in re.findall(r"%([\w.\-]+)", args)]
    written = arrays(out_type, padded)
    if opcode.endswith("-start") or "AsyncCollectiveStart" in rest:
        # (operands echoed, destination, sync flags): the destination is written
        written = written[sum(map(len, operands)):][:1]
        if opcode in ("slice-start", "copy-start"):  # reads what it writes
            operands = [[(written[0][0], operands[0][0][1])]] if written else []
    return opcode, operands, written


def instruction_bytes(hlo_text: str, padded: bool = True) -> list:
    """One row per top-level instruction of the entry computation and of the loops
    and calls it runs: name, opcode, the model code it came from, and bytes read plus
    written, times the iterations of the loops around it (`_run_instructions`)."""
    return _instruction_rows(_run_instructions(hlo_text), padded)


def _instruction_rows(walk, padded: bool = True) -> list:
    comps, types, run = walk
    rows = []
    for m, times in run:
        rest = m.group(4)
        if m.group(3) in _FREE or m.group(3).endswith("-done"):
            continue
        opcode, operands, written = _operands_and_result(comps, types, m, padded)
        read = [a for op in operands for a in op]
        source = re.search(r'op_name="([^"]*)"', rest)
        cycles = re.search(r'"estimated_cycles":"(\d+)"', rest)
        rows.append({"name": m.group(1), "opcode": opcode, "times": times,
                     "source": source.group(1) if source else "",
                     "cycles": times * int(cycles.group(1)) if cycles else 0,
                     "bytes": times * sum(b for b, _ in read + written),
                     "hbm_bytes": times * sum(b for b, chip in read + written if not chip)})
    return rows


COLLECTIVES = ("all-reduce", "reduce-scatter", "all-gather", "all-to-all",
               "collective-permute")


def collectives(hlo_text: str) -> dict:
    """{kind: {"count", "bytes", "input_bytes"}} of a compiled program's collectives, per
    device and step (loops counted per iteration): bytes each one hands back, input
    bytes each one is handed. A TPU's reduce-scatter is, in libtpu's program, a fusion
    calling an `%all-reduce-scatter` computation (an all-reduce whose result is sliced
    in place), not the `reduce-scatter` opcode: it is counted as one here, so a ZeRO-1
    step shows its gradients reduce-scattered (the full sums in, a device's shard out)."""
    return _collectives(_run_instructions(hlo_text))


def _collectives(walk) -> dict:
    comps, types, run = walk
    out = {}
    for m, times in run:
        opcode = _opcode(comps, m)
        kind = opcode[:-len("-start")] if opcode.endswith("-start") else opcode
        callee = re.search(r"calls=%([A-Za-z\-]+)", m.group(4).split("metadata=")[0])
        if opcode == "fusion" and callee and callee.group(1) == "all-reduce-scatter":
            kind = "reduce-scatter"
        if kind not in COLLECTIVES:  # operands read only for the few that are
            continue
        _, operands, written = _operands_and_result(comps, types, m, padded=False)
        entry = out.setdefault(kind, {"count": 0, "bytes": 0, "input_bytes": 0})
        entry["count"] += times
        entry["bytes"] += int(times * sum(b for b, _ in written))
        entry["input_bytes"] += int(times * sum(b for op in operands for b, _ in op))
    return out


def _part(source: str) -> str:
    """The model part an op_name names, with layer numbers and jit/transform wrappers
    folded, so that twelve layers' attention sums to one row."""
    part = re.sub(r"layer_\d+", "layer_N", source)
    while True:  # transpose(jvp(Model)) -> Model
        folded = re.sub(r"\b(jit|jvp|transpose|vmap|remat|checkpoint|pjit)\(([^()]*)\)",
                        r"\2", part)
        if folded == part:
            break
        part = folded
    return "/".join(p for p in part.split("/") if p not in ("", "step", "main"))


def by_part(rows, top: int = 12, key: str = "hbm_bytes") -> list:
    """The parts of the model that move the most bytes (`key`: "hbm_bytes", or
    "bytes" with on-chip memory too), largest first, with their share of the total."""
    totals = collections.Counter()
    for r in rows:
        totals[_part(r["source"]) or f"({r['opcode']})"] += r[key]
    whole = sum(totals.values()) or 1.0
    return [{"part": part, "bytes": b, "share": round(b / whole, 4)}
            for part, b in totals.most_common(top)]


def traffic(hlo_text: str, cost_bytes: float, flops: float, model_flops: float,
            peak: float, bandwidth: float, extra_hbm: float = 0.0,
            clock_hz: float | None = None) -> dict:
    """A device's bytes per step two ways, and what bounds the step at the roofline.

    The cost analysis' "bytes accessed" counts every operand and result, wherever the
    compiler placed it; on a TPU with on-chip memory assigned (v5e, v6e, v5p), much of
    that traffic never reaches HBM. The layout count keeps the arrays the compiled
    program holds in HBM. `extra_hbm` adds what the text cannot show (a Pallas
    kernel's blocks). Both are counts from the compiled program, not measurements; so
    are its `collectives`, what the devices exchange (a ZeRO-1 plan's reduce-scatter
    and all-gathers)."""
    walk = _run_instructions(hlo_text)  # one walk of the program for both counts
    rows = _instruction_rows(walk)
    hbm = sum(r["hbm_bytes"] for r in rows) + extra_hbm
    terms = {"flops": max(flops, model_flops) / peak, "hbm_bytes": hbm / bandwidth}
    bound = max(terms, key=terms.get)
    seconds = terms[bound]
    cycles = sum(r["cycles"] for r in rows)
    per_op = cycles / clock_hz if cycles and clock_hz else None
    return {"cost_model_bytes": cost_bytes, "hbm_bytes": hbm,
            "collectives": _collectives(walk),
            "compiler_cycles": cycles, "compiler_cycles_seconds": per_op,
            "compiler_cycles_mfu": model_flops / peak / per_op if per_op else None,
            "on_chip_bytes": sum(r["bytes"] - r["hbm_bytes"] for r in rows),
            "roofline_seconds_hbm_only": seconds, "bound_hbm_only": bound,
            "mfu_bound_hbm_only": model_flops / peak / seconds if seconds else None,
            "top_hbm_parts": [{**p, "bytes": int(p["bytes"])} for p in by_part(rows, 6)],
            "note": "per device and step; hbm_bytes counts the arrays the compiled program "
                    "keeps in HBM (on-chip S(1) arrays left out), cost_model_bytes all of "
                    "them; the roofline from hbm_bytes is a bound, not an estimate; "
                    "compiler_cycles sums the compiler's per-instruction estimates (attention "
                    "kernels and collectives carry none), at the chip's clock"}


def compiled_text(compiled, dump_dir=None):
    """The optimized program of a jax Compiled as text, or None: the `after_codegen`
    file its compile wrote to `dump_dir` (compiled with `dump_options(dump_dir)`), else
    `compiled.as_text()`. jax 0.10.2 with this libtpu cannot print some v6e and v5p
    programs (a RET_CHECK on an async-update instruction's operand count, with a C++
    stack trace on stderr); the compiler's own dump of the same program has no such
    limit, and where both work they give the same counts."""
    files = sorted(pathlib.Path(dump_dir).glob("*.after_codegen.txt")) if dump_dir else []
    if files:
        return files[-1].read_text()
    try:
        return compiled.as_text()
    except Exception:  # JaxRuntimeError: INTERNAL: RET_CHECK failure
        return None


def dump_options(dump_dir) -> dict:
    """Compiler options that make a compile write its programs into `dump_dir` as text
    (per compile, so the process's XLA_FLAGS stay as they are)."""
    return {"xla_dump_to": str(dump_dir), "xla_dump_hlo_as_text": True}


@contextlib.contextmanager
def no_cache_write():
    """No entry in JAX's persistent compilation cache for a deviceless compile, and no
    warning from one already there: its executable cannot be loaded back without a TPU
    client ("PjRtCompiler must be constructed with a Client"), so an entry would be
    written for every plan that no run can read (writing it was 1.3-1.8 s of a tiny
    BERT's 9-10 s plan), and an entry an older pretrainx wrote makes JAX warn at each
    compile of the same program that it could not read it, then compile as if it were
    absent. Turning the whole cache off per compile does not work: JAX decides once a
    process whether it uses one."""
    import jax
    before = jax.config.jax_persistent_cache_min_compile_time_secs
    jax.config.update("jax_persistent_cache_min_compile_time_secs", math.inf)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings(
                "ignore", message="Error reading persistent compilation cache entry")
            yield
    finally:
        jax.config.update("jax_persistent_cache_min_compile_time_secs", before)


def compile_with_text(lowered):
    """(the jax Compiled of `lowered`, its program as text or None), the text from the
    compile's own dump in a temporary folder (`compiled_text`); a deviceless compile,
    so written to no persistent cache (`no_cache_write`)."""
    with tempfile.TemporaryDirectory() as dump, no_cache_write():
        compiled = lowered.compile(compiler_options=dump_options(dump))
        return compiled, compiled_text(compiled, dump)


def of_text(text, cost_bytes, flops, model_flops, peak, bandwidth, extra_hbm=None,
            clock_hz=None) -> dict:
    """`traffic` of a compiled program's text (`compiled_text`); a note without one."""
    if text is None:
        return {"note": UNPRINTABLE}
    return traffic(text, cost_bytes, flops, model_flops, peak, bandwidth, extra_hbm or 0.0,
                   clock_hz)
