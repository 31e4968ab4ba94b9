"""launch/tpu_vm.sh: the gcloud commands of --dry-run, and the spot restart loop against a
fake gcloud that records its calls and plays a slice that gets preempted."""

import ast
import json
import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys

import pytest

REPO = pathlib.Path(__file__).resolve().parents[2]
SCRIPT = REPO / "launch" / "tpu_vm.sh"
BASH = shutil.which("bash")

pytestmark = pytest.mark.skipif(BASH is None, reason="bash not found")

SLICE = ["--name=bert", "--zone=us-east1-d"]
TRAIN = ["python", "-m", "pretrainx.main", "--config=configs/bert_base.py",
         "--workdir=gs://bucket/bert_base", "--config.data.train_files=/mnt/corpus/*.txt"]


@pytest.fixture(scope="module", autouse=True)
def no_real_gcloud(tmp_path_factory):
    """A gcloud first on PATH that fails loudly: nothing here may reach the real one."""
    guard = tmp_path_factory.mktemp("guard")
    (guard / "gcloud").write_text("#!/bin/sh\necho 'error: the real gcloud was called' >&2\n"
                                  "exit 99\n")
    (guard / "gcloud").chmod(0o755)
    _GUARD.append(str(guard))
    yield
    _GUARD.clear()


_GUARD = []


def launch(*args, env=None, cwd=None):
    base = {k: v for k, v in os.environ.items()
            if k not in ("TPU_NAME", "ZONE", "PROJECT", "ACCELERATOR_TYPE")}
    base["PATH"] = os.pathsep.join([*_GUARD, os.environ.get("PATH", "")])
    base.update(env or {})
    return subprocess.run([BASH, str(SCRIPT), *args], capture_output=True, text=True,
                          env=base, cwd=cwd or _GUARD[0], timeout=60)


def dry_run(*args):
    """The commands a dry run prints, each split as a shell would split it."""
    result = launch("--dry-run", *args)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines and all(line.startswith("+ ") for line in lines), result.stdout
    return [shlex.split(line[2:]) for line in lines]


def flag(argv, name):
    values = [a.split("=", 1)[1] for a in argv if a.startswith(name + "=")]
    assert len(values) == 1, (name, argv)
    return values[0]


def remote_words(argv):
    """The user's command inside a `run` ssh --command, as the workers' shell splits it."""
    words = shlex.split(flag(argv, "--command"))
    return words[words.index("&&", words.index("&&") + 1) + 1:]


def test_create_on_demand():
    (cmd,) = dry_run("create", *SLICE, "--accelerator-type=v3-32", "--project=my-proj")
    assert cmd[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "create", "bert"]
    assert "--zone=us-east1-d" in cmd and "--accelerator-type=v3-32" in cmd
    assert "--version=tpu-ubuntu2204-base" in cmd and "--project=my-proj" in cmd
    assert "--spot" not in cmd


def test_create_spot_is_a_queued_resource():
    (cmd,) = dry_run("create", *SLICE, "--accelerator-type=v5litepod-16", "--spot")
    assert cmd[:6] == ["gcloud", "compute", "tpus", "queued-resources", "create", "bert"]
    assert "--node-id=bert" in cmd and "--accelerator-type=v5litepod-16" in cmd
    assert "--runtime-version=v2-alpha-tpuv5-lite" in cmd and "--spot" in cmd
    (cmd,) = dry_run("create", *SLICE, "--accelerator-type=v3-32", "--spot",
                     "--runtime-version=my-runtime")
    assert "--runtime-version=my-runtime" in cmd


def test_setup_copies_head_to_every_worker_and_installs():
    archive, scp, ssh = dry_run("setup", *SLICE)
    assert archive[0] == "git" and "archive" in archive
    assert re.fullmatch("[0-9a-f]{40}", archive[-1])  # HEAD's commit, pinned for restarts
    tarball = archive[archive.index("-o") + 1]
    assert scp[:5] == ["gcloud", "compute", "tpus", "tpu-vm", "scp"]
    assert scp[5] == tarball and scp[6] == "bert:pretrainx.tar.gz" and "--worker=all" in scp
    assert ssh[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "bert"]
    assert "--worker=all" in ssh
    remote = flag(ssh, "--command")
    assert "tar -xzf pretrainx.tar.gz" in remote and 'install -q' in remote
    assert '-e ".[tpu]"' in remote


