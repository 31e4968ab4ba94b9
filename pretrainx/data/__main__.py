"""`python -m pretrainx.data ...` runs the data CLI, pretrainx/prepare/data_cli.py.

The CLI builds objectives' examples and a run's datasets, which this package (a
lower floor) never imports; this forwarder keeps the documented command.
"""

import runpy

if __name__ == "__main__":
    runpy.run_module("pretrainx.prepare.data_cli", run_name="__main__", alter_sys=True)
