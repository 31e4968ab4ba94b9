"""The deviceless planner (python -m pretrainx.plan): compiles a recipe's train step
for a TPU topology without the chips and reports whether it fits and how fast it
should run. `planner` is the command; `hlo_bytes` reads the compiled program's memory
traffic, `dcn_traffic` the bytes between slices, `kernel_cost` the Pallas kernels'
cost that XLA cannot see."""