def test_setup_from_a_repository():
    (ssh,) = dry_run("setup", *SLICE, "--repo=https://example.com/org/pretrainx.git")
    remote = flag(ssh, "--command")
    assert "git clone -q --depth=1 https://example.com/org/pretrainx.git" in remote
    assert '-e ".[tpu]"' in remote and "--worker=all" in ssh


def test_run_keeps_the_command_intact():
    user = [*TRAIN, "--config.note=two words", "it's \"quoted\" $HOME; rm -rf /"]
    (cmd,) = dry_run("run", *SLICE, "--", *user)
    assert cmd[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "ssh", "bert"]
    assert "--worker=all" in cmd and "--zone=us-east1-d" in cmd
    assert flag(cmd, "--command").startswith("cd pretrainx && . ")
    assert remote_words(cmd) == user


def test_run_takes_a_single_word_as_a_shell_line():
    line = 'echo "a b" | tee out.txt && ls ~'
    (cmd,) = dry_run("run", *SLICE, "--", line)
    assert flag(cmd, "--command").endswith("&& " + line)


def test_delete():
    (cmd,) = dry_run("delete", *SLICE, "--quiet")
    assert cmd[:6] == ["gcloud", "compute", "tpus", "tpu-vm", "delete", "bert"]
    assert "--quiet" in cmd
    (cmd,) = dry_run("delete", *SLICE, "--spot")
    assert cmd[:6] == ["gcloud", "compute", "tpus", "queued-resources", "delete", "bert"]
    assert "--force" in cmd and "--quiet" not in cmd


def test_train_dry_run_prints_create_setup_run_once():
    cmds = dry_run("train", *SLICE, "--accelerator-type=v3-32", "--spot", "--", *TRAIN)
    assert [c[3:5] for c in cmds if c[0] == "gcloud"] == [
        ["queued-resources", "create"], ["tpu-vm", "scp"], ["tpu-vm", "ssh"], ["tpu-vm", "ssh"]]
    assert remote_words(cmds[-1]) == TRAIN


@pytest.mark.parametrize("args,missing", [
    (["create", "--zone=z", "--accelerator-type=v3-32"], "--name"),
    (["create", "--name=n", "--accelerator-type=v3-32"], "--zone"),
    (["create", *SLICE], "--accelerator-type"),
    (["run", *SLICE], "after --"),
    (["train", *SLICE, "--accelerator-type=v3-32", "--max-restarts=x", "--", "true"],
     "--max-restarts"),
])
def test_missing_options_are_one_line_errors(args, missing):
    result = launch("--dry-run", *args)
    assert result.returncode == 2 and result.stdout == ""
    assert len(result.stderr.splitlines()) == 1, result.stderr
    assert result.stderr.startswith("error: ") and missing in result.stderr


def test_help():
    result = launch("--help")
    assert result.returncode == 0 and result.stdout.startswith("usage: ")
    for word in ("create", "setup", "run", "train", "status", "stop", "delete", "--spot",
                 "--dry-run", "--max-restarts"):
        assert word in result.stdout


def test_options_come_from_the_environment():
    result = launch("create", "--dry-run", env={"TPU_NAME": "t", "ZONE": "z",
                                               "ACCELERATOR_TYPE": "v4-32"})
    assert result.returncode == 0, result.stderr
    cmd = shlex.split(result.stdout[2:])
    assert cmd[5] == "t" and "--zone=z" in cmd and "--accelerator-type=v4-32" in cmd


# ------------------------------------------------------------------ against a fake gcloud

