"""An HF export carries a model card of what its run recorded, and --push_to_hub hands
the export to huggingface_hub (checked here with a stand-in for the Hub: no network)."""

import json

import pytest

from pretrainx import interop
from pretrainx.errors import UserError
from pretrainx.interop import hf, hub


def _records(workdir, split):
    rows = [json.loads(line) for line in open(f"{workdir}/metrics.jsonl", encoding="utf-8")]
    return [r for r in rows if r.get("split", "train") == split]


def test_an_export_carries_a_model_card_of_its_run(pretrained_workdir, tmp_path):
    out = tmp_path / "hf"
    written = hf.save(interop.load(pretrained_workdir), str(out), license_id="apache-2.0")
    assert "README.md" in written
    text = (out / "README.md").read_text(encoding="utf-8")
    front, body = text.split("---\n")[1], text.split("---\n", 2)[2]
    assert "license: apache-2.0" in front and "pipeline_tag: fill-mask" in front
    assert "- pretrainx" in front and "- bert" in front
    config = json.loads((out / "config.json").read_text())
    architecture = config["architectures"][0]
    assert f"{architecture}.from_pretrained" in body
    assert "steps: 3 of 3" in body
    assert "sequence positions trained: 1,536" in body  # 3 steps x 8 rows x 64
    assert "training data: " in body and "pg1342_pride_and_prejudice.txt" in body
    evals = _records(pretrained_workdir, "eval")
    if evals:
        assert f"| mlm_accuracy | {evals[-1]['mlm_accuracy']:.4f} |" in body
    else:
        assert "No evaluation was recorded." in body


def test_an_imported_folder_exports_with_a_card_that_says_it_was_converted(
        pretrained_workdir, tmp_path):
    hf.save(interop.load(pretrained_workdir), str(tmp_path / "a"))
    hf.save(interop.load(str(tmp_path / "a")), str(tmp_path / "b"))
    card = (tmp_path / "b" / "README.md").read_text(encoding="utf-8")
    assert "license: unknown" in card and "converted from the directory above" in card


class _Hub:
    """Records what the export asks of huggingface_hub.HfApi."""

    def __init__(self, fail=None):
        self.calls, self.fail = [], fail

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))
        if self.fail:
            raise self.fail
        return f"https://huggingface.co/{repo_id}"

    def upload_folder(self, **kwargs):
        self.calls.append(("upload_folder", kwargs))


def test_push_creates_a_private_repository_and_uploads_the_folder(tmp_path):
    fake = _Hub()
    url = hub.push(str(tmp_path), "someone/tiny-bert", "token", api=fake)
    assert url == "https://huggingface.co/someone/tiny-bert"
    (_, repo, create), (_, upload) = fake.calls
    assert repo == "someone/tiny-bert" and create["private"] is True and create["exist_ok"]
    assert upload["folder_path"] == str(tmp_path) and upload["repo_id"] == "someone/tiny-bert"


def test_a_failed_upload_is_one_line_naming_the_repository(tmp_path):
    with pytest.raises(UserError, match="someone/tiny-bert failed.*no network.*on disk"):
        hub.push(str(tmp_path), "someone/tiny-bert", "token",
                 api=_Hub(fail=ConnectionError("no network")))


@pytest.mark.parametrize("name", ["tiny-bert", "a/b/c", ""])
def test_a_repository_name_must_be_owner_slash_name(name):
    with pytest.raises(UserError, match="OWNER/NAME"):
        hub.check_repo(name)
