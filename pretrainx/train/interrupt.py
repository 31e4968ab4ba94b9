"""A signal before a run's first step ends the process at once, quietly.

Until the loop's checkpoint hook takes over (train/preemption.py: finish the step, save,
exit 0), there is nothing to save: Ctrl-C, SIGTERM or SIGHUP while the run imports,
restores or reads its corpus exits with 128 + the signal and one line. Python's own
Ctrl-C raises KeyboardInterrupt wherever the main thread is, which JAX's callbacks may
swallow (the run went on) and which unwinds into interpreter shutdown while XLA's,
grain's and tensorstore's threads still run (a segmentation fault). This module imports
nothing slow, so `python -m pretrainx.main` installs it before anything else.
What a run writes before its first step survives a kill at any moment (docs/reliability.md).
"""

import os
import signal
import sys
import threading

SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _exit_now(signum, frame):
    name = signal.Signals(signum).name
    try:
        sys.stdout.flush()
        sys.stderr.write(f"\n{name} before the first step: exiting (nothing to save)\n")
        sys.stderr.flush()
    finally:
        os._exit(128 + signum)


def install() -> dict:
    """Exit at once on SIGINT, SIGTERM and SIGHUP; returns the handlers it replaced
    ({} off the main thread, where Python sets none)."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {signum: signal.signal(signum, _exit_now) for signum in SIGNALS}


def restore(previous: dict) -> None:
    for signum, handler in previous.items():
        signal.signal(signum, handler)


def leave_sigterm_to_jax() -> None:
    """Before jax.distributed starts a multi-process job: JAX's preemption service
    takes SIGTERM there (every host must save the same step), so it finds the default."""
    if (threading.current_thread() is threading.main_thread()
            and signal.getsignal(signal.SIGTERM) is _exit_now):
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
