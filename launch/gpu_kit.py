"""The GPU kit: pretrainx's GPU checks and benchmarks in one command on a borrowed
NVIDIA machine that has JAX, PyTorch and transformers but no package registry.

Here, with a registry (wheels for CPython 3.12 manylinux x86_64 into .gpu_kit/, which
git ignores, and the tokenizers and sample text the checks read from ../shared/data):

    python launch/gpu_kit.py prepare            # downloads what launch/gpu_wheels.txt pins
    python launch/gpu_kit.py prepare --resolve  # recomputes that list first (network)

There, in the repository root (the tree and .gpu_kit travel; $OUT comes back):

    python3 launch/gpu_kit.py run [--budget_s=540] [--parts=...] [--sizes=...]

installs the wheels and the project with --no-index --no-deps into a private folder,
prints the versions and nvidia-smi, runs `pytest -m gpu` (the families side by side,
then the kernels and the timed quickstart alone) and benchmarks/gpu.py (then BERT-Base
again with cuDNN's attention), and writes kit.log, summary.md, results.json and
parts.tar.gz to $OUT. Each part has a share of the time budget and is stopped cleanly
(SIGINT: pytest and the benchmark keep what they measured) when it runs out. All of it
takes about 12 minutes on an H200, so one 10-minute call measures what fits and a
second (`--parts=benchmark --sizes=...`) the rest. `run --dry_run` is the same path on
this machine's CPU at the tiny sizes (the suite runs it).

This file uses the standard library alone: it runs before anything is installed.
"""

import argparse
import gzip
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent))
from gpu_wheels import KIT, REPO, prepare  # noqa: E402

# ---------------------------------------------------------------- there: one command

VERSIONS = """
import importlib.metadata as md, json, platform, jax
names = ["jax", "jaxlib", "jax-cuda13-plugin", "jax-cuda12-plugin", "flax", "optax",
         "orbax-checkpoint", "grain", "ml-collections", "tensorflow-datasets", "numpy",
         "torch", "transformers", "tokenizers", "safetensors", "sentencepiece"]
found = {}
for n in names:
    try:
        found[n] = md.version(n)
    except md.PackageNotFoundError:
        pass
d = jax.devices()[0]
print(json.dumps({"python": platform.python_version(), "packages": found,
                  "backend": jax.default_backend(), "device_kind": d.device_kind,
                  "devices": len(jax.devices())}))
"""


class Log:
    """Everything the kit prints, also into OUT/kit.log."""

    def __init__(self, out: pathlib.Path):
        self.file = open(out / "kit.log", "a", encoding="utf-8")

    def __call__(self, text: str) -> None:
        print(text, flush=True)
        self.file.write(text + "\n")
        self.file.flush()


def _run_part(log, name, argv, env, out, seconds) -> tuple:
    """Runs one part with its output in OUT/NAME.log; at its time limit SIGINT (pytest
    and the benchmark stop cleanly and write what they have), then SIGKILL. Returns
    (exit code or 'timeout', seconds taken)."""
    import signal
    if seconds < 10:
        log(f"== {name}: skipped, {seconds:.0f} s left of the budget")
        return "skipped", 0.0
    log(f"== {name} (at most {seconds:.0f} s): {' '.join(argv)}")
    began = time.monotonic()
    with open(out / f"{name}.log", "w", encoding="utf-8") as f:
        proc = subprocess.Popen(argv, cwd=REPO, env=env, stdout=f, stderr=subprocess.STDOUT)
        try:
            code = proc.wait(timeout=seconds)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            code = "timeout"
    took = time.monotonic() - began
    tail = (out / f"{name}.log").read_text(errors="replace").splitlines()[-15:]
    log("\n".join("   " + line for line in tail))
    log(f"== {name}: {code} in {took:.0f} s")
    return code, took


def _install(log, out) -> dict:
    """The carried wheels and the project into a private folder (no index, no deps);
    returns the environment the parts run in."""
    site = pathlib.Path(tempfile.gettempdir()) / "pretrainx-site"
    shutil.rmtree(site, ignore_errors=True)
    wheels = sorted(str(w) for w in (KIT / "wheels").glob("*.whl"))
    if not wheels:
        raise SystemExit(f"error: no wheels in {KIT / 'wheels'}: run "
                         "`python launch/gpu_kit.py prepare` here first and carry .gpu_kit")
    pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps",
           "--no-compile", "--disable-pip-version-check", "--target", str(site)]
    for what, extra in (("wheels", wheels), ("project", ["--no-build-isolation", str(REPO)])):
        got = subprocess.run(pip + extra, capture_output=True, text=True)
        (out / f"install_{what}.log").write_text(got.stdout + got.stderr)
        log(f"installed the {what}: exit {got.returncode}")
        if got.returncode and what == "wheels":
            raise SystemExit(f"error: the wheels did not install: {got.stderr[-2000:]}")
    # the tree's own pretrainx comes first either way: tests and benchmarks run from it
    return {"PYTHONPATH": os.pathsep.join([str(REPO), str(site)])}


