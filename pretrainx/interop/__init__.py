"""Models in and out: our workdirs (pretraining or fine-tuning) and HuggingFace
directories, as one `Pretrained` record of config, parameters and tokenizer."""

import dataclasses
import os
from typing import Callable

from pretrainx.errors import UserError
from pretrainx import registry
import pretrainx.interop.hf as hf
import pretrainx.interop.workdir as workdir
# What the rest of pretrainx uses, in one place:
from pretrainx.interop.pretrained import (Pretrained, graft, stack_layers,  # noqa: F401
                                          unstack_layers)
from pretrainx.interop.workdir import FINETUNE_FILE, save_finetuned  # noqa: F401


@dataclasses.dataclass(frozen=True)
class Format:
    """Another project's checkpoint layout a family reads (google-research BERT's)."""
    name: str
    marker: str  # the file a directory of this layout has
    load: Callable  # (path) -> Pretrained


FORMATS = registry.View("checkpoint format", registry.FAMILIES, "formats")


def load(path: str) -> Pretrained:
    """A pretraining workdir (its latest checkpoint, or WORKDIR/checkpoints/STEP for an
    earlier one), a fine-tuning workdir or a HuggingFace directory."""
    path = os.path.expanduser(path)
    where = os.path.normpath(path)
    step, folder = os.path.basename(where), os.path.dirname(where)
    if (step.isdigit() and os.path.basename(folder) == "checkpoints"
            and os.path.isdir(folder)):  # a missing step is named with the ones there are
        return workdir.load_pretraining(os.path.dirname(folder), int(step))
    if "://" not in path and not os.path.isdir(path):
        raise UserError(f"init_from {path} is not a directory")
    if os.path.isfile(os.path.join(path, FINETUNE_FILE)):
        return workdir.load_finetuned(path)
    if os.path.isdir(os.path.join(path, "checkpoints")):
        return workdir.load_pretraining(path)
    if os.path.isfile(os.path.join(path, "config.json")):
        return hf.load(path)
    for fmt in FORMATS.entries():
        if os.path.isfile(os.path.join(path, fmt.marker)):
            return fmt.load(path)
    kinds = [f"a pretrainx workdir (checkpoints/, {FINETUNE_FILE})",
             "a HuggingFace model directory (config.json)",
             *(f"a {f.name} ({f.marker})" for f in FORMATS.entries())]
    raise UserError(f"{path} is neither {', '.join(kinds[:-1])} nor {kinds[-1]}")


