"""Which XLA flags the installed jaxlib knows, found without importing jax here.

XLA aborts the whole process (a fatal log, no exception) at the first flag in XLA_FLAGS
it does not know, and flags come and go between releases: jaxlib 0.12 dropped
`--xla_cpu_use_fusion_emitters`, which 0.10 has. So a test setting is asked of the
installed jaxlib in a child process, once per jaxlib version (the answer is kept in the
tests' cache folder), and a flag it refuses is left out instead of ending the run.
"""

import importlib.metadata
import json
import os
import pathlib
import re
import subprocess
import sys

_UNKNOWN = re.compile(r"Unknown flags? in XLA_FLAGS: (\S+)")


def _refused(flags: list, timeout: float = 300) -> str | None:
    """None if a CPU backend starts under `flags`, else the first flag XLA refused."""
    env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
    env.update(XLA_FLAGS=" ".join(flags), JAX_PLATFORMS="cpu")
    result = subprocess.run([sys.executable, "-c", "import jax; jax.devices('cpu')"],
                            env=env, capture_output=True, text=True, timeout=timeout)
    if result.returncode == 0:
        return None
    said = _UNKNOWN.search(result.stderr)
    if said is None:  # not a flag's fault: say so rather than guess which one
        raise RuntimeError(f"a CPU backend did not start under XLA_FLAGS={' '.join(flags)}:\n"
                           + result.stderr[-2000:])
    return next((f for f in flags if f.split("=")[0] == said.group(1).split("=")[0]),
                said.group(1))


def known(flags: list, cache_dir: pathlib.Path) -> list:
    """The entries of `flags` (each "--name=value") that the installed jaxlib accepts,
    in their order."""
    version = importlib.metadata.version("jaxlib")
    record = cache_dir / f"xla-flags-jaxlib-{version}.json"
    try:
        answers = json.loads(record.read_text())
    except (OSError, ValueError):
        answers = {}
    asked = [f for f in flags if f not in answers]
    if asked:
        trying = list(asked)
        while trying:  # each refusal names one flag: drop it and ask again
            refused = _refused(trying)
            if refused is None:
                break
            if refused not in trying:
                raise RuntimeError(f"XLA refused {refused}, which is not among {trying}")
            answers[refused] = False
            trying.remove(refused)
        answers.update({f: True for f in trying})
        cache_dir.mkdir(parents=True, exist_ok=True)
        partial = record.with_suffix(f".{os.getpid()}.partial")
        partial.write_text(json.dumps(answers, indent=1, sort_keys=True))
        os.replace(partial, record)  # two workers asking at once write the same answer
    return [f for f in flags if answers[f]]
