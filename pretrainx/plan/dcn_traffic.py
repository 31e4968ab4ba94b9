"""Which collectives of a compiled TPU program cross slices, and how many bytes.

On a multi-slice topology XLA lowers each collective whose devices sit in several
slices into host transfers handed to the DCN runtime ("megascale"): a `send` with
`_xla_megascale_transfer_type` (ALL_REDUCE, ALL_GATHER, ...). Counting those sends
in the compiled HLO text, with the trip counts of the loops they sit in, says
what crosses the data-center network per step without running anything.
"""

import re

import numpy as np

_DTYPE_BYTES = {"pred": 1, "s8": 1, "u8": 1, "s16": 2, "u16": 2, "f16": 2, "bf16": 2,
                "s32": 4, "u32": 4, "f32": 4, "s64": 8, "u64": 8, "f64": 8}
_COMPUTATION = re.compile(r"^(?:ENTRY\s+)?%?([\w.\-]+)\s*\(.*\{\s*$")
_SEND = re.compile(r"=\s*\(\s*(\w+)\[([\d,]*)\].*?\)\s+send\(.*"
                   r"_xla_megascale_transfer_type=\"(\w+)\"")
_WHILE = re.compile(r"\swhile\(%?([\w.\-]+)\).*condition=%?([\w.\-]+).*body=%?([\w.\-]+)")
_TRIP_COUNT = re.compile(r"\"known_trip_count\":\{\"n\":\"(\d+)\"")
_CALLED = re.compile(r"(?:to_apply|calls|body|condition|true_computation|"
                     r"false_computation)=%?([\w.\-]+)|branch_computations=\{([^}]*)\}")
_CONSTANT = re.compile(r"%([\w.\-]+)\s*=\s*s32\[\][^=]*constant\((-?\d+)\)")
_COPY = re.compile(r"%([\w.\-]+)\s*=\s*s32\[\][^=]*\scopy\(%?([\w.\-]+)\)")
_TUPLE = re.compile(r"%([\w.\-]+)\s*=.*\stuple\(%?([\w.\-]+)")
_LIMIT = re.compile(r"ROOT .*compare\(%?([\w.\-]+), %?([\w.\-]+)\), direction=(LT|LE)")


def _trip_count(line, caller_lines, blocks):
    """A while loop's trip count: the compiler's known_trip_count, or a counter that
    starts at a constant (a peeled loop starts past 0) and runs while below one."""
    known = _TRIP_COUNT.search(line)
    if known:
        return int(known.group(1))
    m = _WHILE.search(line)
    if not m:
        return 1
    operand, condition, _ = m.groups()
    constants, copies = {}, {}
    for other in caller_lines + blocks.get(condition, []):
        c = _CONSTANT.search(other)
        if c:
            constants[c.group(1)] = int(c.group(2))
        c = _COPY.search(other)
        if c:
            copies[c.group(1)] = c.group(2)
    start = 0
    for other in caller_lines:
        t = _TUPLE.search(other)
        if t and t.group(1) == operand:
            first = t.group(2)
            while first in copies:
                first = copies[first]
            start = constants.get(first, 0)
    for other in blocks.get(condition, []):
        limit = _LIMIT.search(other)
        if limit and limit.group(2) in constants:
            end = constants[limit.group(2)] + (limit.group(3) == "LE")
            return max(end - start, 1)
    return 1


def _computations(hlo_text: str) -> dict:
    """{computation name: its instruction lines}; ENTRY's name is kept as written."""
    blocks, name = {}, None
    for line in hlo_text.splitlines():
        m = _COMPUTATION.match(line.strip())
        if m and not line.startswith(" "):
            name = m.group(1)
            blocks[name] = []
        elif name is not None:
            blocks[name].append(line)
    return blocks


def _multipliers(blocks: dict) -> dict:
    """How many times each computation runs per program run: a while body its trip
    count times its caller's, anything else called as often as its caller (both
    branches of a conditional are counted: an upper bound)."""
    called = {}
    for caller, lines in blocks.items():
        for line in lines:
            loop = _WHILE.search(line)
            trips = _trip_count(line, lines, blocks) if loop else 1
            for m in _CALLED.finditer(line):
                names = [m.group(1)] if m.group(1) else [
                    n.strip().lstrip("%") for n in m.group(2).split(",")]
                for callee in names:
                    times = trips if loop and callee == loop.group(3) else 1
                    called.setdefault(callee, []).append((caller, times))
    memo = {}

    def times(name, seen=()):
        if name in memo:
            return memo[name]
        if name not in called or name in seen:
            return 1
        memo[name] = max(times(c, seen + (name,)) * t for c, t in called[name])
        return memo[name]

    return {name: times(name) for name in blocks}


def ring_factor(kind: str, slices: int) -> float:
    """Bytes a participant puts on the network per payload byte it hands over, for a
    ring over `slices`: an all-reduce sends its payload 2(S-1)/S times, a gather
    sends its own part to the S-1 others, a reduce-scatter (S-1)/S."""
    s = max(slices, 1)
    return {"ALL_REDUCE": 2 * (s - 1) / s, "ALL_GATHER": s - 1,
            "REDUCE_SCATTER": (s - 1) / s}.get(kind, 1.0)


def cross_slice(hlo_text: str, slices: int) -> dict:
    """{transfer type: {"count", "payload_bytes", "network_bytes"}} per device per
    program run; payload is what each device hands to the DCN runtime, network
    bytes that payload times ring_factor."""
    blocks = _computations(hlo_text)
    mult = _multipliers(blocks)
    out = {}
    for name, lines in blocks.items():
        for line in lines:
            m = _SEND.search(line)
            if not m:
                continue
            dtype, dims, kind = m.groups()
            size = int(np.prod([int(d) for d in dims.split(",") if d])) * _DTYPE_BYTES.get(
                dtype, 4)
            entry = out.setdefault(kind, {"count": 0, "payload_bytes": 0, "network_bytes": 0.0})
            entry["count"] += mult[name]
            entry["payload_bytes"] += size * mult[name]
            entry["network_bytes"] += size * mult[name] * ring_factor(kind, slices)
    return out
