"""The forking side of tests/cli_fork.py: imports what pretrainx's CLIs import (not the
CLI modules themselves, whose absl flags a child defines as `python -m` would), then
for each request on stdin (one JSON line) forks a child that runs the module as
`__main__` (or a script, as `python SCRIPT` would) and answers with its exit status
(one JSON line on stdout)."""

import gc
import importlib
import json
import os
import runpy
import signal
import sys
import time
import traceback

# The checkout's pretrainx (as `python -m` from its root finds it), then what a child inherits.
sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
for _name in ("pretrainx.jobs", "pretrainx.pretrain", "pretrainx.interop",
              "pretrainx.finetune.loop"):
    importlib.import_module(_name)
# What the tests' own processes do (conftest.py: GC_THRESHOLDS), and the imports above
# moved out of the collector's sight: a child never scans them again in a full collection.
gc.set_threshold(50_000, 20, 10)
gc.collect()
gc.freeze()


def _child(request) -> int:
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    module, path = request.get("module"), os.path.abspath(request.get("path") or ".")
    # sys.path as a new interpreter starts it: the working directory (python -m) or the
    # script's folder first, then PYTHONPATH's folders
    sys.path[0] = os.getcwd() if module else os.path.dirname(path)
    extra = [p for p in request["env"].get("PYTHONPATH", "").split(os.pathsep) if p]
    sys.path[1:1] = [p for p in extra if p not in sys.path]
    try:
        if module:
            sys.argv = ["-m", *request["args"]]
            runpy.run_module(module, run_name="__main__", alter_sys=True)
        else:  # python SCRIPT ARGS
            sys.argv = [request["path"], *request["args"]]
            runpy.run_path(path, run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None or isinstance(e.code, int):
            return e.code or 0
        print(e.code, file=sys.stderr)
        return 1
    except BaseException:  # noqa: BLE001  (what the interpreter does with an uncaught one)
        traceback.print_exc()
        return 1


def _wait(pid: int, timeout: float) -> dict:
    end = time.monotonic() + timeout
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return {"returncode": os.waitstatus_to_exitcode(status)}
        if time.monotonic() > end:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return {"returncode": -signal.SIGKILL, "timed_out": True}
        time.sleep(0.01)


def main():
    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                code = _child(request)
            finally:
                for stream in (sys.stdout, sys.stderr):
                    try:
                        stream.flush()
                    except Exception:  # noqa: BLE001
                        pass
                os._exit(code)
        print(json.dumps(_wait(pid, request["timeout"])), flush=True)


if __name__ == "__main__":
    main()
