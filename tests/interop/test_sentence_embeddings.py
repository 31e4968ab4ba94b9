"""Sentence embeddings: an encoder's HF export carries sentence-transformers' files, and
`SentenceTransformer(EXPORT_DIR)` gives the vectors pretrainx.load(...).embed computes
for the same real sentences, pooled as the family's fine-tuning pools."""

import json

import numpy as np
import pytest

pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
sentence_transformers = pytest.importorskip("sentence_transformers")

from test_interop import SENTENCES, _tiny_hf  # noqa: E402
from pretrainx import interop  # noqa: E402


@pytest.mark.parametrize("family,pooling", [("bert", "cls"), ("roberta", "cls"),
                                            ("deberta", "cls"), ("modernbert", "cls"),
                                            ("modernbert", "mean"), ("distilbert", "cls")])
def test_sentence_transformers_loads_the_export_and_gives_our_embeddings(tmp_path, family,
                                                                          pooling):
    import pretrainx
    import torch
    torch.manual_seed(0)
    theirs, files = _tiny_hf(family, tie=True)
    if family == "modernbert":
        theirs.config.classifier_pooling = pooling
    theirs.save_pretrained(tmp_path / "hf")
    for name, source in files.items():
        (tmp_path / "hf" / name).write_bytes(open(source, "rb").read())
    out = tmp_path / "export"
    written = interop.hf.save(interop.load(str(tmp_path / "hf")), str(out))
    assert {"modules.json", "1_Pooling/config.json"} <= set(written)
    modes = json.loads((out / "1_Pooling" / "config.json").read_text())
    assert modes[f"pooling_mode_{'cls_token' if pooling == 'cls' else 'mean_tokens'}"] is True
    assert sum(v is True for k, v in modes.items() if k.startswith("pooling_mode_")) == 1
    st = sentence_transformers.SentenceTransformer(str(out), device="cpu")
    theirs_vectors = st.encode(SENTENCES, convert_to_numpy=True, batch_size=3)
    ours = pretrainx.load(str(out)).embed(SENTENCES)
    assert ours.shape == theirs_vectors.shape == (3, 32)
    assert np.abs(ours - theirs_vectors).max() <= 1e-5


def test_decoders_export_no_sentence_files_and_give_no_embeddings(tmp_path):
    import pretrainx
    from pretrainx.errors import UserError
    theirs, files = _tiny_hf("gpt2", tie=True)
    theirs.save_pretrained(tmp_path / "hf")
    for name, source in files.items():
        (tmp_path / "hf" / name).write_bytes(open(source, "rb").read())
    written = interop.hf.save(interop.load(str(tmp_path / "hf")), str(tmp_path / "out"))
    assert "modules.json" not in written and not (tmp_path / "out" / "modules.json").exists()
    with pytest.raises(UserError, match="gpt2 is not a sentence encoder"):
        pretrainx.load(str(tmp_path / "hf")).embed(SENTENCES)
