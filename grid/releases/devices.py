"""What SGLang's released server needs and does on each kind of device, per release (pure facts, with sources).

grid launches SGLang on NVIDIA GPUs (CUDA, SGLang's default device) and on the host CPU (``hardware.vendor: cpu``,
conf/hardware/cpu_host.yaml). What differs between them lives here, next to the flag catalog and the launch rules
(grid/releases/checks.py), so the engine (grid/engines/sglang.py) only asks:

* :func:`launch_args`: the flags a device adds to every launch (``--device cpu``);
* :func:`launch_env`: the environment it needs (``SGLANG_USE_CPU_ENGINE=1``);
* :func:`exit_meaning`: what a launcher's exit status means, read with its log, when the server dies before it is
  ready.

Each fact was read off the released server running on a CPU-only machine (SGLang 0.5.9 and 0.5.23, 2 cores, no
GPU; docs/sources.md#cpu-host), with the file of SGLang's wheel that explains it.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Device:
    """One serving device: the flags and environment every launch on it carries, and why (``source``)."""

    args: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    source: str = ""


#: Devices by ``HardwareSpec.vendor``. CUDA needs nothing: it is SGLang's default device.
DEVICES: dict[str, Device] = {
    "nvidia": Device(),
    "amd": Device(),
    "cpu": Device(
        args=("--device", "cpu"),
        # Without it SGLang 0.5.9-0.5.23 takes the CUDA code path for rotary embeddings even with --device cpu and
        # imports vLLM's rotary op, which fails (srt/layers/rotary_embedding/base.py; srt/utils/common.py
        # ``use_intel_amx_backend`` / ``cpu_has_amx_support`` read it).
        env={"SGLANG_USE_CPU_ENGINE": "1"},
        source="SGLang 0.5.9 and 0.5.23 on a CPU-only host: srt/layers/rotary_embedding/base.py imports vLLM's "
               "rotary op unless SGLANG_USE_CPU_ENGINE=1; docs/sources.md#cpu-host",
    ),
}

#: What SGLang's launcher logs when a child (scheduler, detokenizer) fails during start: it got the child's SIGQUIT and
#: now kills its own process tree, itself included, with SIGKILL (0.5.9 and 0.5.23 srt/entrypoints/engine.py
#: ``launch_phase_sigquit_handler`` -> srt/utils/common.py ``kill_process_tree``, ``include_parent`` True by default).
#: The launcher's status is then -9 (137 as a shell reports it), after the real error, which is in the log above it.
SELF_KILL_LINE = "Received sigquit from a child process"
SIGKILL_STATUSES = (-9, 137)


def device(vendor: str) -> Device:
    """The :class:`Device` of ``vendor``. Raises ``KeyError`` naming the known vendors."""
    try:
        return DEVICES[vendor]
    except KeyError:
        raise KeyError(f"hardware.vendor={vendor!r}; allowed: {', '.join(DEVICES)}") from None


def launch_args(vendor: str) -> list[str]:
    """The flags every launch on ``vendor``'s device carries (``["--device", "cpu"]`` on a CPU host; every catalogued
    release, 0.5.9-0.5.23, declares ``--device``)."""
    return list(device(vendor).args)


def launch_env(vendor: str) -> dict[str, str]:
    """The environment every launch on ``vendor``'s device needs (``{"SGLANG_USE_CPU_ENGINE": "1"}`` on a CPU)."""
    return dict(device(vendor).env)


def exit_meaning(code: int | None, log_tail: str) -> str | None:
    """What a server's exit status means, read with its log: a SIGKILL after SGLang's :data:`SELF_KILL_LINE` is the
    launcher ending itself once a child failed; a SIGKILL without it came from outside (the kernel's out-of-memory
    killer, an operator, a supervisor). None for any other status."""
    if code not in SIGKILL_STATUSES:
        return None
    if SELF_KILL_LINE in log_tail:
        return "the launcher killed itself after a child process failed (SIGKILL of its own process tree)"
    return "killed by SIGKILL from outside the server (the kernel's out-of-memory killer, an operator, a supervisor)"
