"""Train on a SLURM cluster of NVIDIA GPU nodes: write an sbatch script, submit it.

    python launch/slurm.py --nodes=2 --gpus_per_node=8 [--partition=P] [--time=24:00:00]
        [--job_name=pretrainx] [--account=A] [--venv=~/.pretrainx-venv] [--dry-run]
        -- python -m pretrainx.main --config=configs/bert_base.py --workdir=/shared/run

One task per node, holding all of its GPUs: `srun` starts the command once on every
node, and pretrainx.main calls `jax.distributed.initialize()`, which reads the
coordinator, the process count and this process's index from SLURM's environment
(JAX detects SLURM and Open MPI itself). The workdir must be on storage every node
sees. --dry-run prints the script and submits nothing; otherwise the script goes to
`sbatch` on standard input and sbatch's answer (the job id) is printed.
"""

import argparse
import shlex
import subprocess
import sys


def sbatch_script(args, command: list) -> str:
    directives = {"job-name": args.job_name, "nodes": args.nodes, "ntasks-per-node": 1,
                  "gpus-per-node": args.gpus_per_node, "cpus-per-task": args.cpus_per_task,
                  "time": args.time, "output": "%x-%j.out", "partition": args.partition,
                  "account": args.account, "exclusive": ""}
    lines = ["#!/bin/bash"]
    for key, value in directives.items():
        if value is None:
            continue
        lines.append(f"#SBATCH --{key}" + (f"={value}" if value != "" else ""))
    lines += [
        "set -euo pipefail",
        # preallocating 75% of each GPU is JAX's default; the data pipeline's workers
        # run on the host, so nothing else needs the GPU's memory
        f"source {args.venv}/bin/activate" if args.venv else "",
        "export PYTHONUNBUFFERED=1",
        f"srun --kill-on-bad-exit=1 {shlex.join(command)}",
    ]
    return "\n".join(line for line in lines if line) + "\n"


def parse(argv):
    if "--" not in argv:
        raise SystemExit("error: give the training command after --, e.g. -- python -m "
                         "pretrainx.main --config=configs/bert_base.py --workdir=/shared/run")
    cut = argv.index("--")
    ours, command = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--nodes", type=int, default=1)
    parser.add_argument("--gpus_per_node", type=int, default=8)
    parser.add_argument("--cpus_per_task", type=int, default=None)
    parser.add_argument("--partition", default=None)
    parser.add_argument("--account", default=None)
    parser.add_argument("--time", default="24:00:00")
    parser.add_argument("--job_name", default="pretrainx")
    parser.add_argument("--venv", default=None, help="a virtualenv to activate on each node")
    parser.add_argument("--dry-run", dest="dry_run", action="store_true")
    args = parser.parse_args(ours)
    if not command:
        raise SystemExit("error: the training command after -- is empty")
    if args.nodes < 1 or args.gpus_per_node < 1:
        raise SystemExit(f"error: --nodes={args.nodes} and --gpus_per_node="
                         f"{args.gpus_per_node} must be at least 1")
    return args, command


def main(argv) -> int:
    args, command = parse(argv)
    script = sbatch_script(args, command)
    if args.dry_run:
        sys.stdout.write(script)
        return 0
    try:
        result = subprocess.run(["sbatch", "--parsable"], input=script, text=True,
                                capture_output=True)
    except FileNotFoundError:
        raise SystemExit("error: sbatch not found: run this on a SLURM login node "
                         "(or pass --dry-run to see the script)") from None
    if result.returncode:
        sys.stderr.write(result.stderr)
        raise SystemExit(f"error: sbatch refused the job (exit {result.returncode})")
    print(f"submitted job {result.stdout.strip()}; its log: "
          f"{args.job_name}-{result.stdout.strip().split(';')[0]}.out")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
