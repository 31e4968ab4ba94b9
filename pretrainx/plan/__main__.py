"""`python -m pretrainx.plan ...` runs the planner, pretrainx/plan/planner.py."""

import runpy

if __name__ == "__main__":
    runpy.run_module("pretrainx.plan.planner", run_name="__main__", alter_sys=True)
