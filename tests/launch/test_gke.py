"""launch/gke.py: the JobSet it writes is valid (JobSet's v1alpha2 fields, closed
against typos; the job template checked by kubernetes-validate as a batch/v1 Job),
places one pod per TPU host with the slice's selectors, joins several slices over
DCN, and reaches kubectl only with that manifest; bad input is one line and
applies nothing."""

import os
import pathlib
import subprocess
import sys

import jsonschema
import pytest
import yaml

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "launch" / "gke.py"
BASE = ["--name=bert-base", "--image=us-docker.pkg.dev/p/pretrainx/train:1",
        "--config=configs/bert_base.py", "--workdir=gs://bucket/bert_base"]


def _closed(properties: dict, required=()) -> dict:
    return {"type": "object", "properties": properties, "required": list(required),
            "additionalProperties": False}


# JobSet v1alpha2 (kubernetes-sigs/jobset api/jobset/v1alpha2/jobset_types.go): every
# field of the spec and of a ReplicatedJob, closed, so a misspelt key fails here and
# not on the cluster. The Job template inside is a batch/v1 JobTemplateSpec.
_INT = {"type": "integer", "minimum": 0}
JOBSET_SCHEMA = _closed({
    "apiVersion": {"const": "jobset.x-k8s.io/v1alpha2"},
    "kind": {"const": "JobSet"},
    "metadata": _closed({"name": {"type": "string", "pattern": r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                         "namespace": {"type": "string"},
                         "labels": {"type": "object"}, "annotations": {"type": "object"}},
                        required=["name"]),
    "spec": _closed({
        "replicatedJobs": {"type": "array", "minItems": 1, "items": _closed({
            "name": {"type": "string"}, "groupName": {"type": "string"},
            "replicas": {"type": "integer", "minimum": 1},
            "template": _closed({"metadata": {"type": "object"},
                                 "spec": {"type": "object"}}, required=["spec"]),
            "dependsOn": {"type": "array"}}, required=["name", "template"])},
        "network": _closed({"enableDNSHostnames": {"type": "boolean"},
                            "subdomain": {"type": "string"},
                            "publishNotReadyAddresses": {"type": "boolean"}}),
        "successPolicy": _closed({"operator": {"enum": ["All", "Any"]},
                                  "targetReplicatedJobs": {"type": "array"}}),
        "failurePolicy": _closed({"maxRestarts": _INT,
                                  "restartStrategy": {"enum": ["Recreate", "BlockingRecreate",
                                                               "InPlaceRestart"]},
                                  "rules": {"type": "array"}}),
        "startupPolicy": _closed({"startupPolicyOrder": {"enum": ["AnyOrder", "InOrder"]}}),
        "suspend": {"type": "boolean"},
        "coordinator": _closed({"replicatedJob": {"type": "string"}, "jobIndex": _INT,
                                "podIndex": _INT}, required=["replicatedJob"]),
        "managedBy": {"type": "string"},
        "ttlSecondsAfterFinished": _INT,
        "volumeClaimPolicies": {"type": "array"}}, required=["replicatedJobs"]),
}, required=["apiVersion", "kind", "metadata", "spec"])


def gke(*args, env=None):
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True,
                          text=True, env=dict(os.environ, **(env or {})), timeout=60)


def dry_run(*args):
    result = gke("--dry-run", *BASE, *args)
    assert result.returncode == 0, result.stderr
    return yaml.safe_load(result.stdout)


def _validate(jobset):
    jsonschema.validate(jobset, JOBSET_SCHEMA)
    names = {j["name"] for j in jobset["spec"]["replicatedJobs"]}
    assert jobset["spec"]["coordinator"]["replicatedJob"] in names
    kv = pytest.importorskip("kubernetes_validate")
    for job in jobset["spec"]["replicatedJobs"]:
        as_job = {"apiVersion": "batch/v1", "kind": "Job",
                  "metadata": {"name": f"{jobset['metadata']['name']}-{job['name']}-0"},
                  "spec": job["template"]["spec"]}
        kv.validate(as_job, "1.33", strict=True)  # raises on an unknown or mistyped field


def _pod(jobset):
    return jobset["spec"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]


