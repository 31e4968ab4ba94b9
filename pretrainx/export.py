"""python -m pretrainx.export --workdir=DIR --output=HF_DIR

Writes a pretraining or fine-tuning workdir's model (LoRA merged) as a HuggingFace
directory: config.json, model.safetensors and the tokenizer files, which
`transformers.AutoModel*.from_pretrained(HF_DIR)` loads.
"""

from absl import flags

from pretrainx import interop
from pretrainx import main as main_lib
from pretrainx.interop import hf
from pretrainx.errors import UserError

# --workdir is pretrainx.main's flag: a pretraining or fine-tuning workdir here.
_OUTPUT = flags.DEFINE_string("output", None, "The HuggingFace directory to write (new or empty).")


def run(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not flags.FLAGS.workdir or not _OUTPUT.value:
        raise UserError("--workdir and --output are required")
    pretrained = interop.load(flags.FLAGS.workdir)
    written = hf.save(pretrained, _OUTPUT.value)
    print(f"exported {pretrained.source} ({pretrained.head}) to {_OUTPUT.value}: "
          + ", ".join(written))
    note = hf.caveat(pretrained)
    if note:
        print(f"note: {note}")
    return 0


if __name__ == "__main__":
    main_lib.cli(run)
