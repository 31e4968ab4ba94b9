"""Soak run: a tiny model for thousands of steps with frequent checkpoints.

    python benchmarks/soak.py [--steps=3000] [--checkpoint_every=50] [--keep=3]
                              [--max_rss_growth=0.10]

Trains the quickstart recipe shrunk to 2 layers of width 64 in a subprocess,
samples its resident memory from /proc five times a second, and prints one JSON object:
RSS once the run is warm (10% of the steps) and at the end, their ratio (flat
memory is ~1.0), the peak RSS, and the checkpoints left. Then it checks what it
promises and exits 1 with one line per broken promise: exactly --keep checkpoints
are left, the newest at the last step, and RSS at the end is at most
1 + --max_rss_growth times the warm RSS (a leak of a
few KiB a step would show; 3,000 steps measured 1.005x).
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parents[1]


def _rss_kib(pid: int, field: str = "VmRSS") -> int:
    """The field in KiB; FileNotFoundError once the process is gone. A process that
    has exited but not been reaped still has a status file, without memory lines:
    that counts as gone too, or its last sample would read 0 and hide a leak."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise FileNotFoundError(f"/proc/{pid}/status has no {field}: the process has exited")


def _steps_done(workdir: pathlib.Path) -> int:
    path = workdir / "metrics.jsonl"
    if not path.exists():
        return 0
    lines = [ln for ln in path.read_text().splitlines() if ln.endswith("}")]
    return json.loads(lines[-1]).get("step", 0) if lines else 0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3000)
    parser.add_argument("--checkpoint_every", type=int, default=50)
    parser.add_argument("--keep", type=int, default=3)
    parser.add_argument("--max_rss_growth", type=float, default=0.10)
    args = parser.parse_args()
    workdir = pathlib.Path(tempfile.mkdtemp(prefix="pretrainx-soak-"))
    command = [
        sys.executable, "-m", "pretrainx.main", "--config=configs/quickstart.py",
        f"--workdir={workdir}", f"--config.total_steps={args.steps}",
        f"--config.checkpoint_every={args.checkpoint_every}",
        f"--config.keep_checkpoints={args.keep}", "--config.log_every=50",
        "--config.eval_every=1000000", "--config.data.eval_files=",
        "--config.global_batch_size=16", "--config.seq_len=64",
        "--config.model.num_layers=2", "--config.model.hidden_size=64",
        "--config.model.num_heads=4", "--config.model.mlp_dim=128",
        "--config.data.max_predictions_per_seq=10", "--config.data.dupe_factor=1"]
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    start = time.time()
    proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    warm_rss = None
    samples = []
    while proc.poll() is None:
        step = _steps_done(workdir)
        try:
            rss, peak = _rss_kib(proc.pid), _rss_kib(proc.pid, "VmHWM")
        except FileNotFoundError:
            break
        samples.append((step, rss, peak))
        if warm_rss is None and step >= args.steps // 10:
            warm_rss = rss
        time.sleep(0.2)
    stderr = proc.stderr.read()
    if proc.returncode:
        sys.exit(f"soak run failed ({proc.returncode}): {stderr[-2000:]}")
    if warm_rss is None:  # an earlier sample is the interpreter starting: no baseline
        sys.exit(f"soak run ended before a sample found it warm (step {args.steps // 10}; "
                 f"{len(samples)} samples): give it more --steps")
    last_step, end_rss, peak = samples[-1]
    checkpoints = sorted(int(p.name) for p in (workdir / "checkpoints").iterdir()
                         if p.name.isdigit())
    print(json.dumps({
        "steps": args.steps, "checkpoint_every": args.checkpoint_every,
        "checkpoints_written": args.steps // args.checkpoint_every,
        "checkpoints_left": checkpoints, "keep": args.keep,
        "rss_mib_warm": round(warm_rss / 1024, 1), "rss_mib_end": round(end_rss / 1024, 1),
        "rss_end_over_warm": round(end_rss / warm_rss, 3),
        "peak_rss_mib": round(peak / 1024, 1), "last_sampled_step": last_step,
        "seconds": round(time.time() - start, 1), "workdir": str(workdir)}))
    broken = []
    if len(checkpoints) != args.keep or checkpoints[-1:] != [args.steps]:
        broken.append(f"checkpoints left {checkpoints}: expected {args.keep}, the newest "
                      f"at step {args.steps}")
    if end_rss > (1 + args.max_rss_growth) * warm_rss:
        broken.append(f"RSS grew from {warm_rss / 1024:.1f} MiB (warm) to {end_rss / 1024:.1f} "
                      f"MiB, more than {args.max_rss_growth:.0%}")
    for line in broken:
        print(f"soak: {line}", file=sys.stderr)
    sys.exit(1 if broken else 0)


if __name__ == "__main__":
    main()
