"""The wheels the GPU kit carries: the project's requirements, with theirs, less the
packages the GPU image already has; resolved here (a registry) and downloaded for
CPython 3.12 manylinux x86_64. Used by launch/gpu_kit.py prepare; standard library only
(packaging's marker evaluation where it is installed)."""

import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

REPO = pathlib.Path(__file__).resolve().parents[1]
KIT = REPO / ".gpu_kit"
LOCK = REPO / "launch" / "gpu_wheels.txt"
SHARED = REPO.parent / "shared" / "data"
# what the checks read from ../shared/data (which does not travel): 1.9 MB
SHARED_FILES = ("tokenizers/bert-base-uncased/vocab.txt", "tokenizers/gpt2/vocab.json",
                "tokenizers/gpt2/merges.txt", "corpus/misc/bert_sample_text.txt")
PLATFORMS = ["manylinux_2_%d_x86_64" % n for n in (39, 35, 34, 31, 28, 27, 24, 17)] + [
    "manylinux2014_x86_64", "manylinux1_x86_64", "linux_x86_64"]

# The GPU image's Python packages (its 'cuda' image as read on 2026-11-17): Python 3.12,
# JAX 0.11.2 with its CUDA 13 plugin, PyTorch 2.11, transformers 5.17. Nothing on this
# list is carried; a package the project needs and this list lacks is.
IMAGE = set("""
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs
botorch build certifi charset-normalizer chex click cloudpickle cmake colorama contourpy
coverage cuda-bindings cuda-core cuda-pathfinder cuda-toolkit cupy-cuda13x cycler cython
diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools formulaic
frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize
hypothesis idna imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin
jaxlib jaxtyping jinja2 joblib kiwisolver lazy-loader lightning lightning-utilities
linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe matplotlib mdurl
meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind
narwhals networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti
nvidia-cuda-nvrtc nvidia-cuda-runtime nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile
nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13 nvidia-ml-py
nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime
onnxscript opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint
packaging pandas pathspec patsy peft pillow pip pluggy portalocker prometheus-client
propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments pyparsing pyproject-hooks
pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors
scikit-build-core scikit-image scikit-learn scipy seaborn sentencepiece
sentence-transformers setuptools shellingham simplejson six sortedcontainers statsmodels
sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile
tiktoken timm tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics
torchvision tqdm transformers treescope triton typer typing-extensions typing-inspect
urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl zipp
""".split())


def canonical(name: str) -> str:
    """PEP 503's normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(line: str) -> str:
    return canonical(re.match(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)", line).group(1))


def project_requirements(pyproject: pathlib.Path = REPO / "pyproject.toml") -> list:
    """The names in [project] dependencies (tomllib: standard library from 3.11)."""
    import tomllib
    with open(pyproject, "rb") as f:
        return [requirement_name(r) for r in tomllib.load(f)["project"]["dependencies"]]


def _applies(marker: str) -> bool:
    """A Requires-Dist marker on CPython 3.12 Linux x86-64; extras never apply."""
    if not marker:
        return True
    if "extra" in marker:
        return False
    env = {"python_version": "3.12", "python_full_version": "3.12.3", "sys_platform": "linux",
           "platform_system": "Linux", "platform_machine": "x86_64", "os_name": "posix",
           "implementation_name": "cpython", "platform_python_implementation": "CPython"}
    try:
        from packaging.markers import Marker
        return Marker(marker).evaluate(env)
    except ImportError:  # no packaging: keep it (a wheel too many is harmless)
        return True


def missing(roots: list, requires: callable, image: set = IMAGE) -> list:
    """The closure of `roots` under `requires(name) -> [requirement line]`, less what
    the image has: the packages to carry, sorted."""
    todo, seen = [canonical(r) for r in roots], set()
    while todo:
        name = todo.pop()
        if name in seen or name in image:
            continue
        seen.add(name)
        for line in requires(name):
            spec, _, marker = line.partition(";")
            if _applies(marker.strip()):
                todo.append(requirement_name(spec))
    return sorted(seen)


def _pip_download(spec: str, dest: pathlib.Path) -> pathlib.Path:
    platforms = [a for p in PLATFORMS for a in ("--platform", p)]
    before = set(dest.glob("*.whl"))
    got = subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps",
                          "--only-binary=:all:", "--python-version", "3.12",
                          "--implementation", "cp", *platforms, "-d", str(dest), spec],
                         stderr=subprocess.DEVNULL)
    if got.returncode:  # a source release alone (promise): built here, pure Python
        subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w",
                        str(dest), spec], check=True)
        bad = [w.name for w in set(dest.glob("*.whl")) - before
               if not w.name.endswith("-none-any.whl")]
        if bad:
            raise SystemExit(f"error: {spec} has no wheel for CPython 3.12 manylinux x86_64 "
                             f"and built {bad}, which is not pure Python")
    new = set(dest.glob("*.whl")) - before
    name = canonical(spec.split("==")[0])
    return next(iter(new)) if new else next(
        w for w in dest.glob("*.whl") if canonical(w.name.split("-")[0]) == name)


def _metadata(wheel: pathlib.Path) -> tuple:
    """(version, [Requires-Dist line]) of a wheel."""
    import zipfile
    with zipfile.ZipFile(wheel) as z:
        name = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
        text = z.read(name).decode("utf-8")
    version = re.search(r"^Version: (.+)$", text, re.M).group(1).strip()
    return version, re.findall(r"^Requires-Dist: (.+)$", text, re.M)


def resolve() -> dict:
    """{name: version} to carry, the newest wheel of each (network)."""
    found = {}
    with tempfile.TemporaryDirectory() as tmp:
        def requires(name):
            version, lines = _metadata(_pip_download(name, pathlib.Path(tmp)))
            found[name] = version
            return lines
        names = missing(project_requirements(), requires)
    return {name: found[name] for name in names}


def read_lock(path: pathlib.Path = LOCK) -> dict:
    pins = {}
    for line in path.read_text().splitlines():
        line = line.split("#")[0].strip()
        if line:
            name, _, version = line.partition("==")
            pins[canonical(name)] = version
    return pins


def prepare(args) -> None:
    if args.resolve:
        pins = resolve()
        LOCK.write_text("# launch/gpu_kit.py prepare --resolve: the wheels the GPU image "
                        "lacks (CPython 3.12)\n" + "".join(f"{n}=={v}\n" for n, v in
                                                           sorted(pins.items())))
        print(f"wrote {LOCK.relative_to(REPO)}: {len(pins)} packages")
    pins = read_lock()
    wheels = KIT / "wheels"
    shutil.rmtree(wheels, ignore_errors=True)
    wheels.mkdir(parents=True)
    for name, version in sorted(pins.items()):
        _pip_download(f"{name}=={version}", wheels)
    data = KIT / "data"
    for rel in SHARED_FILES:
        target = data / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SHARED / rel, target)
    size = sum(p.stat().st_size for p in KIT.rglob("*") if p.is_file())
    print(f"{KIT.relative_to(REPO)}: {len(pins)} wheels and {len(SHARED_FILES)} data files, "
          f"{size / 2 ** 20:.1f} MiB (the tree travels with it: 64 MiB in all)")