FAKE = r'''
import json, os, shutil, subprocess, sys

args = sys.argv[1:]
with open(LOG, "a") as f:
    f.write(json.dumps(args) + "\n")
st = {"node": None, "qr": None, "runs": 0}
if os.path.exists(STATE):
    with open(STATE) as f:
        st = json.load(f)

def save():
    with open(STATE, "w") as f:
        json.dump(st, f)

def not_found():
    sys.stderr.write("ERROR: (gcloud) NOT_FOUND: Resource was not found\n")
    sys.exit(1)

group, verb = args[2], args[3]
if verb == "describe" and st.get("denied"):
    sys.stderr.write("ERROR: (gcloud) PERMISSION_DENIED: reauthentication required\n")
    sys.exit(1)
if group == "tpu-vm" and verb == "create":
    st["node"] = "READY"
elif group == "tpu-vm" and verb == "describe":
    if st["node"] is None:
        not_found()
    print(st["node"])
elif group == "tpu-vm" and verb == "delete":
    st["node"] = None
elif group == "queued-resources" and verb == "create":
    st["qr"] = "WAITING_FOR_RESOURCES"
elif group == "queued-resources" and verb == "describe":
    if st["qr"] is None:
        not_found()
    print(st["qr"])
    if st["qr"] != "ACTIVE" and st["qr"] != "SUSPENDED":  # granted at the next look
        st["qr"], st["node"] = "ACTIVE", "READY"
elif group == "queued-resources" and verb == "delete":
    assert "--force" in args
    st["qr"] = st["node"] = None
elif verb == "scp":
    shutil.copy(args[4], os.path.join(WORKER, args[5].split(":", 1)[1]))
elif verb == "ssh":
    command = next(a for a in args if a.startswith("--command="))[len("--command="):]
    if SHELL:  # one worker: the command line in a shell, at home
        env = dict(os.environ, HOME=WORKER, PATH=STUBS + os.pathsep + os.environ["PATH"])
        save()
        sys.exit(subprocess.run(["bash", "-c", command], cwd=WORKER, env=env).returncode)
    if st["node"] != "READY":
        sys.stderr.write("ssh: connect to host: Connection refused\n")
        save()
        sys.exit(255)
    if "pretrainx.main" in command:
        st["runs"] += 1
        if st["runs"] <= FAIL_RUNS:
            print(f"step {st['runs']}00: loss 7.0")
            st["denied"] = AFTER_FAIL == "DENIED"
            if AFTER_FAIL == "PREEMPTED":
                st["node"] = "PREEMPTED"
                if st["qr"]:
                    st["qr"] = "SUSPENDED"
            save()
            sys.exit(255 if AFTER_FAIL == "PREEMPTED" else 1)
        print("done: 1000/1000 steps")
    else:
        print("installed")
save()
'''


@pytest.fixture
def fake_gcloud(tmp_path):
    """Puts a recording gcloud first on PATH and returns run(*args, ...) -> (result,
    calls). It plays a slice that fails its first `fail_runs` training runs and then
    reads `after_fail`; with shell=True, ssh runs the command line in bash in a
    directory that stands for a worker's home, with a stub `uv`."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    worker, stubs = tmp_path / "worker", tmp_path / "stubs"
    worker.mkdir()
    stubs.mkdir()
    uv = stubs / "uv"  # records its calls; `uv venv DIR` makes a venv of this Python
    uv.write_text(rf"""#!/bin/sh
echo "$*" >>"$HOME/uv.log"
if [ "$1" = venv ]; then
  for a; do dir=$a; done
  mkdir -p "$dir/bin" && ln -s {shlex.quote(sys.executable)} "$dir/bin/python"
  echo "PATH=\"$dir/bin:\$PATH\"" >"$dir/bin/activate"