def _verdicts_from_log(log: pathlib.Path) -> dict:
    """{test name: (verdict, None)} from the lines `-v` prints as each test ends, for a
    part stopped before pytest wrote its JUnit XML (which it writes last, after
    pytest-xdist's workers have shut down: on the H100 that took past the part's share)."""
    import re
    verdicts = {}
    text = log.read_text(errors="replace") if log.exists() else ""
    for line in text.splitlines():
        found = re.search(r"\b(PASSED|FAILED|ERROR|SKIPPED)\b", line)
        test = re.search(r"::(\S+)", line)
        if found and test:
            verdicts[test.group(1)] = (found.group(1).lower() + " (from the log)", None)
    return verdicts


def _test_verdicts(junit: pathlib.Path) -> dict:
    """{test name: (verdict, seconds)} from pytest's JUnit XML, or from the part's log
    where the XML is missing."""
    import xml.etree.ElementTree as ET
    verdicts = {}
    if not junit.exists():
        return _verdicts_from_log(junit.with_suffix(".log"))
    for case in ET.parse(junit).getroot().iter("testcase"):
        verdict = "passed"
        for kind in ("failure", "error", "skipped"):
            node = case.find(kind)
            if node is not None:
                verdict = f"{kind}: {(node.get('message') or '')[:300]}"
        verdicts[case.get("name")] = (verdict, round(float(case.get("time", 0)), 1))
    return verdicts


def _benchmark_lines(results: dict) -> list:
    lines = [f"## benchmarks/gpu.py, attention {results.get('attention_impl')}", ""]
    for size, row in results.items():
        if not isinstance(row, dict):
            continue
        if "ours" not in row:
            lines.append(f"- {size}: {row}")
            continue
        o = row["ours"]
        peer = row.get("hf_pytorch_same_work") or row.get("hf_pytorch") or {}
        theirs = (f"HF {peer['tokens_per_sec']:,.0f} tok/s (min {peer['min']:,.0f}, max "
                  f"{peer['max']:,.0f}), MFU {peer['mfu']:.1%}; ratio {row['ratio']:.3f}"
                  if "tokens_per_sec" in peer else f"HF: {peer}")
        lines.append(f"- {size}: ours {o['tokens_per_sec']:,.0f} tok/s (min {o['min']:,.0f}, "
                     f"max {o['max']:,.0f}), MFU {o['mfu']:.1%}; {theirs}"
                     + (f"; goals {row['goals']}" if row.get("goals") else ""))
    return lines + [""]


def _summary(results: dict) -> str:
    v = results.get("versions") or {}
    lines = [f"# pretrainx GPU kit, {results['date']}", ""]
    if v:
        lines.append(f"- device: {v.get('device_kind')} ({v.get('backend')}, "
                     f"{v.get('devices')} devices), Python {v.get('python')}")
        lines.append("- " + ", ".join(f"{k} {x}" for k, x in v["packages"].items()))
    lines += [f"- {name}: {code} in {took:.0f} s" for name, (code, took) in
              results["parts"].items()] + ["", "## pytest -m gpu", ""]
    lines += [f"- {name}: {verdict}" + ("" if took is None else f" ({took} s)")
              for name, (verdict, took) in
              results["tests"].items()]
    lines += ["", "## figures the tests reported", ""]
    lines += [f"- {json.dumps(r)}" for r in results["reported"]] + [""]
    for bench in results["benchmarks"]:
        lines += _benchmark_lines(bench)
    return "\n".join(lines + _lever_lines(results.get("levers") or {}))


