"""The training loop and what a step needs: `loop` (train and describe), `run` (what is
settled before the first step), `hooks` (metrics, evaluation, phase switches,
checkpoints), `step` (the jitted train step), `optim` and `schedules` (the recipes'
optimizers and learning rates), `phases`, `checkpoint` (Orbax: state, data position, config), `metrics`
(tokens/s, MFU from `chips`), preemption, interrupts and budgets. It never imports
interop: a run started from another model gets it as an `init` function."""
