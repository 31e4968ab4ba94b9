"""Device mesh from the config and the logical-axis -> mesh-axis mapping."""

import contextlib

import jax
import numpy as np
from flax import linen as nn
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from pretrainx.errors import UserError

MESH_AXES = ("data", "fsdp", "tensor")
# Mesh axes that may also span slices (over the data-center network, DCN), with the
# config key of their DCN factor. Only data-parallel and FSDP traffic crosses slices:
# their collectives are one all-reduce (or gather/scatter) per step, where tensor
# parallelism would put a collective in every layer.
DCN_AXES = {"data": "dcn_data", "fsdp": "dcn_fsdp"}


def _resolve(sizes: dict, total: int, what: str) -> dict:
    """Sizes with -1 ("the rest") filled in so that they multiply to `total`."""
    free = [a for a, s in sizes.items() if s == -1]
    if len(free) > 1:
        raise UserError(f"at most one of {' / '.join(f'mesh.{a}' for a in sizes)} may be -1")
    known = int(np.prod([s for s in sizes.values() if s != -1]))
    if free:
        if total % known:
            raise UserError(f"mesh {sizes} does not divide {total} {what}")
        sizes = {**sizes, free[0]: total // known}
    if int(np.prod(list(sizes.values()))) != total:
        raise UserError(f"mesh {sizes} needs {int(np.prod(list(sizes.values())))} {what} "
                        f"but {total} are present")
    return sizes


def dcn_sizes(mesh_cfg, num_slices: int) -> dict:
    """{mesh axis: slices it spans}; -1 takes the slices the other axis leaves."""
    sizes = {key: int(mesh_cfg.get(key, -1 if key == "dcn_data" else 1))
             for key in DCN_AXES.values()}
    resolved = _resolve(sizes, num_slices, "slices")
    return {axis: resolved[key] for axis, key in DCN_AXES.items()}


def mesh_shape(mesh_cfg, num_devices: int, num_slices: int = 1) -> tuple:
    """The whole mesh: each slice's own shape (mesh.data / fsdp / tensor, -1 for "the
    rest" of a slice's devices) times the slices each axis spans (mesh.dcn_*)."""
    if num_devices % num_slices:
        raise UserError(f"{num_devices} devices do not split into {num_slices} equal slices")
    dcn = dcn_sizes(mesh_cfg, num_slices)
    ici = _resolve({a: int(mesh_cfg[a]) for a in MESH_AXES}, num_devices // num_slices,
                   "devices per slice" if num_slices > 1 else "devices")
    return tuple(ici[a] * dcn.get(a, 1) for a in MESH_AXES)


def slice_of(device) -> int:
    return getattr(device, "slice_index", None) or 0  # CPU and GPU devices have none


def slices(devices, mesh_cfg=None) -> list:
    """The devices grouped by slice, in order. Where the devices report one slice but
    the config asks for several (mesh.dcn_* > 1), processes stand for slices: that is
    how multi-slice runs are tested on CPUs, each process a slice."""
    devices = list(devices)
    asked = 1 if mesh_cfg is None else int(np.prod(
        [max(int(mesh_cfg.get(k, 1)), 1) for k in DCN_AXES.values()]))
    key = slice_of
    if len({slice_of(d) for d in devices}) == 1 and asked > 1:
        key = lambda d: d.process_index  # noqa: E731
    groups = {}
    for d in devices:
        groups.setdefault(key(d), []).append(d)
    return [sorted(groups[k], key=lambda d: d.id) for k in sorted(groups)]


def _slice_grid(shape, devices):
    try:
        # Orders devices so that the inner axes (tensor, fsdp) sit on the fastest links.
        from jax.experimental import mesh_utils
        return mesh_utils.create_device_mesh(shape, devices=devices,
                                             allow_split_physical_axes=True)
    except Exception:  # CPU devices and odd shapes: plain order is as good as any
        return np.array(devices).reshape(shape)


def make_mesh(mesh_cfg, devices=None) -> Mesh:
    """The device mesh. Across slices it is a hybrid mesh (as
    mesh_utils.create_hybrid_device_mesh builds): each axis is slice-major, so
    neighbours along an axis share a slice and only the mesh.dcn_* factors of data
    and fsdp cross the DCN. The logical rules table is the same either way."""
    devices = list(jax.devices() if devices is None else devices)
    groups = slices(devices, mesh_cfg)
    shape = mesh_shape(mesh_cfg, len(devices), len(groups))
    if len(groups) == 1:
        return Mesh(_slice_grid(shape, devices), MESH_AXES,
                    axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES))
    if len({len(g) for g in groups}) > 1:
        raise UserError(f"slices of unequal size: {[len(g) for g in groups]} devices")
    dcn = dcn_sizes(mesh_cfg, len(groups))
    dcn_shape = tuple(dcn.get(a, 1) for a in MESH_AXES)
    ici_shape = tuple(s // d for s, d in zip(shape, dcn_shape))
    try:
        from jax.experimental import mesh_utils
        grid = mesh_utils.create_hybrid_device_mesh(
            ici_shape, dcn_shape, devices, allow_split_physical_axes=True,
            process_is_granule=len({slice_of(d) for d in devices}) == 1)
    except Exception:  # CPU processes standing for slices
        grid = hybrid_grid(ici_shape, dcn_shape, groups)
    return Mesh(grid, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES))