def _lever_lines(levers: dict) -> list:
    lines = ["## benchmarks/gpu_levers.py", ""] if levers else []
    for name, row in levers.items():
        if isinstance(row, dict) and "tokens_per_sec" in row:
            lines.append(f"- {name}: {row['tokens_per_sec']:,.0f} tok/s (min {row['min']:,.0f},"
                         f" max {row['max']:,.0f}), MFU {row['mfu']:.1%} ({row['size']})")
        elif name.startswith("trace") and isinstance(row, dict):
            for line, top in row.items():
                if line == "by_op":  # every kernel summed by its op (the HLO names them)
                    lines.append(f"- {name} by op: in matmuls {top['matmul_share']:.1%}"
                                 "; " + "; ".join(f"{op} {share:.1%}"
                                                  for op, share in top["others"][:6]))
                    lines.append(f"- {name} by kind: " + "; ".join(
                        f"{kind} {share:.1%} ({n} kernels)"
                        for kind, share, n in top.get("kinds", [])))
                elif isinstance(top, dict):
                    lines.append(f"- {name} {line}: {top['us']:,.0f} us; " + "; ".join(
                        f"{n} {share:.1%}" + (f" [{src[0]}]" if src and src[0] else "")
                        for n, _, share, _, *src in top["top"][:6]))
        elif isinstance(row, dict):
            lines.append(f"- {name}: {row}")
    return lines


def _levers(log, env, work, out, seconds, extra) -> tuple:
    """benchmarks/gpu_levers.py: BERT-Base with one lever changed at a time and a
    profile of its step; the profile's Perfetto JSON goes to OUT on its own (if it is
    too large to come back, the rest still does)."""
    result, trace = work / "levers.json", work / "levers_trace"
    argv = [sys.executable, "benchmarks/gpu_levers.py", "--json_out", str(result),
            "--trace_dir", str(trace), "--budget_s", str(max(0, int(seconds - 60))), *extra]
    code = _run_part(log, "levers", argv, env, work, seconds)
    for where, name in ((trace, "levers_trace"), (trace / "ops", "levers_trace_ops")):
        for found in sorted(where.glob("plugins/**/*.trace.json.gz"))[-1:]:
            shutil.copy(found, out / f"{name}.json.gz")
    for found in sorted((trace / "ops" / "hlo").glob("*after_optimizations.txt"))[-1:]:
        with open(found, "rb") as f, gzip.open(out / "levers_step_hlo.txt.gz", "wb") as g:
            shutil.copyfileobj(f, g)
    shutil.rmtree(trace, ignore_errors=True)
    return code, json.loads(result.read_text()) if result.exists() else {}


PARTS = ("families", "tests", "benchmark", "benchmark_cudnn", "levers")


