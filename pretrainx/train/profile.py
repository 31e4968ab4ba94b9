"""A jax.profiler trace of a few train steps, for TensorBoard's profile tab."""

import jax

from pretrainx.train import metrics as metrics_lib


class StepProfiler:
    """Traces `count` steps starting `skip` steps after the run (re)starts, so that
    a resumed run also leaves compilation and warm-up out of the trace."""

    def __init__(self, workdir: str, first_step: int, skip: int, count: int):
        self.directory = f"{workdir.rstrip('/')}/profile"
        self.begin, self.end = first_step + skip, first_step + skip + count
        self.enabled = count > 0
        self.active = False

    def before_step(self, step: int):
        if self.enabled and step == self.begin:
            jax.profiler.start_trace(self.directory)
            self.active = True

    def after_step(self, step: int, outputs):
        if self.active and step >= self.end:
            jax.block_until_ready(outputs)  # the trace must hold the steps' device work
            self.close()
            metrics_lib.log(f"profile of steps ({self.begin}, {self.end}] written to "
                            f"{self.directory} (tensorboard --logdir={self.directory})")

    def close(self):
        if self.active:
            jax.profiler.stop_trace()
            self.active = False