fi
""")
    uv.chmod(0o755)
    log, state = tmp_path / "calls.jsonl", tmp_path / "state.json"

    def run(*args, fail_runs=0, after_fail="PREEMPTED", shell=False):
        body = (f"LOG = {str(log)!r}\nSTATE = {str(state)!r}\nWORKER = {str(worker)!r}\n"
                f"STUBS = {str(stubs)!r}\nSHELL = {shell}\n"
                f"FAIL_RUNS = {fail_runs}\nAFTER_FAIL = {after_fail!r}\n" + FAKE)
        (tmp_path / "fake_gcloud.py").write_text(body)
        gcloud = bindir / "gcloud"
        gcloud.write_text(f"#!/bin/sh\nexec {shlex.quote(sys.executable)} "
                          f"{shlex.quote(str(tmp_path / 'fake_gcloud.py'))} \"$@\"\n")
        gcloud.chmod(0o755)
        env = {"PATH": f"{bindir}{os.pathsep}{os.environ.get('PATH', '')}",
               "PRETRAINX_TPU_POLL_SECONDS": "0", "PRETRAINX_TPU_RECHECK_SECONDS": "0"}
        result = launch(f"--log-dir={tmp_path / 'logs'}", *args, env=env, cwd=tmp_path)
        calls = [json.loads(line) for line in log.read_text().splitlines()]
        return result, calls

    run.worker, run.logs = worker, tmp_path / "logs"
    return run


def kind(call):
    group, verb = call[2], call[3]
    if verb == "ssh":
        command = next(a for a in call if a.startswith("--command="))
        return "run" if "pretrainx.main" in command else "setup"
    return {"describe": "describe", "create": "create", "delete": "delete"}.get(verb, verb)


def collapse(kinds):
    """Consecutive repeats as one (polls and the two state reads)."""
    return [k for i, k in enumerate(kinds) if i == 0 or k != kinds[i - 1]]


SPOT_TRAIN = ["train", *SLICE, "--accelerator-type=v3-32", "--spot",
              "--repo=https://example.com/pretrainx.git"]


def test_spot_train_restarts_after_a_preemption(fake_gcloud):
    result, calls = fake_gcloud(*SPOT_TRAIN, "--", *TRAIN, fail_runs=1)
    assert result.returncode == 0, result.stderr
    kinds = [kind(c) for c in calls]
    first_run = kinds.index("run")
    assert collapse(kinds[:first_run]) == ["describe", "create", "describe", "setup"]
    assert collapse(kinds[first_run:]) == [
        "run", "describe", "delete", "create", "describe", "setup", "run"]
    creates = [c for c in calls if kind(c) == "create"]
    assert len(creates) == 2 and all(c[2] == "queued-resources" and "--spot" in c
                                     for c in creates)
    deletes = [c for c in calls if kind(c) == "delete"]
    assert deletes[0][2] == "queued-resources" and "--quiet" in deletes[0]
    runs = [c for c in calls if kind(c) == "run"]
    assert runs[0] == runs[1] and "--worker=all" in runs[0]
    assert remote_words(runs[0]) == TRAIN
    assert "preempted: restart 1 of at most 10" in result.stderr
    (log,) = (fake_gcloud.logs / "bert").iterdir()
    text = log.read_text()
    assert "step 100: loss 7.0" in text and "done: 1000/1000 steps" in text


def test_failure_on_a_ready_slice_is_not_restarted(fake_gcloud):
    result, calls = fake_gcloud(*SPOT_TRAIN, "--", *TRAIN, fail_runs=1, after_fail="READY")
    assert result.returncode == 1
    kinds = [kind(c) for c in calls]
    after = kinds[kinds.index("run"):]
    assert after[0] == "run" and set(after[1:]) == {"describe"}
    assert kinds.count("create") == 1
    last = result.stderr.splitlines()[-1]
    assert last.startswith("error: ") and "READY" in last and "not restarting" in last


def test_unreadable_state_is_not_taken_for_a_preemption(fake_gcloud):
    result, calls = fake_gcloud(*SPOT_TRAIN, "--", *TRAIN, fail_runs=1, after_fail="DENIED")
    assert result.returncode == 1
    kinds = [kind(c) for c in calls]
    assert kinds[kinds.index("run"):] == ["run"] + ["describe"] * 3  # tried three times
    assert kinds.count("create") == 1
    last = result.stderr.splitlines()[-1]
    assert last.startswith("error: cannot read the state of bert") and "PERMISSION_DENIED" in last


def test_max_restarts_is_honoured(fake_gcloud):
    result, calls = fake_gcloud(*SPOT_TRAIN, "--max-restarts=2", "--", *TRAIN, fail_runs=100)
    assert result.returncode == 1
    kinds = [kind(c) for c in calls]
    assert kinds.count("run") == 3 and kinds.count("create") == 3
    assert kinds.count("delete") == 2
    assert "--max-restarts=2" in result.stderr.splitlines()[-1]


def test_on_demand_train_does_not_restart(fake_gcloud):
    result, calls = fake_gcloud("train", *SLICE, "--accelerator-type=v3-32",
                                "--repo=https://example.com/pretrainx.git", "--", *TRAIN,
                                fail_runs=1)
    assert result.returncode == 255
    kinds = [kind(c) for c in calls]
    assert collapse(kinds) == ["describe", "create", "setup", "run"]
    assert calls[kinds.index("create")][2] == "tpu-vm"


def test_existing_slice_is_reused(fake_gcloud):
    result, _ = fake_gcloud("create", *SLICE, "--accelerator-type=v3-32")
    assert result.returncode == 0, result.stderr
    result, calls = fake_gcloud("train", *SLICE, "--accelerator-type=v3-32",
                                "--repo=https://example.com/pretrainx.git", "--", *TRAIN)
    assert result.returncode == 0, result.stderr
    assert [kind(c) for c in calls].count("create") == 1


def test_setup_and_run_in_a_workers_shell(fake_gcloud):
    """The command lines that setup and run send, executed: HEAD unpacked into
    ~/pretrainx, the venv made and the project installed with its tpu extra, and the
    user's words arriving intact in ~/pretrainx with the venv's python."""
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout")
    result, calls = fake_gcloud("setup", *SLICE, shell=True)
    assert result.returncode == 0, result.stderr
    assert [kind(c) for c in calls] == ["scp", "setup"]
    home = fake_gcloud.worker
    assert (home / "pretrainx" / "pyproject.toml").is_file()
    assert (home / "pretrainx" / "pretrainx" / "main.py").is_file()
    assert not (home / "pretrainx.tar.gz").exists() and not (home / "pretrainx.new").exists()
    uv = (home / "uv.log").read_text().splitlines()
    assert uv[0].startswith("venv -q --python 3.12 ") and uv[0].endswith("/.pretrainx-venv")
    assert uv[1].startswith("pip install -q --python ") and uv[1].endswith(" -e .[tpu]")

    words = ["two words", "it's \"quoted\"", "$HOME", "*.txt", "a;b", ""]
    script = "import os, sys; print(os.getcwd(), sys.executable); print(sys.argv[1:])"
    result, _ = fake_gcloud("run", *SLICE, "--", "python", "-c", script, *words, shell=True)
    assert result.returncode == 0, result.stderr
    (log,) = (fake_gcloud.logs / "bert").iterdir()
    cwd, exe, argv = None, None, None
    for line in log.read_text().splitlines():
        if line.startswith(str(home)):
            cwd, exe = line.split()
        elif line.startswith("["):
            argv = ast.literal_eval(line)
    assert cwd == str(home / "pretrainx") and exe == str(home / ".pretrainx-venv/bin/python")
    assert argv == words


def test_delete_removes_the_queued_resource(fake_gcloud):
    fake_gcloud("create", *SLICE, "--accelerator-type=v3-32", "--spot")
    result, calls = fake_gcloud("delete", *SLICE, "--quiet")
    assert result.returncode == 0, result.stderr
    delete = calls[-1]
    assert delete[2:5] == ["queued-resources", "delete", "bert"] and "--force" in delete
    result, _ = fake_gcloud("status", *SLICE)
    assert result.stdout.strip() == "bert: no such slice in us-east1-d"
