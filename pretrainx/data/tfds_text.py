"""A TFDS builder that turns local text files into an ArrayRecord TFDS dataset.

    python -m pretrainx.data build_tfds --input=GLOB[,GLOB] --data_dir=DIR [--name=NAME]

One record per document: `text` (its sentences a line, as web corpora keep
paragraphs) and `sentences` (the split the files' reader made, which the reader
of records takes as it is), so `tfds:pretrainx_text/NAME` in a config reads the
same documents as the files themselves, through the same `tfds.data_source`
path that Wikipedia or C4 take on a machine where they are prepared.
"""

import tensorflow_datasets as tfds

from pretrainx.data import sources

DATASET = "pretrainx_text"


class PretrainxText(tfds.core.GeneratorBasedBuilder):
    """Local text files as a TFDS dataset; each config NAME is one corpus."""

    name = DATASET
    VERSION = tfds.core.Version("1.0.0")
    # Records keep the files' order, so reading the dataset gives the files' documents.
    disable_shuffling = True
    RELEASE_NOTES = {"1.0.0": "One record per document: text (sentences a line), source file."}

    def __init__(self, *, files=(), fmt="auto", **kwargs):
        self._files, self._fmt = list(files), fmt
        super().__init__(**kwargs)

    def _info(self):
        # Built directly: dataset_info_from_configs needs the builder inside a package dir.
        return tfds.core.DatasetInfo(
            builder=self,
            description="Local text files, one record per document.",
            disable_shuffling=True,
            features=tfds.features.FeaturesDict({
                "text": tfds.features.Text(),
                "sentences": tfds.features.Sequence(tfds.features.Text()),
                "source": tfds.features.Text(),
            }),
        )

    def _split_generators(self, dl_manager):
        del dl_manager  # nothing is downloaded
        return {"train": self._generate_examples()}

    def _generate_examples(self):
        # Unshuffled TFDS orders records by key: zero-padded keys keep the files' order.
        for u, unit in enumerate(sources.list_units(self._files)):
            docs = sources.unit_documents(unit, self._fmt)
            for i, doc in enumerate(docs):
                yield f"{u:06d}-{i:09d}", {"text": "\n".join(doc), "sentences": doc,
                                               "source": unit.path}


def build(files, data_dir: str, name: str = "default", fmt: str = "auto") -> str:
    """Prepares the dataset and returns its tfds: spec for data.train_files."""
    config = tfds.core.BuilderConfig(name=name, description=f"corpus {name}")
    builder = PretrainxText(files=sources.expand_patterns(files), fmt=fmt, config=config,
                            data_dir=data_dir, file_format="array_record")
    builder.download_and_prepare(
        download_config=tfds.download.DownloadConfig(try_download_gcs=False))
    return f"tfds:{DATASET}/{name}@train"
