"""Stopping cleanly when asked: SIGTERM (a TPU VM's preemption notice), SIGHUP or SIGINT.

The first signal lets the loop finish its step, save a checkpoint and exit 0; a
second ends the process at once. On a multi-process job every host must save the
same step, so SIGTERM is left to JAX's preemption service and the loop asks Orbax
whether the hosts reached their common sync point.
"""

import os
import signal
import threading

import jax

from pretrainx.train import metrics as metrics_lib


class StopRequest:
    def __init__(self):
        self.signal_name = None
        self._previous = {}

    def install(self):
        if threading.current_thread() is not threading.main_thread():
            return self  # signal handlers belong to the main thread
        signums = [signal.SIGINT]
        if jax.process_count() == 1:  # a closed terminal (SIGHUP) stops it as SIGTERM does
            signums += [signal.SIGTERM, signal.SIGHUP]
        for signum in signums:
            self._previous[signum] = signal.signal(signum, self._handle)
        return self

    def uninstall(self):
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous = {}

    def _handle(self, signum, frame):
        name = signal.Signals(signum).name
        if self.signal_name is not None:
            metrics_lib.log(f"{name} again: exiting now, without a checkpoint")
            os._exit(128 + signum)
        self.signal_name = name
        metrics_lib.log(f"{name}: finishing this step and saving a checkpoint "
                        "(send it again to exit at once)")

    def __bool__(self):
        return self.signal_name is not None
