#!/usr/bin/env bash
# Make a virtual environment with a released SGLang, the CPU prerequisites and a tiny model, for the `real_sglang`
# tests (tests/engines/test_sglang_cpu.py) and `engine=sglang hardware=cpu_host` runs; one environment per SGLang
# version, so several releases can sit side by side.
#
#   experiments/real_server/setup_sglang_cpu.sh [VERSION]      (default 0.5.23; or SGLANG_VERSION=...)
#   # then paste the three `export GRID_SGLANG_...` lines it prints, and
#   python -m pytest -m real_sglang
#
# Where things go (each can be overridden from the environment):
#   GRID_SGLANG_VENV       the virtual environment       (default .cache/venv-sglang-VERSION at the repository root)
#   GRID_SGLANG_MODEL_DIR  the tiny random-weight model  (default .cache/tiny-llama-sglang-VERSION)
#   GRID_SGLANG_LIBCUDA    where libcuda is unpacked     (default .cache/libcuda)
# Re-running is cheap: the pip install is skipped when the venv already has the requested sglang, the driver
# library is not fetched again when it is already unpacked, and the model is not rebuilt when it exists.
#
# Facts (tried with sglang 0.5.23 and 0.5.9 from PyPI on a 2-core Debian 12 machine without a GPU):
# - SGLang goes into its own environment so grid's stays light (the wheel pulls ~11 GB: torch, triton, CUDA
#   libraries, flashinfer, ...); `pip install sglang==VERSION` needs nothing else. Each release brings its own
#   torch and transformers (0.5.23: torch 2.14, transformers 5; 0.5.9: torch 2.9, transformers 4.57).
# - The sgl-kernel / sglang-kernel wheels are CUDA builds and SGLang imports them even on its CPU path; loading
#   them needs NVIDIA's user-space driver library libcuda.so.1 ("ImportError: libcuda.so.1: cannot open shared
#   object file" otherwise); nothing calls into it without a GPU. Debian ships it in the non-free package
#   libcuda1. It is downloaded here with apt from the machine's own Debian mirror and suite (read from its apt
#   sources, component non-free) through a private sources list, state and cache, so the system's apt state is
#   left alone, and unpacked with `dpkg-deb -x` without installing anything (no root needed). libcuda.so.1 needs
#   only libc; its package's other dependencies (the PTX JIT compiler, ...) are not loaded for the import. Its
#   folder goes on the server's LD_LIBRARY_PATH, not the system's. With it, torch warns "The NVIDIA driver on your
#   system is too old" and stays on the CPU; that warning is expected.
# - The model is written by the venv's own python with the venv's own transformers: a model saved with
#   transformers 5 does not load in a release that pins transformers 4 (sglang 0.5.9).
# - Start the server with the CPU engine; `--device cpu` alone is not enough (it then imports vLLM's rotary op):
#     SGLANG_USE_CPU_ENGINE=1 LD_LIBRARY_PATH=$GRID_SGLANG_LD_LIBRARY_PATH $GRID_SGLANG_PYTHON \
#       -m sglang.launch_server --model-path $GRID_SGLANG_MODEL --device cpu --host 127.0.0.1 --port 30000 \
#       --enable-metrics --max-total-tokens 65536
#   It answers GET /health_generate with 200 after about 0.5-3 minutes on 2 cores. It runs as a launcher with the
#   children sglang::scheduler, sglang::detokenizer and a multiprocessing resource tracker, all in the launcher's
#   process group; SIGTERM to that group stops them all within about 10 s.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
version="${1:-${SGLANG_VERSION:-0.5.23}}"
venv="${GRID_SGLANG_VENV:-$here/.cache/venv-sglang-$version}"
model="${GRID_SGLANG_MODEL_DIR:-$here/.cache/tiny-llama-sglang-$version}"
libcuda="${GRID_SGLANG_LIBCUDA:-$here/.cache/libcuda}"
start=$(date +%s)

# 1. SGLang in its own venv (skipped when the venv already has this version)
installed_version() {
    [ -x "$venv/bin/python" ] || return 0
    "$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("sglang"))' 2>/dev/null || true
}
if [ "$(installed_version)" = "$version" ]; then
    echo "sglang $version is already in $venv"
else
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install -q --upgrade pip
    # --no-cache-dir: the wheels (~5 GB of downloads) would otherwise stay in pip's cache beside the venv
    "$venv/bin/python" -m pip install -q --no-cache-dir "sglang==$version"
fi
"$venv/bin/python" -c 'import importlib.metadata as m
print(" ".join(f"{p} {m.version(p)}" for p in ("sglang", "torch", "transformers")))'