def test_two_v5e_slices_are_one_jobset_joined_over_dcn():
    jobset = dry_run("--tpu=v5e:4x4", "--num-slices=2", "--spot", "--",
                     "--config.data.train_files=/data/*.txt")
    _validate(jobset)
    job = jobset["spec"]["replicatedJobs"][0]
    assert job["replicas"] == 2  # one job per slice
    assert job["template"]["spec"]["parallelism"] == job["template"]["spec"]["completions"] == 4
    pod = _pod(jobset)
    assert pod["nodeSelector"] == {"cloud.google.com/gke-tpu-accelerator": "tpu-v5-lite-podslice",
                                   "cloud.google.com/gke-tpu-topology": "4x4",
                                   "cloud.google.com/gke-spot": "true"}
    container = pod["containers"][0]
    assert container["resources"]["limits"]["google.com/tpu"] == 4  # 16 chips on 4 hosts
    assert container["command"] == ["python", "-m", "pretrainx.main",
                                    "--config=configs/bert_base.py",
                                    "--workdir=gs://bucket/bert_base",
                                    "--config.data.train_files=/data/*.txt"]
    env = {e["name"]: e for e in container["env"]}
    assert env["MEGASCALE_NUM_SLICES"]["value"] == "2"
    assert env["MEGASCALE_SLICE_ID"]["valueFrom"]["fieldRef"]["fieldPath"] == \
        "metadata.annotations['jobset.sigs.k8s.io/job-index']"
    assert "jobset.sigs.k8s.io/coordinator" in \
        env["MEGASCALE_COORDINATOR_ADDRESS"]["valueFrom"]["fieldRef"]["fieldPath"]
    assert pod["hostNetwork"] is True
    assert jobset["spec"]["failurePolicy"]["maxRestarts"] == 10
    assert jobset["metadata"]["annotations"]["alpha.jobset.sigs.k8s.io/exclusive-topology"] \
        == "cloud.google.com/gke-nodepool"


@pytest.mark.parametrize("tpu, pods, chips", [("v5e:2x2", 1, 4), ("v5e:2x4", 1, 8),
                                              ("v5p:2x2x4", 4, 4), ("v6e:4x4", 4, 4)])
def test_one_slice_has_a_pod_per_host_and_no_dcn(tpu, pods, chips):
    jobset = dry_run(f"--tpu={tpu}")
    _validate(jobset)
    spec = jobset["spec"]["replicatedJobs"][0]["template"]["spec"]
    assert (spec["parallelism"], jobset["spec"]["replicatedJobs"][0]["replicas"]) == (pods, 1)
    pod = _pod(jobset)
    assert pod["containers"][0]["resources"]["limits"]["google.com/tpu"] == chips
    assert not any(e["name"].startswith("MEGASCALE") for e in pod["containers"][0]["env"])
    assert "hostNetwork" not in pod


def test_a_misspelt_field_fails_the_schema():
    jobset = dry_run("--tpu=v5e:4x4")
    jobset["spec"]["failurePolicy"]["maxRestart"] = 3
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(jobset, JOBSET_SCHEMA)
    kv = pytest.importorskip("kubernetes_validate")
    job = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "x"},
           "spec": dict(jobset["spec"]["replicatedJobs"][0]["template"]["spec"], parallelisms=2)}
    with pytest.raises(kv.ValidationError):
        kv.validate(job, "1.33", strict=True)


@pytest.fixture
def fake_kubectl(tmp_path):
    """A kubectl that records its arguments and the manifest on its stdin."""
    script = tmp_path / "kubectl"
    script.write_text(f"#!/bin/sh\necho \"$@\" > {tmp_path}/args\ncat > {tmp_path}/stdin\n"
                      "echo 'jobset.jobset.x-k8s.io/bert-base created'\n")
    script.chmod(0o755)
    return tmp_path


def test_apply_hands_kubectl_the_manifest_it_prints(fake_kubectl, tmp_path):
    out = tmp_path / "jobset.yaml"
    result = gke(*BASE, "--tpu=v5e:4x4", "--num-slices=2", f"--kubectl={fake_kubectl}/kubectl",
                 f"--output={out}")
    assert result.returncode == 0, result.stderr
    assert (fake_kubectl / "args").read_text().split() == ["apply", "-f", "-"]
    applied = (fake_kubectl / "stdin").read_text()
    assert applied == out.read_text() == gke("--dry-run", *BASE, "--tpu=v5e:4x4",
                                             "--num-slices=2").stdout


@pytest.mark.parametrize("args, says", [
    (["--workdir=/tmp/run"], "--workdir=/tmp/run: pods restart on other nodes"),
    (["--tpu=v5litepod-16"], "--tpu='v5litepod-16': expected GEN:TOPOLOGY"),
    (["--tpu=v5e:4xfour"], "is not AxB or AxBxC"),
    (["--num-slices=0"], "--num-slices must be >= 1"),
])
def test_bad_input_is_one_line_and_applies_nothing(fake_kubectl, args, says):
    result = gke(*BASE, "--tpu=v5e:4x4", f"--kubectl={fake_kubectl}/kubectl", *args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0], result.stderr
    assert not (fake_kubectl / "args").exists()
