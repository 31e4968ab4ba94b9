#!/usr/bin/env python3
"""Run pretrainx on GKE TPU slices with JobSet: write the manifest, apply it.

    python launch/gke.py --name=bert-base --tpu=v5e:4x4 --num-slices=2 \
        --image=us-docker.pkg.dev/PROJECT/pretrainx/train:latest \
        --config=configs/bert_base.py --workdir=gs://BUCKET/bert_base \
        -- --config.data.train_files='/data/corpus/*.txt'

One JobSet: a replicated job per slice (`--num-slices` replicas), one pod per TPU
host with all of its chips, node selectors for the accelerator and topology, and
exclusive placement (one slice per node pool). Several slices get the MEGASCALE_*
variables that join them over the data-center network, with JobSet's coordinator
pod (its stable DNS name, behind the JobSet's headless service) as the
coordinator; JAX reads them in jax.distributed.initialize(). A preempted pod fails
its job, JobSet recreates every job (at most --max-restarts times) and the run
resumes from the last checkpoint in the gs:// workdir.

--dry-run prints the YAML and applies nothing; --output=FILE writes it.
Needs kubectl (pointed at the cluster) and the JobSet controller installed there.
"""

import argparse
import shlex
import subprocess
import sys

import yaml

# GKE's accelerator label of each generation, and chips per host in a multi-host
# slice (single-host v5e / v6e slices of 8 chips are one 8-chip VM).
ACCELERATORS = {"v4": ("tpu-v4-podslice", 4), "v5e": ("tpu-v5-lite-podslice", 4),
                "v5p": ("tpu-v5p-slice", 4), "v6e": ("tpu-v6e-slice", 4)}
COORDINATOR = "jobset.sigs.k8s.io/coordinator"
JOB_INDEX = "jobset.sigs.k8s.io/job-index"


class Refused(Exception):
    """Bad input: one line, nothing applied."""


def slice_shape(tpu: str):
    """(accelerator label, topology, chips per slice, hosts per slice, chips per host)."""
    generation, _, topology = tpu.partition(":")
    if generation not in ACCELERATORS or not topology:
        raise Refused(f"--tpu={tpu!r}: expected GEN:TOPOLOGY with GEN one of "
                      f"{', '.join(ACCELERATORS)}, e.g. v5e:4x4 or v5p:2x2x4")
    try:
        dims = [int(d) for d in topology.split("x")]
    except ValueError:
        raise Refused(f"--tpu={tpu!r}: topology {topology!r} is not AxB or AxBxC") from None
    chips = 1
    for d in dims:
        chips *= d
    label, per_host = ACCELERATORS[generation]
    if chips <= 8 and generation in ("v5e", "v6e"):
        per_host = chips  # one VM holds the whole slice
    if chips % per_host:
        raise Refused(f"--tpu={tpu!r}: {chips} chips do not fill hosts of {per_host}")
    return label, topology, chips, chips // per_host, per_host


def _field(path: str) -> dict:
    return {"valueFrom": {"fieldRef": {"fieldPath": path}}}


def manifest(args, extra) -> dict:
    label, topology, _, hosts, per_host = slice_shape(args.tpu)
    command = ["python", "-m", "pretrainx.main", f"--config={args.config}",
               f"--workdir={args.workdir}", *extra]
    env = [{"name": "JAX_PLATFORMS", "value": "tpu"}]
    if args.num_slices > 1:
        env += [{"name": "MEGASCALE_COORDINATOR_ADDRESS",
                 **_field(f"metadata.annotations['{COORDINATOR}']")},
                {"name": "MEGASCALE_NUM_SLICES", "value": str(args.num_slices)},
                {"name": "MEGASCALE_SLICE_ID", **_field(f"metadata.annotations['{JOB_INDEX}']")}]
    selector = {"cloud.google.com/gke-tpu-accelerator": label,
                "cloud.google.com/gke-tpu-topology": topology}
    if args.spot:
        selector["cloud.google.com/gke-spot"] = "true"
    pod = {
        "restartPolicy": "Never",
        "nodeSelector": selector,
        # Time for the preemption hook to write its checkpoint after SIGTERM.
        "terminationGracePeriodSeconds": args.grace_seconds,
        "containers": [{
            "name": "pretrainx", "image": args.image, "command": command, "env": env,
            "resources": {"limits": {"google.com/tpu": per_host}},
        }],
    }
    if args.num_slices > 1:  # DCN traffic on the host's NICs, not through the pod network
        pod.update(hostNetwork=True, dnsPolicy="ClusterFirstWithHostNet")
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": args.name,
                     # one slice per node pool: a slice's hosts are one pool's nodes
                     "annotations": {"alpha.jobset.sigs.k8s.io/exclusive-topology":
                                     "cloud.google.com/gke-nodepool"}},
        "spec": {
            "failurePolicy": {"maxRestarts": args.max_restarts},
            "network": {"enableDNSHostnames": True, "publishNotReadyAddresses": True},
            "coordinator": {"replicatedJob": "slice", "jobIndex": 0, "podIndex": 0},
            "replicatedJobs": [{
                "name": "slice",
                "replicas": args.num_slices,
                "template": {"spec": {
                    "parallelism": hosts, "completions": hosts,
                    "backoffLimit": 0,  # a lost pod fails the job; JobSet restarts them all
                    "completionMode": "Indexed",
                    "template": {"spec": pod},
                }},
            }],
        },
    }


def _parser():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                usage="%(prog)s [options] -- [--config.KEY=VALUE ...]")
    p.add_argument("--name", required=True, help="JobSet name (DNS label)")
    p.add_argument("--tpu", required=True, help="GEN:TOPOLOGY of one slice, e.g. v5e:4x4")
    p.add_argument("--num-slices", type=int, default=1)
    p.add_argument("--image", required=True, help="container image with pretrainx installed")
    p.add_argument("--config", required=True, help="recipe, e.g. configs/bert_base.py")
    p.add_argument("--workdir", required=True, help="gs://BUCKET/PATH (shared by every pod)")
    p.add_argument("--spot", action="store_true", help="schedule on Spot node pools")
    p.add_argument("--max-restarts", type=int, default=10)
    p.add_argument("--grace-seconds", type=int, default=60)
    p.add_argument("--kubectl", default="kubectl")
    p.add_argument("--output", help="write the manifest here too")
    p.add_argument("--dry-run", action="store_true", help="print the YAML, apply nothing")
    return p


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1:] if "--" in argv else []
    args = _parser().parse_args(argv[:argv.index("--")] if "--" in argv else argv)
    try:
        if not args.workdir.startswith("gs://"):
            raise Refused(f"--workdir={args.workdir}: pods restart on other nodes, so the "
                          "workdir must be shared storage (gs://BUCKET/PATH)")
        if args.num_slices < 1 or args.max_restarts < 0:
            raise Refused("--num-slices must be >= 1 and --max-restarts >= 0")
        text = yaml.safe_dump(manifest(args, extra), sort_keys=False)
    except Refused as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.output:
        with open(args.output, "w", encoding="utf-8") as f:
            f.write(text)
    if args.dry_run:
        sys.stdout.write(text)
        return 0
    command = [args.kubectl, "apply", "-f", "-"]
    print("+ " + shlex.join(command), file=sys.stderr)
    try:
        return subprocess.run(command, input=text, text=True).returncode
    except FileNotFoundError:
        print(f"error: {args.kubectl} not found; install kubectl or pass --kubectl", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