def hybrid_grid(ici_shape, dcn_shape, groups) -> np.ndarray:
    """Slice s at block s (row-major) of the DCN grid, each block a slice's own grid:
    along every axis the index is slice-major (slice x slice size + place in slice)."""
    blocks = np.empty((len(groups),) + tuple(ici_shape), dtype=object)
    for i, group in enumerate(groups):
        blocks[i] = _slice_grid(ici_shape, group)
    blocks = blocks.reshape(tuple(dcn_shape) + tuple(ici_shape))
    n = len(ici_shape)
    order = [i for pair in zip(range(n), range(n, 2 * n)) for i in pair]  # (dcn, ici) per axis
    return blocks.transpose(order).reshape([d * s for d, s in zip(dcn_shape, ici_shape)])


def layout(mesh: Mesh, rules, mesh_cfg=None) -> dict:
    """Where a run stands, for its checkpoints: a resume on another layout says what
    changed (the data position counts global batches, so it means the same examples)."""
    return {"processes": jax.process_count(),
            "slices": len(slices(mesh.devices.flat, mesh_cfg)),
            "devices": int(mesh.devices.size), "mesh": dict(mesh.shape),
            "data_parallel": data_parallel_size(mesh, rules)}


def rules_of(cfg) -> tuple:
    """cfg.sharding_rules as flax wants them; a mesh axis the mesh lacks is refused in
    one line (it would fail later as a KeyError deep in the sharding code)."""
    rules = tuple((name, tuple(a) if isinstance(a, list) else a)
                  for name, a in cfg.sharding_rules)
    for name, axes in rules:
        for axis in (axes if isinstance(axes, tuple) else (axes,)):
            if axis is not None and axis not in MESH_AXES:
                raise UserError(f"config key 'sharding_rules' maps {name!r} to mesh axis "
                                f"{axis!r}; the mesh's axes are {', '.join(MESH_AXES)}")
    return rules


@contextlib.contextmanager
def activate(mesh: Mesh, rules):
    """Mesh + logical rules in scope while tracing, so activation constraints resolve."""
    with jax.set_mesh(mesh), nn.logical_axis_rules(rules):
        yield


def logical_to_sharding(logical_specs, mesh: Mesh, rules):
    """Tree of logical PartitionSpecs -> tree of NamedShardings."""
    return nn.logical_to_mesh_sharding(logical_specs, mesh, rules)


def batch_sharding(mesh: Mesh, rules) -> NamedSharding:
    """Leading (batch) dimension split over the data-parallel axes, the rest replicated."""
    spec = nn.logical_to_mesh_axes(("batch",), rules)
    return NamedSharding(mesh, spec)


def replicated(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, P())


def data_parallel_size(mesh: Mesh, rules) -> int:
    spec = nn.logical_to_mesh_axes(("batch",), rules)[0]
    axes = spec if isinstance(spec, tuple) else (spec,) if spec else ()
    return int(np.prod([mesh.shape[a] for a in axes])) if axes else 1
