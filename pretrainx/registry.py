"""A table of named entries filled by the modules that define them.

Each kind of plug-in (model families, objectives, HuggingFace adapters) has one
`Registry`; the modules of `pretrainx/families/<name>/` call `register` at import, and
the first lookup imports every module of every family, so a new family or objective is
found without an edit anywhere else. Generic code asks an entry for a trait; it never compares a
name.
"""

import importlib
import pathlib

from pretrainx.errors import UserError


PLUGINS = "pretrainx.families"  # where every registered entry is defined


class Registry:
    def __init__(self, what: str, package: str = PLUGINS):
        self.package, self.what = package, what
        self._entries, self._found = {}, False

    def register(self, entry):
        """Add `entry` (anything with a `name`); returns it, so a module can keep it."""
        if entry.name in self._entries and self._entries[entry.name] is not entry:
            raise ValueError(f"{self.what} {entry.name!r} is registered twice")
        self._entries[entry.name] = entry
        return entry

    def _discover(self):
        if not self._found:
            self._found = True
            package = importlib.import_module(self.package)
            for folder in package.__path__:  # a family's folder needs no __init__.py
                for path in sorted(pathlib.Path(folder).glob("*/*.py")):
                    importlib.import_module(
                        f"{self.package}.{path.parent.name}.{path.stem}")

    def find(self, name):
        """The entry called `name`, or None."""
        self._discover()
        return self._entries.get(name)

    def get(self, name, key: str):
        """The entry called `name`; a UserError naming the config `key` and the known
        names if there is none."""
        entry = self.find(name)
        if entry is None:
            raise UserError(f"config key '{key}' is {name!r}; expected one of "
                            f"{', '.join(self.names())}")
        return entry

    def names(self) -> list:
        self._discover()
        return sorted(self._entries)

    def entries(self) -> list:
        self._discover()
        return [self._entries[n] for n in sorted(self._entries)]
