"""Device mesh from the config and the logical-axis -> mesh-axis mapping."""

import contextlib

import jax
import numpy as np
from flax import linen as nn
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

from pretrainx.errors import UserError

MESH_AXES = ("data", "fsdp", "tensor")


def mesh_shape(mesh_cfg, num_devices: int) -> tuple:
    """Resolve -1 ("the rest") and check that the axes multiply to the device count."""
    sizes = [int(mesh_cfg[a]) for a in MESH_AXES]
    free = [i for i, s in enumerate(sizes) if s == -1]
    if len(free) > 1:
        raise UserError("at most one of mesh.data / mesh.fsdp / mesh.tensor may be -1")
    known = int(np.prod([s for s in sizes if s != -1]))
    if free:
        if num_devices % known:
            raise UserError(f"mesh {dict(zip(MESH_AXES, sizes))} does not divide "
                            f"{num_devices} devices")
        sizes[free[0]] = num_devices // known
    if int(np.prod(sizes)) != num_devices:
        raise UserError(f"mesh {dict(zip(MESH_AXES, sizes))} needs {int(np.prod(sizes))} "
                        f"devices but {num_devices} are present")
    return tuple(sizes)


def make_mesh(mesh_cfg, devices=None) -> Mesh:
    devices = list(jax.devices() if devices is None else devices)
    shape = mesh_shape(mesh_cfg, len(devices))
    try:
        # Orders devices so that the inner axes (tensor, fsdp) sit on the fastest links.
        from jax.experimental import mesh_utils
        grid = mesh_utils.create_device_mesh(shape, devices=devices, allow_split_physical_axes=True)
    except Exception:  # CPU devices and odd shapes: plain order is as good as any
        grid = np.array(devices).reshape(shape)
    return Mesh(grid, MESH_AXES, axis_types=(jax.sharding.AxisType.Auto,) * len(MESH_AXES))


def rules_of(cfg) -> tuple:
    return tuple((name, tuple(a) if isinstance(a, list) else a) for name, a in cfg.sharding_rules)


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
