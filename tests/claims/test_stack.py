"""The supported range is the tested one: pyproject.toml's floors are the versions CI's
oldest leg pins (.ci/oldest-stack.txt), and .ci/run runs both ends of the range."""

import re
import tomllib

from conftest import REPO


def _floors() -> dict:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    floors = {}
    for requirement in project["dependencies"]:
        name, op, version = re.match(r"([A-Za-z0-9_.-]+)\s*(>=|==)?\s*([^;,\s]*)",
                                     requirement).groups()
        floors[name.lower().replace("_", "-")] = version if op == ">=" else None
    return floors


def _pins() -> dict:
    lines = (REPO / ".ci" / "oldest-stack.txt").read_text().splitlines()
    return dict(line.split("==") for line in lines if line.strip() and not line.startswith("#"))


def test_the_floors_are_the_oldest_legs_pins():
    floors, pins = _floors(), _pins()
    for name in ("jax", "flax", "optax", "orbax-checkpoint", "grain", "numpy"):
        assert floors[name] == pins[name], (name, floors[name], pins[name])
    assert pins["jaxlib"] == pins["jax"]


def test_ci_runs_the_oldest_and_the_newest_stack():
    """The first leg installs under the pins on python3 (3.11 here) and runs the whole
    suite; the last finds Python 3.13 or 3.12 and runs the fast subset on what pip gives."""
    script = (REPO / ".ci" / "run").read_text()
    assert script.count('-c "$oldest"') >= 4  # the project, references, word vectors, plan
    assert "python -m pytest -q -n 2 tests" in script
    assert 'for version in 3.13 3.12' in script
    assert '-m "not slow"' in script and script.count("versions ") >= 2
    python = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"]
    assert python == ">=3.11"
