"""Compiled steps kept as serialized executables, keyed by what they depend on (issue 80).

JAX's persistent compilation cache keys an executable on the concrete devices it runs on
(on CPU and TPU; only GPU strips them) and is off under Pathways, so a mesh of the same
shape over other devices (a slice lost and another one in its place, or N-1 slices
without a different one) compiles again. Here the key is what the program really depends
on: the mesh's shape and axis names, each input's shape, dtype and PartitionSpec (mesh
positions, not devices), jax/jaxlib, the platform and device kind, and the run's
fingerprint (model config, optimizer settings, the trainer's model and step code). A
stored executable is loaded onto a mesh's devices by position: the device at position i of
the mesh it was compiled for becomes the device at position i of the new mesh, in the
executable's device assignment and in its input and output shardings.

The store is a directory (a file per key, written whole and renamed into place) that a
later `main` process reads: its own process compiles nothing a last one compiled. Loading an
executable runs code from that file, so the directory is the job's own (under its
compilation cache directory, beside its checkpoints), as trusted as they are.

What works where: the simulated backend (CPU PJRT) serializes and loads; on Pathways,
whether the proxy's executables serialize is the runtime's (jax raises ValueError
"Compilation does not support serialization" where not): a failure to save turns the store
off with one warning, and every mesh is compiled as before.
"""
from __future__ import annotations

import hashlib
import io
import logging
import os
import pickle
import tempfile
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any

import jax
import numpy as np
from jax._src import compiler
from jax.experimental import serialize_executable
from jax.sharding import Mesh, NamedSharding

log = logging.getLogger("elastic_trainer")

STORE_DIRNAME = "executables"  # under the compilation cache directory
_SUFFIX = ".exe"


def _versions() -> str:
    return f"jax={jax.__version__};jaxlib={metadata.version('jaxlib')}"


def _leaf(x: jax.ShapeDtypeStruct) -> str:
    sharding = x.sharding
    spec = sharding.spec if isinstance(sharding, NamedSharding) else repr(sharding)
    return f"{tuple(x.shape)}:{x.dtype}:{spec}"


def step_key(mesh: Mesh, args: Any, fingerprint: str) -> str:
    """The key of the program compiled for `args` (a tree of ShapeDtypeStruct with
    NamedShardings on `mesh`): the same for the same mesh shape over other devices,
    different for another shape, sharding, input, version or `fingerprint`."""
    device = mesh.devices.flat[0]
    leaves, tree = jax.tree.flatten(args)
    parts = [_versions(), f"{device.platform}:{getattr(device, 'device_kind', '')}",
             f"mesh={tuple(mesh.shape.items())}", f"tree={tree}", fingerprint,
             *(_leaf(x) for x in leaves)]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


def code_fingerprint(*modules: Any) -> str:
    """A hash of the source of the modules that define the program (a new image with other
    model code is another key even at the same versions)."""
    digest = hashlib.sha256()
    for module in modules:
        digest.update(Path(module.__file__).read_bytes())
    return digest.hexdigest()[:16]


class _PositionalUnpickler(serialize_executable._JaxPjrtUnpickler):
    """jax's unpickler with each device id of the compiled-for mesh mapped to the device at
    the same position of `mesh`, and the executable loaded with that device assignment."""

    def __init__(self, file: Any, mesh: Mesh, mesh_ids: Sequence[int],
                 assignment: Sequence[int]) -> None:
        devices = list(mesh.devices.flat)
        if len(devices) != len(mesh_ids):
            raise ValueError(f"stored for {len(mesh_ids)} devices, the mesh has {len(devices)}")
        by_position = dict(zip(mesh_ids, devices, strict=True))
        ordered = [devices[p] for p in assignment]
        super().__init__(file, devices[0].client, ordered)
        self.devices_by_id = by_position
        self.options = compiler.get_compile_options(
            num_replicas=1, num_partitions=len(ordered),
            device_assignment=np.array([[d.id for d in ordered]]), backend=self.backend)

    def persistent_load(self, pid: Any) -> Any:
        if pid[0] == "exec":
            return self.backend.deserialize_executable(pid[1], self.execution_devices,
                                                       self.options)
        return super().persistent_load(pid)


def dump(compiled: jax.stages.Compiled, mesh: Mesh) -> bytes:
    """`compiled` (for `mesh`) as bytes `load` puts onto another mesh of its shape."""
    blob, in_tree, out_tree = serialize_executable.serialize(compiled)
    mesh_ids = [d.id for d in mesh.devices.flat]
    executable: Any = compiled._executable
    unloaded = executable._unloaded_executable  # what serialize() pickled
    assignment = [mesh_ids.index(d.id) for d in unloaded.device_list]
    return pickle.dumps({"blob": blob, "in_tree": in_tree, "out_tree": out_tree,
                         "mesh_ids": mesh_ids, "assignment": assignment})


def load(data: bytes, mesh: Mesh) -> jax.stages.Compiled:
    """The executable `dump` made, loaded onto `mesh`'s devices by position."""
    saved = pickle.loads(data)  # the job's own store (the module's docstring)
    unloaded, args_flat, no_kwargs = _PositionalUnpickler(
        io.BytesIO(saved["blob"]), mesh, saved["mesh_ids"], saved["assignment"]).load()
    return jax.stages.Compiled(unloaded.load(), [], saved["in_tree"].unflatten(args_flat),
                               saved["out_tree"], no_kwargs=no_kwargs)


class ExecutableStore:
    """Serialized executables by key: in memory, and in `directory` when given (what a
    later process reads). A save that fails turns the store off (module docstring)."""

    def __init__(self, directory: str | Path | None, enabled: bool = True) -> None:
        """`enabled` False: nothing kept or loaded (every mesh compiled: the reference)."""
        self.directory = Path(directory) if directory is not None and enabled else None
        self._bytes: dict[str, bytes] = {}
        self.enabled = enabled

    def get(self, key: str, mesh: Mesh) -> jax.stages.Compiled | None:
        data = self._bytes.get(key) or self._read(key)
        if data is None:
            return None
        try:
            return load(data, mesh)
        except Exception as err:  # a stale or foreign file: compiled instead
            log.warning("stored executable %s not loaded (%s: %s); compiling", key[:12],
                        type(err).__name__, err)
            self._bytes.pop(key, None)
            return None

    def put(self, key: str, compiled: jax.stages.Compiled, mesh: Mesh) -> None:
        if not self.enabled:
            return
        try:
            data = dump(compiled, mesh)
        except (ValueError, NotImplementedError, TypeError, pickle.PicklingError) as err:
            self.enabled = False
            log.warning("executables not kept (%s: %s): every mesh is compiled",
                        type(err).__name__, err)
            return
        self._bytes[key] = data
        self._write(key, data)

    def _read(self, key: str) -> bytes | None:
        if self.directory is None:
            return None
        try:
            return (self.directory / f"{key}{_SUFFIX}").read_bytes()
        except OSError:
            return None

    def _write(self, key: str, data: bytes) -> None:
        if self.directory is None:
            return
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, self.directory / f"{key}{_SUFFIX}")
        except OSError as err:  # kept in memory; a later process compiles it again
            log.warning("executable %s not written to %s: %s", key[:12], self.directory, err)