def run(args) -> int:
    """Writes to OUT four files (what a borrowed machine sends back is few): kit.log
    (everything printed), summary.md, results.json and parts.tar.gz (each part's log,
    JUnit XML and JSON)."""
    import tarfile
    began = time.monotonic()
    left = lambda: args.budget_s - (time.monotonic() - began)  # noqa: E731
    out = pathlib.Path(args.out or os.environ.get("OUT") or KIT / "out")
    out.mkdir(parents=True, exist_ok=True)
    work = pathlib.Path(tempfile.mkdtemp(prefix="gpu_kit_"))
    log = Log(out)
    report = work / "gpu_report.jsonl"
    env = dict(os.environ, PYTHONUNBUFFERED="1", HF_HUB_OFFLINE="1",
               PRETRAINX_GPU_REPORT=str(report))
    if (KIT / "data").is_dir():
        env["PRETRAINX_SHARED_DATA"] = str(KIT / "data")
    if not args.dry_run or args.install:
        env.update(_install(log, work))
    if args.dry_run:  # the CPU, the tiny sizes
        log("dry run: JAX on the CPU, tiny sizes, no figures")
        env.update(JAX_PLATFORMS="cpu", PRETRAINX_GPU_TESTS_ON_CPU="1",
                   PRETRAINX_GPU_SECONDS="8")
    else:
        env.update(JAX_PLATFORMS="cuda", XLA_PYTHON_CLIENT_PREALLOCATE="false")
    wanted = args.parts.split(",")
    parts, versions = {}, {}
    parts["versions"] = _run_part(log, "versions", [sys.executable, "-c", VERSIONS], env,
                                  work, min(90, left()))
    if parts["versions"][0] == 0:
        versions = json.loads((work / "versions.log").read_text().splitlines()[-1])
    if shutil.which("nvidia-smi"):
        smi = subprocess.run(["nvidia-smi"], capture_output=True, text=True)
        log(smi.stdout + smi.stderr)
    pytest = [sys.executable, "-m", "pytest", "-q", "-m", "gpu", "-p", "no:cacheprovider",
              "-o", "addopts=", "-rfEs"]
    if "families" in wanted:  # side by side: 16 cores, one GPU shared, no preallocation
        families = (["tests/launch/test_gpu.py::test_every_family_trains_in_bf16_and_resumes[bert]"]
                    if args.dry_run else ["-n", "6", "tests/launch/test_gpu.py", "-k", "family"])
        parts["families"] = _run_part(
            log, "families", pytest + families + ["-v", "--junitxml", str(work / "families.xml")],
            env, work, left() * args.test_share * 0.5)
    if "tests" in wanted:  # alone: the quickstart's figures are timed
        parts["tests"] = _run_part(
            log, "tests", pytest + ["tests/launch/test_gpu.py", "-k", "not family", "--junitxml",
                                    str(work / "tests.xml")],
            env, work, left() * args.test_share)
    reserve = 30
    benchmarks = []
    for name, extra in (("benchmark", ["--sizes", args.sizes]),
                        ("benchmark_cudnn", ["--sizes=bert_base,bert_base_b512",
                                             "--attention_impl=cudnn"])):
        if name not in wanted or (args.dry_run and name == "benchmark_cudnn"):
            continue
        result = work / f"{name}.json"
        argv = [sys.executable, "benchmarks/gpu.py", "--json_out", str(result), *extra]
        if args.dry_run:
            argv = argv[:4] + ["--allow_cpu", f"--sizes={args.sizes}", "--windows=1",
                               "--steps=1"]
        argv += ["--budget_s", str(max(0, int(left() - reserve - 60)))]
        parts[name] = _run_part(log, name, argv, env, work, left() - reserve)
        if result.exists():
            benchmarks.append(json.loads(result.read_text()))
    levers = {}
    if "levers" in wanted:
        tiny = ["--allow_cpu", "--size=tiny", "--windows=1", "--steps=1"] if args.dry_run else []
        # dry: the child path alone (a trace outside CUDA graphs, the HLO dump); the
        # timing it shares with the benchmark part runs there
        chosen = args.levers or ("trace_ops" if args.dry_run else "")
        parts["levers"], levers = _levers(log, env, work, out, left() - reserve,
                                          tiny + ([f"--levers={chosen}"] if chosen else []))
    tests = {**_test_verdicts(work / "families.xml"), **_test_verdicts(work / "tests.xml")}
    results = {"date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
               "versions": versions, "parts": parts, "tests": tests,
               "reported": [json.loads(line) for line in report.read_text().splitlines()]
               if report.exists() else [], "benchmarks": benchmarks, "levers": levers}
    (out / "results.json").write_text(json.dumps(results, indent=1))
    summary = _summary(results)
    (out / "summary.md").write_text(summary)
    with tarfile.open(out / "parts.tar.gz", "w:gz") as tar:
        tar.add(work, arcname="parts")
    shutil.rmtree(work, ignore_errors=True)
    log(summary)
    log(f"kit: {time.monotonic() - began:.0f} s in all; kit.log, summary.md, results.json "
        f"and parts.tar.gz in {out}")
    failed = [n for n, (code, _) in parts.items() if code not in (0, "skipped")]
    return 1 if failed else 0


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    verbs = parser.add_subparsers(dest="verb", required=True)
    p = verbs.add_parser("prepare", help="here: download the wheels, copy the data")
    p.add_argument("--resolve", action="store_true",
                   help="recompute launch/gpu_wheels.txt first (network)")
    r = verbs.add_parser("run", help="there: install, check, benchmark, write to $OUT")
    r.add_argument("--budget_s", type=float, default=540.0,
                   help="the whole run, compilation included (the device's call limit "
                        "is 600 s)")
    r.add_argument("--test_share", type=float, default=0.5,
                   help="the share of what is left that pytest -m gpu may take")
    r.add_argument("--parts", default=",".join(PARTS),
                   help=f"which of {', '.join(PARTS)} to run (versions always)")
    r.add_argument("--sizes", default="",
                   help="benchmarks/gpu.py's sizes, in the order they are measured (default: "
                        "bert_base,bert_base_b512,gpt2_small,t5_base,modernbert_base; "
                        "with --dry_run tiny,modernbert_tiny)")
    r.add_argument("--levers", default="",
                   help="benchmarks/gpu_levers.py's levers (default: all, in its order)")
    r.add_argument("--out", default="", help="where results go (default $OUT)")
    r.add_argument("--dry_run", action="store_true",
                   help="here, on the CPU, at the tiny sizes: the whole path, no figures")
    r.add_argument("--install", action="store_true",
                   help="with --dry_run: install the carried wheels as there (an "
                        "environment like the GPU image's proves they are enough)")
    args = parser.parse_args(argv)
    if args.verb == "run" and not args.sizes:
        args.sizes = ("tiny,modernbert_tiny" if args.dry_run
                      else "bert_base,bert_base_b512,gpt2_small,t5_base,modernbert_base")
    if args.verb == "prepare":
        prepare(args)
        return 0
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
