"""python -m pretrainx.export --workdir=DIR --output=HF_DIR [--license=apache-2.0]
                             [--push_to_hub=OWNER/NAME [--public]]

Writes a pretraining or fine-tuning workdir's model (LoRA merged) as a HuggingFace
directory: config.json, model.safetensors, the tokenizer files, which
`transformers.AutoModel*.from_pretrained(HF_DIR)` loads, and a README.md model card.
A family with a format of its own writes that instead (word2vec: vectors.txt/.bin).
With --push_to_hub it then uploads the directory (private unless --public; the token
from HF_TOKEN).
"""

from absl import flags

from pretrainx import interop, models
from pretrainx import cli
from pretrainx.interop import hf, hub
from pretrainx.errors import UserError

# --workdir is pretrainx.main's flag: a pretraining or fine-tuning workdir here.
_OUTPUT = flags.DEFINE_string("output", None, "The HuggingFace directory to write (new or empty).")
_LICENSE = flags.DEFINE_string(
    "license", "unknown", "The model card's license: a Hub license identifier (apache-2.0, "
    "mit, cc-by-4.0, ...); the weights' terms follow from the training data's")
_PUSH = flags.DEFINE_string("push_to_hub", None,
                            "OWNER/NAME: upload the export to the Hugging Face Hub")
_PUBLIC = flags.DEFINE_bool("public", False, "With --push_to_hub: a public repository")


def run(argv) -> int:
    if len(argv) > 1:
        raise UserError(f"unexpected arguments: {' '.join(argv[1:])}")
    if not cli.workdir() or not _OUTPUT.value:
        raise UserError("--workdir and --output are required")
    hub_token = None
    if _PUSH.value:  # refused before anything is written
        hub_token = hub.token() if hub.check_repo(_PUSH.value) else None
    pretrained = interop.load(cli.workdir())
    family = models.FAMILIES.find(pretrained.family)
    if family is not None and family.export is not None:
        if _PUSH.value:
            raise UserError(f"--push_to_hub uploads HF directories; a {pretrained.family} "
                            "export is its own files")
        written = family.export(pretrained, _OUTPUT.value)
        print(f"exported {pretrained.source} to {_OUTPUT.value}: " + ", ".join(written))
        return 0
    written = hf.save(pretrained, _OUTPUT.value, license_id=_LICENSE.value)
    print(f"exported {pretrained.source} ({pretrained.head}) to {_OUTPUT.value}: "
          + ", ".join(written))
    note = hf.caveat(pretrained)
    if note:
        print(f"note: {note}")
    if _PUSH.value:
        url = hub.push(_OUTPUT.value, _PUSH.value, hub_token, private=not _PUBLIC.value)
        print(f"uploaded to {url} ({'public' if _PUBLIC.value else 'private'})")
    return 0


if __name__ == "__main__":
    cli.main(run)
