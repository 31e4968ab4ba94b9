"""`python -m MODULE ARGS` for tests, forked from a process that has already imported
JAX, Flax, Orbax and pretrainx's training code, instead of a fresh interpreter that
imports them again (about 1.5 s of every CLI run, and the bad-input tests alone start
60). The child runs MODULE as `__main__` exactly as `python -m` would, with the given
argv, environment and working directory, its stdout and stderr in files; what comes
back is a subprocess.CompletedProcess, so a test reads it as it read subprocess.run's.

The forking process (the "server", one per test worker, started at first use) never
initialises a JAX backend, so XLA_FLAGS (read when a backend starts) take effect in each
child. JAX's own JAX_* variables are read when jax is imported: a call whose JAX_*
variables differ from the server's runs as a plain subprocess instead.
"""

import atexit
import json
import os
import pathlib
import subprocess
import sys
import tempfile

_SERVER = pathlib.Path(__file__).with_name("cli_fork_server.py")
_state = {}


def _jax_env(env) -> dict:
    return {k: v for k, v in env.items() if k.startswith("JAX_")}


def _server():
    server = _state.get("server")
    if server is None or server[0].poll() is not None:
        process = subprocess.Popen([sys.executable, str(_SERVER)], stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE, text=True, env=dict(os.environ))
        if process.stdout.readline().strip() != "ready":
            raise RuntimeError("tests/cli_fork_server.py did not start")
        server = _state["server"] = (process, _jax_env(os.environ))
        atexit.register(process.kill)
    return server


def run_module(module: str, args, *, cwd=None, env=None, timeout=300,
               check=False) -> subprocess.CompletedProcess:
    """What `subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, env=env,
    capture_output=True, text=True, timeout=timeout, check=check)` returns."""
    result = _run({"module": module}, [sys.executable, "-m", module], args, cwd, env, timeout)
    if check:
        result.check_returncode()
    return result


def run_script(path: str, args, *, cwd=None, env=None,
               timeout=300) -> subprocess.CompletedProcess:
    """`python PATH ARGS` as run_module runs `python -m MODULE ARGS`."""
    return _run({"path": str(path)}, [sys.executable, str(path)], args, cwd, env, timeout)


def _run(what: dict, command, args, cwd, env, timeout) -> subprocess.CompletedProcess:
    env = dict(os.environ if env is None else env)
    cwd = os.getcwd() if cwd is None else cwd
    args = [str(a) for a in args]
    argv = command + args

    def plain():
        return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True,
                              timeout=timeout)

    process, jax_env = _server()
    if _jax_env(env) != jax_env:
        return plain()
    with tempfile.TemporaryDirectory(prefix="cli_fork_") as scratch:
        out, err = os.path.join(scratch, "stdout"), os.path.join(scratch, "stderr")
        process.stdin.write(json.dumps({**what, "args": args,
                                        "cwd": str(cwd), "env": env, "stdout": out,
                                        "stderr": err, "timeout": timeout}) + "\n")
        process.stdin.flush()
        line = process.stdout.readline()
        if not line:  # the server died: this call as a plain subprocess, a new server next
            _state.pop("server", None)
            return plain()
        reply = json.loads(line)
        stdout, stderr = (pathlib.Path(p).read_text(errors="replace") for p in (out, err))
    if reply.get("timed_out"):
        raise subprocess.TimeoutExpired(argv, timeout, stdout, stderr)
    return subprocess.CompletedProcess(argv, reply["returncode"], stdout, stderr)
