"""Where the test suite's time goes, from the per-test rows `PRETRAINX_TEST_PROFILE` writes.

    PRETRAINX_TEST_PROFILE=DIR PRETRAINX_TEST_CACHE=EMPTY python -m pytest -q -n 2 tests
    python benchmarks/suite_profile.py DIR [--top=25] [--run=ID]

tests/conftest.py appends one JSON line a test to DIR/WORKER.jsonl: its wall time and
what JAX spent in that process tracing, lowering and compiling (XLA) and reading the
compile cache. A test with none of those ran its JAX work in subprocesses (CLIs,
scripts, notebooks), whose JAX time no listener here sees, or had none (plain Python).
This prints the worker-seconds, the JAX share of the in-process tests, the files and
the tests that take the most, and the slowest tests by what is not JAX's (execution,
I/O, waiting). `.ci/run` runs pytest twice (the suite, then the transformers 5 tests):
rows carry their run's id, and `--run` keeps one (by default the run with the most
rows). The last line is one JSON object.
"""

import argparse
import collections
import json
import pathlib
import sys

JAX_COLUMNS = ("trace_s", "lower_s", "compile_s", "cache_read_s")


def read_rows(folder: pathlib.Path) -> list:
    rows = []
    for path in sorted(folder.glob("*.jsonl")):
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                sys.exit(f"error: {path}:{number} is not a JSON line: {line[:80]!r}")
    return rows


def one_run(rows: list, run: str | None) -> list:
    """The rows of `run`, or of the run with the most rows (rows of a profile written
    before rows carried a run id all count as one run)."""
    counts = collections.Counter(r.get("run", "") for r in rows)
    if run is None:
        run = counts.most_common(1)[0][0] if counts else ""
    elif run not in counts:
        sys.exit(f"error: --run={run}: the profile has runs {sorted(counts)}")
    return [r for r in rows if r.get("run", "") == run]


def jax_seconds(row: dict) -> float:
    return sum(row.get(k, 0.0) for k in JAX_COLUMNS)


def in_process(row: dict) -> bool:
    return any(k in row for k in JAX_COLUMNS)


def summary(rows: list, top: int) -> dict:
    inside = [r for r in rows if in_process(r)]
    by_file = collections.Counter()
    for r in rows:
        by_file[r["test"].split("::")[0]] += r["wall_s"]
    slowest = sorted(rows, key=lambda r: -r["wall_s"])[:top]
    not_jax = sorted(inside, key=lambda r: jax_seconds(r) - r["wall_s"])[:top]
    inside_wall = sum(r["wall_s"] for r in inside)
    total = sum(r["wall_s"] for r in rows)
    return {
        "tests": len(rows), "worker_seconds": round(total, 1),
        "in_process": {"tests": len(inside), "seconds": round(inside_wall, 1),
                       **{k: round(sum(r.get(k, 0.0) for r in inside), 1) for k in JAX_COLUMNS},
                       "not_jax_s": round(inside_wall - sum(map(jax_seconds, inside)), 1)},
        "no_jax_in_process": {"tests": len(rows) - len(inside),
                              "seconds": round(total - inside_wall, 1)},
        "files": [[f, round(s, 1)] for f, s in by_file.most_common(top)],
        "slowest": [[r["test"], r["wall_s"], round(jax_seconds(r), 1) if in_process(r) else None]
                    for r in slowest],
        "slowest_not_jax": [[r["test"], round(r["wall_s"] - jax_seconds(r), 1), r["wall_s"]]
                            for r in not_jax],
    }


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=pathlib.Path)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--run", default=None, help="a run id (rows' `run`); default the largest")
    args = parser.parse_args()
    if not args.folder.is_dir():
        sys.exit(f"error: {args.folder}: no such folder (PRETRAINX_TEST_PROFILE's DIR)")
    rows = one_run(read_rows(args.folder), args.run)
    if not rows:
        sys.exit(f"error: {args.folder}: no profile rows (*.jsonl)")
    out = summary(rows, args.top)
    inside = out["in_process"]
    print(f"{out['tests']} tests, {out['worker_seconds']:,.0f} worker-seconds; in process "
          f"{inside['tests']} tests, {inside['seconds']:,.0f} s: trace {inside['trace_s']:,.0f}, "
          f"lower {inside['lower_s']:,.0f}, XLA compile {inside['compile_s']:,.0f}, cache "
          f"reads {inside['cache_read_s']:,.0f}, the rest {inside['not_jax_s']:,.0f}; no JAX "
          f"in process (subprocesses, plain Python) {out['no_jax_in_process']['tests']} tests, "
          f"{out['no_jax_in_process']['seconds']:,.0f} s")
    print("\nby file (worker-seconds):")
    for name, seconds in out["files"]:
        print(f"  {seconds:8.1f}  {name}")
    print("\nslowest tests (wall; JAX's share where in process):")
    for name, wall, jax_s in out["slowest"]:
        print(f"  {wall:8.1f}  {'' if jax_s is None else f'{jax_s:6.1f}'}  {name}")
    print("\nslowest by what is not JAX's (in process: the rest, wall):")
    for name, rest, wall in out["slowest_not_jax"]:
        print(f"  {rest:8.1f}  {wall:6.1f}  {name}")
    print(json.dumps(out))


if __name__ == "__main__":
    main()
