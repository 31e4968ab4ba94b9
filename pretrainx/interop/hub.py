"""Uploading an exported HF directory to the Hugging Face Hub (huggingface_hub), private
unless asked otherwise, with the token from the environment. The export is written
first and stays where it is whatever the upload does."""

import os
import re

from pretrainx.errors import UserError

TOKEN_VARIABLES = ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN")


def token() -> str:
    """The Hub token from the environment; a one-line refusal where there is none."""
    for name in TOKEN_VARIABLES:
        if os.environ.get(name):
            return os.environ[name]
    raise UserError("--push_to_hub needs a Hub token with write access in HF_TOKEN "
                    "(huggingface.co/settings/tokens); nothing was exported")


def check_repo(repo_id: str) -> str:
    if not re.fullmatch(r"[\w.-]+/[\w.-]+", repo_id or ""):
        raise UserError(f"--push_to_hub={repo_id!r}: expected OWNER/NAME")
    return repo_id


def push(folder: str, repo_id: str, hub_token: str, private: bool = True, api=None) -> str:
    """Create `repo_id` (a model repository; kept if it exists) and upload `folder` to
    it; returns the repository's URL. `api`: an HfApi-like object (tests pass one)."""
    if api is None:
        try:
            import huggingface_hub
        except ImportError:
            raise UserError("--push_to_hub needs huggingface_hub: pip install "
                            f"huggingface_hub (the export is in {folder})") from None
        api = huggingface_hub.HfApi(token=hub_token)
    try:
        url = api.create_repo(repo_id, repo_type="model", private=private, exist_ok=True)
        api.upload_folder(folder_path=folder, repo_id=repo_id, repo_type="model",
                          commit_message="Upload from pretrainx.export")
    except Exception as e:  # no network, a refused token, a name taken by another owner
        first = str(e).splitlines()[0][:300] if str(e) else type(e).__name__
        raise UserError(f"upload of {folder} to {repo_id} failed ({first}); the export "
                        "is on disk") from None
    return str(url)
