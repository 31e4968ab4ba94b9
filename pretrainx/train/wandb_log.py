"""Weights & Biases: the records metrics.jsonl holds (train, eval, probes), and the
resolved config, logged from process 0 (MetricsWriter only writes there).

A resumed run continues the same W&B run: its id is kept in WORKDIR/wandb_run_id,
written before the first record. Series are plotted against their own `step` field
(`define_metric`), not W&B's internal counter, so records a resume writes again for
steps after the last checkpoint land at their steps instead of being dropped as out of
order. WANDB_MODE=offline (or `wandb offline`) keeps everything in WORKDIR/wandb for a
later `wandb sync`.
"""

import os
import secrets
import tempfile

from etils import epath

from pretrainx.errors import UserError

RUN_ID_FILE = "wandb_run_id"


def run_id(workdir: str, new_id) -> str:
    """The W&B run id of this workdir: the stored one, else `new_id()` stored now."""
    path = epath.Path(workdir) / RUN_ID_FILE
    if path.exists():
        return path.read_text().strip()
    value = new_id()
    path.write_text(value + "\n")
    return value


class WandbSink:
    """One W&B run; `log(record)` takes a metrics.jsonl record."""

    def __init__(self, workdir: str, settings, config: dict):
        import wandb
        local = "://" not in workdir  # W&B keeps its files on local disk
        directory = workdir if local else tempfile.mkdtemp(prefix="pretrainx-wandb-")
        os.makedirs(directory, exist_ok=True)
        tags = [t.strip() for t in settings.wandb_tags.split(",") if t.strip()]
        try:
            self._run = wandb.init(
                project=settings.wandb_project, entity=settings.wandb_entity or None,
                name=settings.wandb_run_name or os.path.basename(os.path.normpath(workdir)),
                tags=tags, id=run_id(workdir, lambda: secrets.token_hex(4)), resume="allow",
                dir=directory, config=config)
        except Exception as e:  # noqa: BLE001 - no login, no network, a bad entity
            reason = " ".join(str(e).split())[:200] or type(e).__name__
            raise UserError(f"Weights & Biases did not start ({type(e).__name__}: {reason}); "
                            "run `wandb login`, or set WANDB_MODE=offline to log locally, or "
                            "logging.wandb=False") from None
        self._run.define_metric("step")
        self._run.define_metric("*", step_metric="step")

    def log(self, record: dict) -> None:
        """Numbers under SPLIT[/SOURCE]/KEY, as TensorBoard has them, at the record's step."""
        prefix = record.get("split", "train")
        if "source" in record:
            prefix = f"{prefix}/{record['source']}"
        values = {f"{prefix}/{key}": value for key, value in record.items()
                  if isinstance(value, (int, float)) and not isinstance(value, bool)
                  and key != "step"}
        self._run.log(dict(values, step=record["step"]))

    def close(self) -> None:
        self._run.finish()
