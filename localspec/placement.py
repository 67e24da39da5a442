"""Where each model of a pair runs: the devices named with --device-target/--device-draft, the RPC
servers of --rpc, and the checks that make a bad choice one line before any weight loads.

With --rpc and no --device-target, the target goes to the servers' devices (split across them);
the draft stays on this machine's own devices (its GPUs, else the CPU) unless --device-draft says
otherwise. Without either flag, llama.cpp's default holds: every local GPU.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from . import devices as dv
from .config import literal
from .llama import LlamaError

ALL_LAYERS = 999


@dataclass(frozen=True)
class Placement:
    """One model's devices (None: llama.cpp's default) and how it reads in --stats and --json."""

    devices: tuple[dv.Device, ...] | None
    where: str

    @property
    def handles(self) -> list[int] | None:
        return None if self.devices is None else [d.ptr for d in self.devices]

    @property
    def remote(self) -> bool:
        """Whether some of its devices are RPC servers."""
        return self.devices is not None and any(d.is_rpc for d in self.devices)


def split_names(value: str | Sequence[str] | None) -> tuple[str, ...] | None:
    """'CUDA0,RPC0' (or a tuple of such) -> ('CUDA0', 'RPC0'); None or empty -> None."""
    if not value:
        return None
    parts = value.split(",") if isinstance(value, str) else [p for v in value for p in v.split(",")]
    return tuple(p.strip() for p in parts if p.strip()) or None


def place_pair(target: Path, draft: Path | None, ngl_target: int, ngl_draft: int,
               device_target=None, device_draft=None, rpc=None) -> tuple[Placement, Placement | None]:
    """The target's and the draft's placement; adds the --rpc servers first (probing each)."""
    servers = split_names(rpc)
    remote = dv.add_rpc_servers(servers) if servers else []
    names_t = split_names(device_target)
    devs_t = dv.find_devices(names_t) if names_t else remote or None
    t = placement(target, devs_t, ngl_target, "ngl_target")
    return t, draft_placement(draft, ngl_draft, device_draft, bool(remote)) if draft else None


def draft_placement(draft: Path, ngl_draft: int, device_draft=None, rpc=False) -> Placement:
    """The draft's placement: the devices named, else (with RPC servers) this machine's own."""
    names = split_names(device_draft)
    devs = dv.find_devices(names) if names else (dv.local_devices() if rpc else None)
    return placement(draft, devs, ngl_draft, "ngl_draft")


def check_names(device_target=None, device_draft=None, rpc=None) -> None:
    """Raise LlamaError for a malformed or unreachable server or an unknown device, before any load."""
    servers = split_names(rpc)
    if servers:
        dv.add_rpc_servers(servers)
    for names in (split_names(device_target), split_names(device_draft)):
        if names:
            dv.find_devices(names)


def placement(path: Path, devices: list[dv.Device] | None, ngl: int, ngl_field: str) -> Placement:
    """A model's placement, checked against the free memory of its devices; ngl_field: the LoadOptions
    field ngl is (ngl_target, ngl_draft), which an error names."""
    shown = dv.local_devices() if devices is None else devices
    if ngl == 0 or not shown:
        return Placement(None if devices is None else tuple(devices), "CPU")
    check_memory(path, shown, ngl, ngl_field)
    names = ",".join(f"{d.name}[{d.description}]" if d.is_rpc else d.name for d in shown)
    layers = "" if ngl >= ALL_LAYERS else f" ({ngl} layers, the rest on the CPU)"
    return Placement(None if devices is None else tuple(devices), names + layers)


def check_memory(path: Path, devices: Sequence[dv.Device], ngl: int, ngl_field: str) -> None:
    """Raise LlamaError when the whole file is to be offloaded and exceeds the devices' free memory,
    naming ngl_field and where devices are listed (config.LIBRARY_NAMES' keys)."""
    size, free = path.stat().st_size, sum(d.free for d in devices)
    if ngl >= ALL_LAYERS and free and size > free:
        names = ", ".join(d.name for d in devices)
        raise LlamaError.naming(f"{literal(path.name)} ({size >> 20:,} MiB) does not fit in the free memory of "
                                f"{literal(names)} ({free >> 20:,} MiB); lower {{{ngl_field}}} or choose another "
                                "device ({devices})", ngl_field)


def describe(devices: Sequence[dv.Device]) -> list[str]:
    """One line per device for `localspec devices`: name, type, description, free/total memory."""
    lines = []
    for d in devices:
        memory = f"{d.free >> 20:,} MiB free of {d.total >> 20:,} MiB" if d.total else "memory unknown"
        lines.append(f"{d.name:<10} {d.type:<6} {d.description}  ({memory})")
    return lines
