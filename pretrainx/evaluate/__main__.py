"""`python -m pretrainx.evaluate ...` runs pretrainx/evaluate/heldout.py."""

import runpy

if __name__ == "__main__":
    runpy.run_module("pretrainx.evaluate.heldout", run_name="__main__", alter_sys=True)
