"""What SGLang's released server needs and does on each kind of device, per release (pure facts, with sources).

grid launches SGLang on NVIDIA GPUs (CUDA, SGLang's default device) and on the host CPU (``hardware.vendor: cpu``,
conf/hardware/cpu_host.yaml). What differs between them lives here, next to the flag catalog and the launch rules
(grid/releases/checks.py), so the engine (grid/engines/sglang.py) only asks:

* :func:`launch_args`: the flags a device adds to every launch (``--device cpu``);
* :func:`launch_env`: the environment it needs (``SGLANG_USE_CPU_ENGINE=1``);
* :data:`STARTUP_EXIT_CODES`: what a launcher's exit status means when the server dies before it is ready.

Each fact was read off the released server running on a CPU-only machine (SGLang 0.5.9 and 0.5.23, 2 cores, no
GPU; docs/sources.md#cpu-host), with the file of SGLang's wheel that explains it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from grid.releases.flags import Version


@dataclass(frozen=True)
class Device:
    """One serving device: the flags and environment every launch on it carries, and why (``source``)."""

    vendor: str
    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    source: str = ""


#: Devices by ``HardwareSpec.vendor``. CUDA needs nothing: it is SGLang's default device.
DEVICES: dict[str, Device] = {
    "nvidia": Device("nvidia"),
    "amd": Device("amd"),
    "cpu": Device(
        "cpu",
        args=("--device", "cpu"),
        # Without it SGLang 0.5.9-0.5.23 takes the CUDA code path for rotary embeddings even with --device cpu and
        # imports vLLM's rotary op, which fails (srt/layers/rotary_embedding/base.py; srt/utils/common.py
        # ``use_intel_amx_backend`` / ``cpu_has_amx_support`` read it).
        env={"SGLANG_USE_CPU_ENGINE": "1"},
        source="SGLang 0.5.9 and 0.5.23 on a CPU-only host: srt/layers/rotary_embedding/base.py imports vLLM's "
               "rotary op unless SGLANG_USE_CPU_ENGINE=1; docs/sources.md#cpu-host",
    ),
}

#: Exit statuses of ``python -m sglang.launch_server`` that end a start, with what they mean. When a child (scheduler,
#: detokenizer) fails during start it sends SIGQUIT to the launcher, whose handler logs "Received sigquit from a child
#: process. It usually means the child failed." and kills its own process tree, itself included (0.5.23
#: srt/entrypoints/engine.py ``launch_phase_sigquit_handler`` -> srt/utils/common.py ``kill_process_tree``, whose
#: ``include_parent`` defaults to True, with SIGKILL): the launcher's status is then 137 (128 + SIGKILL, as a shell
#: reports it) or -9 (as Python's subprocess reports it). That is SGLang ending itself after the real error, which is
#: in the log above it, not the kernel's out-of-memory killer.
STARTUP_EXIT_CODES: dict[int, str] = {
    137: "the launcher killed itself after a child process failed (SIGKILL of its own process tree)",
    -9: "the launcher killed itself after a child process failed (SIGKILL of its own process tree)",
}


def device(vendor: str) -> Device:
    """The :class:`Device` of ``vendor``. Raises ``KeyError`` naming the known vendors."""
    try:
        return DEVICES[vendor]
    except KeyError:
        raise KeyError(f"hardware.vendor={vendor!r}; allowed: {', '.join(DEVICES)}") from None


def launch_args(vendor: str, version: Version) -> list[str]:
    """The flags every launch on ``vendor``'s device carries (``["--device", "cpu"]`` on a CPU host; every catalogued
    release declares ``--device``)."""
    return list(device(vendor).args)


def launch_env(vendor: str, version: Version) -> dict[str, str]:
    """The environment every launch on ``vendor``'s device needs (``{"SGLANG_USE_CPU_ENGINE": "1"}`` on a CPU)."""
    return dict(device(vendor).env)


def exit_meaning(code: int | None) -> str | None:
    """What a launcher exit status means (:data:`STARTUP_EXIT_CODES`), or None for one without a known meaning."""
    return None if code is None else STARTUP_EXIT_CODES.get(code)