# 2. libcuda.so.1 from Debian's non-free libcuda1, unpacked without installing
libdir="$libcuda/usr/lib/x86_64-linux-gnu/nvidia/current"
if [ -e "$libdir/libcuda.so.1" ]; then
    echo "libcuda.so.1 is already in $libdir"
else
    # the machine's Debian mirror and suite, from its apt sources (one-line and deb822 formats)
    read -r mirror suite keyring < <(python3 - <<'EOF'
import glob, os, re
release = dict(l.rstrip("\n").split("=", 1) for l in open("/etc/os-release") if "=" in l)
codename = release.get("VERSION_CODENAME", "").strip('"')
default_key = "/usr/share/keyrings/debian-archive-keyring.gpg"
entries = []  # (uri, suites, signed_by)
for path in ["/etc/apt/sources.list"] + sorted(glob.glob("/etc/apt/sources.list.d/*.list")):
    if not os.path.isfile(path):
        continue
    for line in open(path):
        line = line.split("#", 1)[0].strip()
        m = re.match(r"deb\s+(?:\[([^\]]*)\]\s+)?(\S+)\s+(\S+)", line)
        if m:
            opts = dict(o.split("=", 1) for o in (m.group(1) or "").split() if "=" in o)
            entries.append((m.group(2), [m.group(3)], opts.get("signed-by", "")))
for path in sorted(glob.glob("/etc/apt/sources.list.d/*.sources")):
    for stanza in re.split(r"\n\s*\n", open(path).read()):
        fields, key = {}, None
        for line in stanza.splitlines():
            if line.startswith("#"):
                continue
            if line[:1].isspace() and key:  # continuation line (such as an inline key)
                fields[key] += "\n" + line
            elif ":" in line:
                key, value = line.split(":", 1)
                key = key.strip().lower()
                fields[key] = value.strip()
        if "deb" in fields.get("types", "").split() and fields.get("enabled", "yes").lower() != "no":
            for uri in fields.get("uris", "").split():
                entries.append((uri, fields.get("suites", "").split(), fields.get("signed-by", "")))
for uri, suites, signed_by in entries:
    if codename in suites:
        key = signed_by if os.path.isfile(signed_by) else default_key if os.path.isfile(default_key) else "-"
        print(uri, codename, key)
        break
EOF
    ) || true
    mirror="${SGLANG_APT_MIRROR:-${mirror:-}}"
    suite="${SGLANG_APT_SUITE:-${suite:-}}"
    if [ -z "$mirror" ] || [ -z "$suite" ]; then
        echo "no Debian mirror and suite found in /etc/apt/sources*; set SGLANG_APT_MIRROR and SGLANG_APT_SUITE" >&2
        exit 1
    fi
    apt_dir="$libcuda/apt"
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache" "$apt_dir/archives/partial" "$apt_dir/debs"
    signed=""
    if [ -n "${keyring:-}" ] && [ "$keyring" != "-" ]; then signed="[signed-by=$keyring] "; fi
    echo "deb ${signed}$mirror $suite non-free" > "$apt_dir/sources.list"
    apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
              -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache"
              -o "Dir::Cache::Archives=$apt_dir/archives" -o APT::Sandbox::User="$(id -un)")
    echo "fetching libcuda1 from $mirror $suite non-free"
    apt-get -q "${apt_opts[@]}" update >/dev/null
    (cd "$apt_dir/debs" && apt-get -q "${apt_opts[@]}" download libcuda1 >/dev/null)
    dpkg-deb -x "$apt_dir"/debs/libcuda1_*.deb "$libcuda"
    [ -e "$libdir/libcuda.so.1" ] || { echo "libcuda.so.1 not found under $libcuda" >&2; exit 1; }
fi

# 3. the tiny model, written with the venv's own transformers
if [ -f "$model/config.json" ] && [ -f "$model/grid_tiny_model.json" ]; then
    echo "the tiny model is already in $model"
else
    "$venv/bin/python" "$here/experiments/real_server/make_tiny_model.py" "$model"
fi

# 4. the CPU path imports (the CUDA kernel wheels load against the unpacked libcuda)
SGLANG_USE_CPU_ENGINE=1 PYTHONWARNINGS=ignore LD_LIBRARY_PATH="$libdir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
    "$venv/bin/python" -c 'import sglang, sgl_kernel; print("sglang", sglang.__version__, "and its kernels import")'

echo "done in $(( $(date +%s) - start )) s; venv size $(du -sh "$venv" | cut -f1)"
echo "export GRID_SGLANG_PYTHON=$venv/bin/python"
echo "export GRID_SGLANG_MODEL=$model"
echo "export GRID_SGLANG_LD_LIBRARY_PATH=$libdir"
