"""launch/gpu_kit.py, proven here before a GPU is at hand: the wheels it carries (the
project's needs less the GPU image's packages, computed without network) and its run
step's whole path on the CPU (--dry_run), benchmarks/gpu.py's included."""

import importlib.util
import gzip
import json
import os
import subprocess
import sys

import pytest

from conftest import REPO, xla_flags


def _wheels():
    spec = importlib.util.spec_from_file_location("gpu_wheels", REPO / "launch" / "gpu_wheels.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_closure_skips_what_the_image_has_and_requirements_that_do_not_apply():
    kit = _wheels()
    metadata = {
        "grain": ["array-record", "cloudpickle", "dm-tree; python_version < '3.13'",
                  "pytest; extra == 'testing'", "jax"],
        "array-record": ["absl-py", "etils[epath]"],
        "dm-tree": ["attrs>=18", "Wrapt"],
        "tensorboardX": ["numpy", "protobuf>=3.20"],
        "old-thing": ["future; python_version < '3'"],
    }
    image = {"cloudpickle", "jax", "absl-py", "etils", "attrs", "wrapt", "numpy", "protobuf"}
    got = kit.missing(["grain", "tensorboardX", "Old_Thing", "jax"],
                      lambda name: metadata.get(name, []), image)
    assert got == ["array-record", "dm-tree", "grain", "old-thing", "tensorboardx"]


def test_the_pinned_wheels_cover_the_project_and_nothing_the_image_has():
    kit = _wheels()
    pins = kit.read_lock()
    needs = set(kit.project_requirements())
    assert needs - kit.IMAGE <= set(pins), needs - kit.IMAGE - set(pins)
    assert not set(pins) & kit.IMAGE, set(pins) & kit.IMAGE
    assert all(version and version[0].isdigit() for version in pins.values()), pins
    # what pretrainx imports at the top of its modules and the image lacks
    assert {"grain", "ml-collections", "array-record", "tensorflow-datasets",
            "tensorboardx"} <= set(pins)


def test_the_gpu_benchmark_refuses_a_machine_without_a_gpu():
    refused = subprocess.run([sys.executable, str(REPO / "benchmarks" / "gpu.py"),
                              "--sizes=tiny"], cwd=REPO, capture_output=True, text=True,
                             env=dict(os.environ, JAX_PLATFORMS="cpu"), timeout=300)
    assert refused.returncode == 1 and "no NVIDIA GPU visible" in refused.stderr


@pytest.mark.slow
def test_the_run_step_dry_runs_its_whole_path_on_the_cpu(tmp_path):
    """Families, kernels and the timed quickstart through `pytest -m gpu` on the CPU
    (cuDNN's comparisons skip), the benchmark at the tiny sizes (ours in bf16, HF under
    autocast where torch is), and the four files a borrowed machine sends back."""
    env = {k: v for k, v in os.environ.items() if k not in ("XLA_FLAGS", "JAX_PLATFORMS")}
    env["XLA_FLAGS"] = xla_flags()  # the tests' compile flags, XLA's one CPU device
    done = subprocess.run([sys.executable, "launch/gpu_kit.py", "run", "--dry_run",
                           "--budget_s=400", "--sizes=tiny", "--out", str(tmp_path)],
                          cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "kit.log", "levers_step_hlo.txt.gz", "levers_trace_ops.json.gz", "parts.tar.gz",
        "results.json", "summary.md"]
    results = json.loads((tmp_path / "results.json").read_text())
    tests = results["tests"]
    assert tests["test_every_family_trains_in_bf16_and_resumes[bert]"][0] == "passed"
    assert tests["test_quickstart_at_gpu_size_for_a_minute"][0] == "passed"
    assert all(v[0].startswith("skipped: cuDNN") for k, v in tests.items() if "cudnn" in k)
    quickstart = next(r for r in results["reported"] if r["test"] == "quickstart_gpu_size")
    assert quickstart["tokens_per_sec"] > 0 and quickstart["last_loss"] < quickstart["first_loss"]
    bench = results["benchmarks"][0]
    assert bench["tiny"]["ours"]["loss"] > 0
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
        assert bench["tiny"]["ratio"] > 0, bench
    except ImportError:
        pass
    traced = results["levers"]["trace_ops"]  # benchmarks/gpu_levers.py, its child's trace
    lines = [line for line in traced.values() if isinstance(line, dict) and "us" in line]
    assert traced["file"] and any(line["us"] > 0 for line in lines), traced
    assert 0 < traced["by_op"]["matmul_share"] < 1 and traced["by_op"]["others"], traced
    kinds = {kind: share for kind, share, _ in traced["by_op"]["kinds"]}
    assert kinds["matmul"] == traced["by_op"]["matmul_share"]
    assert abs(sum(kinds.values()) - 1) < 1e-3, kinds
    assert b"ENTRY" in gzip.open(tmp_path / "levers_step_hlo.txt.gz").read()
    named = [k[4] for line in lines for k in line["top"]]
    assert any("jit(step)" in where for where in named), named  # kernels name their ops
    summary = (tmp_path / "summary.md").read_text()
    assert "pytest -m gpu" in summary and "- trace_ops by op: in matmuls" in summary
    assert "- trace_ops by kind: " in summary and "kernels)" in summary


def test_a_part_stopped_before_its_junit_keeps_the_verdicts_its_log_printed(tmp_path):
    """On the H100 the families part ran out of its share while pytest-xdist shut its
    workers down, after every test had ended: the verdicts `-v` printed still count."""
    spec = importlib.util.spec_from_file_location("gpu_kit", REPO / "launch" / "gpu_kit.py")
    kit = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kit)
    (tmp_path / "families.log").write_text(
        "bringing up nodes...\n"
        "[gw1] [ 50%] PASSED tests/launch/test_gpu.py::test_every_family_trains_in_bf16_and_resumes[bert] \n"
        "[gw0] [100%] FAILED tests/launch/test_gpu.py::test_every_family_trains_in_bf16_and_resumes[t5] \n"
        "KeyboardInterrupt\n")
    verdicts = kit._test_verdicts(tmp_path / "families.xml")
    assert verdicts == {
        "test_every_family_trains_in_bf16_and_resumes[bert]": ("passed (from the log)", None),
        "test_every_family_trains_in_bf16_and_resumes[t5]": ("failed (from the log)", None)}


