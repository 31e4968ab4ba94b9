"""The shape of the package, read from its imports: families live in their folders and
nothing below them reaches up; no cycles; small modules and short train functions."""

import ast
import pathlib

PACKAGE = pathlib.Path(__file__).resolve().parents[2] / "pretrainx"

# Each role may import the roles on earlier floors and its own; a module not named here
# (the CLIs at the top: main, pretrain, export, ...) may import anything.
FLOORS = [
    ["errors", "registry"],
    ["config", "sharding"],
    ["data", "models"],
    ["objectives"],
    ["interop", "train"],  # the train loop reads other models through pretrain.py only
    ["families"],
    ["finetune"],
]
# siblings on one floor that must not import each other
APART = [("data", "models"), ("interop", "train")]


def _role(module: str) -> str:
    return module.split(".")[1] if "." in module else ""


def _floor(role: str):
    for i, roles in enumerate(FLOORS):
        if role in roles:
            return i
    return None


def _modules() -> dict:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: pathlib.Path, top_only: bool = False) -> set:
    """The pretrainx modules `name` imports: anywhere in its text (a function's import
    runs as soon as the function does), or at module level only."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in (tree.body if top_only else ast.walk(tree)):
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1]
                                + ([node.module] if node.module else []))
            targets = [base] + [f"{base}.{a.name}" for a in node.names]
        else:
            continue
        found.update(t for t in targets if t in MODULES and t != name)
    return found


MODULES = _modules()
GRAPH = {name: _imports(name, path) for name, path in MODULES.items()}


def test_nothing_outside_a_family_imports_one():
    reaching = sorted(f"{a} -> {b}" for a, targets in GRAPH.items() for b in targets
                      if _role(b) == "families" and _role(a) != "families")
    assert not reaching, f"shared code names a family: {reaching}"


def test_lower_floors_never_import_higher_ones():
    broken = []
    for a, targets in GRAPH.items():
        floor_a = _floor(_role(a))
        if floor_a is None:
            continue
        for b in targets:
            floor_b = _floor(_role(b))
            if floor_b is not None and floor_b > floor_a:
                broken.append(f"{a} -> {b}")
            if {_role(a), _role(b)} in [set(pair) for pair in APART]:
                broken.append(f"{a} -> {b}")
    assert not broken, broken


def test_no_import_cycles():
    """Module-level imports: a cycle there fails at import, or works by luck of order."""
    top = {name: _imports(name, path, top_only=True) for name, path in MODULES.items()}
    done, cycles = set(), []

    def visit(node, trail):
        if node in trail:
            cycles.append(trail[trail.index(node):] + [node])
        elif node not in done:
            for nxt in sorted(top[node]):
                visit(nxt, trail + [node])
            done.add(node)

    for name in sorted(top):
        visit(name, [])
    assert not cycles, cycles[:3]


def test_every_family_is_one_entry_registered_by_its_folders_spec():
    """One Family entry per folder with a spec.py, and every objective, HF adapter and
    checkpoint format belongs to one family's entry (no second table to register in)."""
    from pretrainx import registry
    folders = {p.parent.name for p in (PACKAGE / "families").glob("*/spec.py")}
    assert set(registry.FAMILIES.names()) == folders
    for family in registry.FAMILIES.entries():
        assert all(adapter.name == family.name for adapter in family.hf), family.name
    objectives = [o.name for f in registry.FAMILIES.entries() for o in f.objectives]
    assert len(objectives) == len(set(objectives)) and len(objectives) >= len(folders)
    registers = sorted(str(p.relative_to(PACKAGE)) for p in PACKAGE.rglob("*.py")
                       if ".register(" in p.read_text(encoding="utf-8")
                       and p.name != "spec.py" and p.name != "registry.py")
    assert not registers, f"registered outside a family's spec.py: {registers}"


def test_a_family_imports_another_only_along_its_declared_base():
    """What families share sits in role packages (models/transformer_encoder.py,
    objectives/seq2seq.py, interop/hf_tokenizer_files.py); a family that extends another
    (RoBERTa on BERT, NeoBERT on ModernBERT) says so once, as its spec's `base`, and
    imports only that family and the bases above it."""
    from pretrainx import registry
    bases = {f.name: f.base for f in registry.FAMILIES.entries()}
    assert all(b in bases for b in bases.values() if b), bases

    def ancestors(name):
        out = []
        while bases.get(name):
            name = bases[name]
            out.append(name)
        return out

    stray = sorted(f"{a} -> {b}" for a, targets in GRAPH.items() for b in targets
                   if _role(a) == _role(b) == "families" and a.count(".") > 2
                   and b.split(".")[2] != a.split(".")[2]
                   and b.split(".")[2] not in ancestors(a.split(".")[2]))
    assert not stray, f"a family imports one it does not declare as its base: {stray}"
    users_of_bert = {a.split(".")[2] for a, targets in GRAPH.items()
                     for b in targets if b.startswith("pretrainx.families.bert.")} - {"bert"}
    assert users_of_bert == {n for n in bases if "bert" in ancestors(n)}


def test_no_module_is_over_400_lines():
    sizes = {n: len(p.read_text(encoding="utf-8").splitlines()) for n, p in MODULES.items()}
    assert not {n: k for n, k in sizes.items() if k > 400}


def test_no_train_function_is_over_60_lines():
    long = []
    for name, path in MODULES.items():
        if _role(name) != "train":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if node.end_lineno - node.lineno + 1 > 60:
                    long.append(f"{name}.{node.name}")
    assert not long, long


def test_the_top_level_holds_the_core_and_each_role_package_says_its_job():
    top = sorted(p.stem for p in PACKAGE.glob("*.py"))
    assert len(top) <= 10, top
    for package in sorted(p.parent for p in PACKAGE.glob("*/__init__.py")):
        doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text(encoding="utf-8")))
        assert doc and len(doc) > 40, f"{package.name}/__init__.py says nothing of its job"


def test_moved_modules_answer_to_their_old_names():
    """`python -m pretrainx.probe` and `from pretrainx import sweep` keep working after
    the move into role packages: the old name is the new module itself."""
    import importlib.util
    import subprocess
    import sys
    import pretrainx
    for old, new in pretrainx.MOVED.items():
        assert not (PACKAGE / f"{old}.py").exists(), old
        spec = importlib.util.find_spec(f"pretrainx.{old}")
        assert spec.origin == str(PACKAGE / (new.replace(".", "/") + ".py")), old
    from pretrainx import json_files
    from pretrainx.compare import json_files as moved
    assert json_files is moved
    help_text = subprocess.run([sys.executable, "-m", "pretrainx.word_eval", "--help"],
                               capture_output=True, text=True, cwd=PACKAGE.parent, timeout=120)
    assert help_text.returncode == 0 and "--vectors" in help_text.stdout, help_text.stderr
