"""The backend a model is traced for: the running one, or the one a deviceless compile
targets (the planner compiles for a TPU on a CPU). Code that picks a form by backend
(attention's "auto", Dense's matmul) asks here, so a plan sees what a TPU run runs."""

import contextlib

import jax

_target: str | None = None


@contextlib.contextmanager
def targeting(backend_name: str):
    """Trace for `backend_name` rather than the backend that is running."""
    global _target
    outer, _target = _target, backend_name
    try:
        yield
    finally:
        _target = outer


def backend() -> str:
    return _target or jax.default_backend()