def test_kernels_by_op_count_the_device_alone_and_cublas_calls_as_matmuls(tmp_path):
    """The shape of the H200's trace outside CUDA graphs (2026-12-04): the host's launch
    records carry the kernels' names too, cuBLAS's kernels are named by cuBLAS (nvjet_...)
    and reach their op only through the event's hlo_op. Summing host records with the
    device's had put the matmuls at 22% of the step; the device alone says 51%."""
    spec = importlib.util.spec_from_file_location("gpu_levers",
                                                  REPO / "benchmarks" / "gpu_levers.py")
    levers = importlib.util.module_from_spec(spec)
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        spec.loader.exec_module(levers)
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    hlo = """HloModule jit_step

%fused_norm (p: f32[8]) -> f32[8] {
  %p = f32[8]{0} parameter(0)
  ROOT %r = f32[8]{0} multiply(%p, %p), metadata={op_name="jit(step)/jvp(M)/m/layer_3/attn_norm/mul"}
}

ENTRY %main (a: bf16[8,8], b: bf16[8,8], c: f32[8]) -> f32[8] {
  %a = bf16[8,8]{1,0} parameter(0)
  %b = bf16[8,8]{1,0} parameter(1)
  %c = f32[8]{0} parameter(2)
  %custom-call.7 = (bf16[8,8]{1,0}, s8[64]{0}) custom-call(%a, %b), custom_call_target="__cublas$lt$matmul", metadata={op_name="jit(step)/transpose(jvp(M))/m/layer_3/mlp/transpose"}
  %loop_fusion.2 = f32[8]{0} fusion(%c), kind=kLoop, calls=%fused_norm
  ROOT %reduce.9 = f32[8]{0} add(%c, %c), metadata={op_name="jit(step)/reduce_sum"}
}
"""
    sources = levers.hlo_sources(hlo)
    events = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": "/device:GPU:0"}},
        {"ph": "M", "name": "process_name", "pid": 7, "args": {"name": "/host:CPU"}},
        {"ph": "X", "pid": 1, "name": "nvjet_sm90_tst_128x128", "dur": 50,
         "args": {"hlo_op": "custom-call.7", "name": "jit(step)/transpose(jvp(M))/m/x"}},
        {"ph": "X", "pid": 1, "name": "loop_fusion_2", "dur": 30},
        {"ph": "X", "pid": 1, "name": "reduce.9", "dur": 20},
        # the host's launch records: the same names, never device time
        {"ph": "X", "pid": 7, "name": "loop_fusion_2", "dur": 400},
        {"ph": "X", "pid": 7, "name": "reduce.9", "dur": 400}]
    trace = tmp_path / "t.trace.json.gz"
    with gzip.open(trace, "wt") as f:
        json.dump({"traceEvents": events}, f)
    found = levers.by_op(str(trace), sources)
    assert found["matmul_share"] == 0.5
    assert found["kinds"] == [("matmul", 0.5, 1), ("layer norm", 0.3, 1),
                              ("outside the model (optimizer, gradient norm)", 0.2, 1)]
