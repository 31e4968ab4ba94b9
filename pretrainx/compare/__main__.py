"""python -m pretrainx.compare --grid=FILE --workdir=DIR [--status] [--cells=A,B]

Runs every cell of the grid (pretrainx/compare/grid.py says what a grid holds) that is
not done, each in DIR/CELL (its pretraining and fine-tunings resumable, so the table
fills over several sittings), then writes DIR/compare.md (Narang et al.'s columns),
DIR/compare.json and DIR/compare.png (the task mean against the FLOPs spent) over the
cells done. --status lists each cell as done, started or missing, with its fine-tunings
done, and trains nothing. A cell whose pretraining a signal stops (a preemption) is
fine-tuned by no one: the command ends there ({"stopped": CELL}) and a rerun resumes it.
The last line printed is one JSON object.

Compiled programs are cached in DIR/jax_cache (unless a JAX compilation cache is set):
a cell's fine-tunings of one task share their shapes, so all but the first skip XLA.
"""

import argparse
import os
import sys

import jax

from pretrainx.compare import cells, grid as grid_lib, table
from pretrainx.errors import UserError, json_command


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m pretrainx.compare", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--grid", required=True, help="a Python or YAML grid file")
    parser.add_argument("--workdir", required=True, help="where every cell's runs go")
    parser.add_argument("--status", action="store_true", help="list cells; train nothing")
    parser.add_argument("--cells", default="", help="only these cells (comma-separated)")
    args = parser.parse_args(argv)
    os.environ.setdefault("JAX_PLATFORMS", "cpu")

    def run():
        grid = grid_lib.read(args.grid)
        names = [n for n in args.cells.split(",") if n] or list(grid.cells)
        missing = [n for n in names if n not in grid.cells]
        if missing:
            raise UserError(f"--cells names {', '.join(missing)}, not in {args.grid} "
                            f"({', '.join(grid.cells)})")
        if args.status:
            rows = cells.status(grid, args.workdir)
            for name, state, tuned in rows:
                print(f"{name:24} {state:20} fine-tunings {tuned}")
            return {"status": [{"cell": n, "state": s, "finetunings": t} for n, s, t in rows]}
        os.makedirs(args.workdir, exist_ok=True)
        if not jax.config.jax_compilation_cache_dir:
            jax.config.update("jax_compilation_cache_dir",
                              os.path.join(args.workdir, "jax_cache"))
        records = []
        for name in names:
            record = cells.run(grid, name, args.workdir)
            if record is None:  # stopped by a signal: leave as the run would
                return {"cells": len(records), "stopped": name}
            records.append(record)
        written = table.write(records, grid, args.workdir)
        print(written["table"])
        return {"cells": len(records), "table": os.path.join(args.workdir, "compare.md"),
                "plot": written["plot"]}
    return json_command(run)


if __name__ == "__main__":
    sys.exit(main())
