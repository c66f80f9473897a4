"""Read the facts of one SGLang release from its unpacked wheel (used by the generator, never at run time).

Each function takes the folder the wheel's ``.py`` files were unpacked into (``root/sglang/...``) and returns plain
JSON-able data; no SGLang prose (help texts, docstrings) is kept, only names, types, choices, defaults, route paths,
metric names, the scheduler's log-line templates and the messages of launch-time refusals.

- :func:`server_options`: imports ``sglang.srt.server_args`` with stubbed heavy dependencies (grid/releases/catalog/
  stubs.py) and calls ``ServerArgs.add_cli_args`` on a fresh ``argparse.ArgumentParser``. When the import
  fails, :func:`ast_options` reads the literal ``add_argument`` calls instead (types and computed choices are then
  missing, and the data says ``"extracted_by": "ast"``).
- :func:`routes`: ``@app.get/post/put/delete/api_route`` decorators and ``add_api_route`` calls in
  ``sglang/srt/entrypoints/http_server.py``.
- :func:`metric_names`: the ``name=`` of every ``Gauge``/``Counter``/``Histogram``/``Summary`` in the metrics modules
  (``sglang/srt/metrics/`` up to 0.5.1x, ``sglang/srt/observability/`` later).
- :func:`log_formats`: the pieces of the scheduler's ``Prefill batch`` / ``Decode batch`` messages, in source order.
- :func:`refusals`: the messages of ``raise``/``assert`` statements in the server-argument checks.
- :func:`evidence`: the named facts the release-feature table (grid/releases/features.py) is held to: log-line
  templates, the literal keys of HTTP answers, the API-key exemptions, defaults read off the server-argument code
  (by GPU memory, the CUDA graph batch sizes, the DSA backends), each read by the function named after it.
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import re
import zipfile
from pathlib import Path
from typing import Any, Iterable

from grid.releases.catalog.stubs import stubbed_release

#: argparse's own action classes -> the short names the catalog uses.
_ACTIONS = {
    "_StoreAction": "store", "_StoreTrueAction": "store_true", "_StoreFalseAction": "store_false",
    "_StoreConstAction": "store_const", "_AppendAction": "append", "_CountAction": "count",
    "BooleanOptionalAction": "boolean_optional",
}


def unpack(wheel: Path, dest: Path) -> Path:
    """Unpack only the ``sglang/**.py`` files of ``wheel`` into ``dest``; returns ``dest``."""
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if n.startswith("sglang/") and n.endswith(".py")]
        zf.extractall(dest, names)
    return dest


def _jsonable(value: Any) -> Any:
    """``value`` as JSON data; objects JSON cannot hold become their ``repr`` (marked with a ``repr:`` prefix)."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)
    if isinstance(value, (list, tuple, set, frozenset)):
        items = [_jsonable(v) for v in value]
        return sorted(items, key=str) if isinstance(value, (set, frozenset)) else items
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if hasattr(value, "value") and type(value).__module__ != "stub":  # enum members
        return _jsonable(value.value)
    return "repr:" + repr(value)


def _type_name(tp: Any) -> str | None:
    if tp is None:
        return None
    name = getattr(tp, "__name__", None) or type(tp).__name__
    return "loads" if name == "loads" else name


def _action_record(action: argparse.Action) -> dict[str, Any]:
    cls = type(action).__name__
    kind = _ACTIONS.get(cls, cls)
    help_text = action.help if isinstance(action.help, str) else ""
    deprecated = "deprecat" in cls.lower() or bool(re.match(r"\s*\(?deprecated", help_text, re.I))
    choices = list(action.choices) if action.choices is not None else None
    return {
        "dest": action.dest,
        "flags": list(action.option_strings),
        "action": kind,
        "type": _type_name(action.type),
        "nargs": _jsonable(action.nargs),
        "choices": _jsonable(choices),
        "default": _jsonable(action.default),
        "required": bool(action.required),
        "deprecated": deprecated,
    }


def server_options(root: Path) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """Every option ``ServerArgs.add_cli_args`` registers, and how they were read (``extracted_by``, the SGLang
    modules that had to be stubbed because their import-time code touched a stubbed library)."""
    try:
        with stubbed_release(root, strict=("sglang.srt.server_args",)) as fallbacks:
            import sglang.srt.server_args as server_args  # type: ignore[import-not-found]

            parser = argparse.ArgumentParser()
            server_args.ServerArgs.add_cli_args(parser)
            records = [_action_record(a) for a in parser._actions if a.dest != "help"]
            how = {"extracted_by": "import", "stubbed_sglang_modules": sorted(fallbacks)}
    except Exception as err:  # the release's module body cannot run with stubs: read the source instead
        records = ast_options(root / "sglang" / "srt" / "server_args.py")
        how = {"extracted_by": "ast", "import_error": f"{type(err).__name__}: {err}"[:300]}
    return records, how


def ast_options(path: Path) -> list[dict[str, Any]]:
    """The ``parser.add_argument(...)`` calls of ``path`` whose option strings and keywords are literals."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "add_argument"):
            continue
        flags = [a.value for a in node.args if isinstance(a, ast.Constant) and isinstance(a.value, str)]
        if not flags or not flags[0].startswith("-"):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}

        def lit(key: str, kw: dict[str, ast.expr] = kw) -> Any:
            try:
                return ast.literal_eval(kw[key]) if key in kw else None
            except ValueError:
                return None

        action = lit("action") or "store"
        tp = kw.get("type")
        out.append({
            "dest": lit("dest") or flags[0].lstrip("-").replace("-", "_"),
            "flags": flags, "action": action,
            "type": ast.unparse(tp) if tp is not None else ("str" if action == "store" else None),
            "nargs": lit("nargs"), "choices": lit("choices"), "default": _jsonable(lit("default")),
            "required": bool(lit("required")), "deprecated": "deprecat" in ast.unparse(kw.get("action", ast.Constant(""))).lower(),
        })
    return out


def _template(node: ast.AST) -> str | None:
    """A string constant or f-string as a template: each ``{expression}`` becomes ``{}`` (``{:.2f}`` keeps the spec)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            elif isinstance(v, ast.FormattedValue):
                spec = _template(v.format_spec) if v.format_spec is not None else ""
                parts.append("{" + (":" + spec if spec else "") + "}")
        return "".join(parts)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _template(node.left), _template(node.right)
        return None if left is None or right is None else left + right
    return None


def _py_files(root: Path, *folders: str) -> Iterable[Path]:
    for folder in folders:
        base = root / "sglang" / folder
        if base.is_file():
            yield base
        elif base.is_dir():
            yield from sorted(base.rglob("*.py"))


def routes(root: Path) -> list[dict[str, Any]]:
    """``[{"path": "/generate", "methods": ["POST", "PUT"]}, ...]`` from the HTTP server module, sorted by path."""
    found: dict[str, set[str]] = {}
    for path in _py_files(root, "srt/entrypoints/http_server.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            attr = node.func.attr
            if attr not in ("get", "post", "put", "delete", "patch", "api_route", "add_api_route", "route"):
                continue
            route = _template(node.args[0]) if node.args else None
            if route is None or not route.startswith("/"):
                continue
            methods: set[str] = set()
            if attr in ("get", "post", "put", "delete", "patch"):
                methods = {attr.upper()}
            for kw in node.keywords:
                if kw.arg == "methods":
                    try:
                        methods |= {m.upper() for m in ast.literal_eval(kw.value)}
                    except ValueError:
                        pass
            found.setdefault(route, set()).update(methods or {"GET"})
    return [{"path": p, "methods": sorted(m)} for p, m in sorted(found.items())]


_METRIC_CLASSES = {"Gauge", "Counter", "Histogram", "Summary", "GaugeHistogram"}


def metric_names(root: Path) -> list[dict[str, str]]:
    """``[{"name": "sglang:num_running_reqs", "kind": "gauge"}, ...]``: every Prometheus metric the metrics modules
    create with a literal name (an f-string name keeps ``{}`` for its variable part), sorted by name."""
    found: dict[str, str] = {}
    for path in _py_files(root, "srt/metrics", "srt/observability"):
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Call):
                continue
            func = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if func not in _METRIC_CLASSES:
                continue
            name_node = next((k.value for k in node.keywords if k.arg == "name"), node.args[0] if node.args else None)
            name = _template(name_node) if name_node is not None else None
            if name and re.fullmatch(r"[\w:{}]+", name):
                found[name] = "histogram" if func == "GaugeHistogram" else func.lower()
    return [{"name": n, "kind": k} for n, k in sorted(found.items())]


def _functions_with(root: Path, folders: tuple[str, ...], needle: str
                    ) -> Iterable[tuple[Path, ast.FunctionDef | ast.AsyncFunctionDef]]:
    for path in _py_files(root, *folders):
        text = path.read_text()
        if needle not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                if any(needle in (_template(n) or "") for n in ast.walk(node)
                       if isinstance(n, (ast.Constant, ast.JoinedStr))):
                    yield path, node


def log_formats(root: Path) -> dict[str, list[str]]:
    """``{"prefill": [...], "decode": [...]}``: the templates assigned or appended to the message variable of the
    scheduler function that prints ``Prefill batch`` / ``Decode batch`` (optional pieces included, in source order)."""
    out: dict[str, list[str]] = {}
    for key, needle in (("prefill", "Prefill batch"), ("decode", "Decode batch")):
        for _path, fn in _functions_with(root, ("srt/managers", "srt/observability"), needle):
            start = next(n for n in ast.walk(fn) if isinstance(n, (ast.Assign, ast.AugAssign))
                         and any(needle in (_template(s) or "") for s in ast.walk(n)))
            target = start.targets[0] if isinstance(start, ast.Assign) else start.target
            if not isinstance(target, ast.Name):
                continue
            pieces = []
            for node in ast.walk(fn):
                if isinstance(node, (ast.Assign, ast.AugAssign)):
                    tgt = node.targets[0] if isinstance(node, ast.Assign) else node.target
                    if isinstance(tgt, ast.Name) and tgt.id == target.id:
                        pieces.append((node.lineno, _template(node.value)))
            out[key] = [t for _, t in sorted(pieces, key=lambda p: p[0]) if t]
            break
    return out


#: Where SGLang checks server arguments at launch: ``server_args.py`` (all releases) and, from 0.5.14, the
#: ``arg_groups`` hooks.
_CHECK_FILES = ("srt/server_args.py", "srt/arg_groups")


def refusals(root: Path) -> list[dict[str, str]]:
    """Every ``raise X("...")`` and ``assert cond, "..."`` with a literal (or f-string) message in the server-argument
    modules: ``{"function": ..., "kind": "ValueError"|"assert"|..., "message": template}``, in source order."""
    out: list[dict[str, str]] = []
    for path in _py_files(root, *_CHECK_FILES):
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                kind, msg = None, None
                if isinstance(node, ast.Assert) and node.msg is not None:
                    kind, msg = "assert", _template(node.msg)
                elif isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args:
                    kind = ast.unparse(node.exc.func)
                    msg = _template(node.exc.args[0])
                if kind and msg:
                    out.append({"function": fn.name, "kind": kind, "message": " ".join(msg.split())})
    seen, unique = set(), []
    for r in out:  # nested functions are walked twice
        key = (r["function"], r["kind"], r["message"])
        if key not in seen:
            seen.add(key)
            unique.append(r)
    return unique


# --- evidence: the named facts grid/releases/features.py is checked against (tests/releases/test_features.py) -----

#: The server-argument modules (defaults and their resolution): ``server_args.py`` and, from 0.5.14, ``arg_groups``.
_ARG_FILES = ("srt/server_args.py", "srt/arg_groups")
#: Where the decode CUDA graph capture is logged: ``model_runner.py`` (to 0.5.15), ``cuda_graph_runner.py`` (the batch
#: sizes line, to 0.5.13), ``model_runner_components/cuda_graph_setup.py`` (0.5.16+).
_GRAPH_FILES = ("srt/model_executor/model_runner.py", "srt/model_executor/cuda_graph_runner.py",
                "srt/model_executor/model_runner_components/cuda_graph_setup.py")


def _trees(root: Path, *folders: str) -> Iterable[tuple[Path, ast.Module]]:
    for path in _py_files(root, *folders):
        yield path, ast.parse(path.read_text())


def _strings(tree: ast.AST) -> Iterable[tuple[ast.AST, str]]:
    """Every string constant and f-string of ``tree`` as a template (the pieces of an f-string are not repeated)."""
    inner = {id(v) for n in ast.walk(tree) if isinstance(n, ast.JoinedStr) for v in ast.walk(n) if v is not n}
    for node in ast.walk(tree):
        if isinstance(node, (ast.Constant, ast.JoinedStr)) and id(node) not in inner:
            text = _template(node)
            if text is not None:
                yield node, text


def _templates(root: Path, folders: tuple[str, ...], pattern: str) -> list[str]:
    """The sorted distinct templates in ``folders`` that ``pattern`` matches (re.search)."""
    rx = re.compile(pattern)
    return sorted({t for _, tree in _trees(root, *folders) for _, t in _strings(tree) if rx.search(t)})


def _functions(tree: ast.AST, *names: str) -> list[ast.FunctionDef | ast.AsyncFunctionDef]:
    return [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
            and (not names or n.name in names)]


def _assigned_keys(fn: ast.AST) -> set[str]:
    """The constant keys ``fn`` stores by subscript (``ret["world_size"] = ...``)."""
    return {t.slice.value for n in ast.walk(fn) if isinstance(n, ast.Assign) for t in n.targets
            if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and isinstance(t.slice, ast.Constant)
            and isinstance(t.slice.value, str)}


def _dict_keys(fn: ast.AST) -> set[str]:
    """The constant keys of the dict displays in ``fn`` and the keys it stores by subscript."""
    return {k.value for n in ast.walk(fn) if isinstance(n, ast.Dict) for k in n.keys
            if isinstance(k, ast.Constant) and isinstance(k.value, str)} | _assigned_keys(fn)


def _name(node: ast.AST) -> str | None:
    return node.attr if isinstance(node, ast.Attribute) else node.id if isinstance(node, ast.Name) else None


def _str(node: ast.AST | None) -> str | None:
    """The value of a string constant, else None."""
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _int(node: ast.AST | None) -> int | None:
    """The value of an integer constant, else None."""
    return node.value if isinstance(node, ast.Constant) and type(node.value) is int else None


def meta_info_keys(root: Path) -> list[str]:
    """The keys the tokenizer manager puts in a response's ``meta_info``: the dict assigned to ``meta_info``, the
    dicts passed to ``meta_info.update`` and the keys stored by ``meta_info[...] = ...``."""
    keys: set[str] = set()
    for _, tree in _trees(root, "srt/managers/tokenizer_manager.py"):
        for node in ast.walk(tree):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict) \
                    and any(_name(t) == "meta_info" for t in node.targets):
                keys |= _dict_keys(node.value)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "update" \
                    and _name(node.func.value) == "meta_info" and node.args and isinstance(node.args[0], ast.Dict):
                keys |= _dict_keys(node.args[0])
            elif isinstance(node, ast.Assign):
                keys |= {t.slice.value for t in node.targets if isinstance(t, ast.Subscript)
                         and _name(t.value) == "meta_info" and isinstance(t.slice, ast.Constant)
                         and isinstance(t.slice.value, str)}
    return sorted(keys)


def http_keys(root: Path) -> dict[str, list[str]]:
    """The literal keys of ``/server_info`` (``server_info`` in http_server.py and, from 0.5.22, the
    ``build_server_info`` it calls, srt/utils/common.py), of ``/model_info`` (``model_info``) and of a scheduler's
    internal state (``get_internal_state`` in srt/managers/scheduler.py; 0.5.22+ the methods of
    srt/managers/scheduler_components/internal_state.py)."""
    info: set[str] = set()
    model: set[str] = set()
    for _, tree in _trees(root, "srt/entrypoints/http_server.py"):
        for fn in _functions(tree, "server_info"):
            info |= _dict_keys(fn)
        for fn in _functions(tree, "model_info"):
            model |= _dict_keys(fn)
    for _, tree in _trees(root, "srt/utils", "srt/entrypoints"):
        for fn in _functions(tree, "build_server_info"):
            info |= _dict_keys(fn)
    state: set[str] = set()
    for _, tree in _trees(root, "srt/managers/scheduler.py"):
        for fn in _functions(tree, "get_internal_state"):
            state |= _assigned_keys(fn)
    for _, tree in _trees(root, "srt/managers/scheduler_components/internal_state.py"):
        for fn in _functions(tree):
            state |= _assigned_keys(fn)
    return {"server_info": sorted(info), "model_info": sorted(model), "internal_state": sorted(state)}


def flush_cache_failure_text(root: Path) -> list[str]:
    """The text /flush_cache answers when the scheduler refuses to flush (``ret.message or "Flush cache failed."``,
    srt/entrypoints/http_server.py ``flush_cache``); empty where it has none."""
    return _templates(root, ("srt/entrypoints/http_server.py",), r"^Flush cache failed")


def auth_exempt_prefixes(root: Path) -> list[str]:
    """The path prefixes srt/utils/auth.py lets through without the API key (``path.startswith("/health")``)."""
    return sorted({a.value for _, tree in _trees(root, "srt/utils/auth.py") for n in ast.walk(tree)
                   if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "startswith"
                   and _name(n.func.value) == "path" for a in n.args
                   if isinstance(a, ast.Constant) and isinstance(a.value, str)})


def server_args_prog(root: Path) -> str | None:
    """The ``prog`` of the parser ``prepare_server_args`` builds (None: argparse's default, argv[0])."""
    for _, tree in _trees(root, "srt/server_args.py"):
        for fn in _functions(tree, "prepare_server_args"):
            for n in ast.walk(fn):
                if isinstance(n, ast.Call) and _name(n.func) == "ArgumentParser":
                    return next((_str(k.value) for k in n.keywords if k.arg == "prog"), None)
    return None


def cuda_graph_lines(root: Path) -> dict[str, Any]:
    """The decode CUDA graph capture lines: their templates (``Capture {} begin. ...`` with the device's graph name
    and, from 0.5.14, the capture name in ``{}``; the batch sizes line ``Capture cuda graph bs {}`` to 0.5.13) and
    the graph name the capture function uses for CUDA (``graph_backend``: ``cuda graph``, 0.5.14+ ``CUDA graph``)."""
    rx = re.compile(r"^Capture (?:\{\}|cuda graph)(?: \{\})? (?:begin|end)\b|^Capture cuda graph bs ")
    lines: set[str] = set()
    names: set[str] = set()
    for _, tree in _trees(root, *_GRAPH_FILES):
        for fn in _functions(tree):
            found = {t for _, t in _strings(fn) if rx.search(t)}
            if not found:
                continue
            lines |= found
            for n in ast.walk(fn):
                if isinstance(n, ast.Call) and _name(n.func) == "defaultdict" and n.args:
                    default = n.args[0]
                    if isinstance(default, ast.Lambda) and (name := _str(default.body)) is not None:
                        names.add(name)
                    for arg in n.args[1:]:
                        if isinstance(arg, ast.Dict):
                            names |= {v for k, val in zip(arg.keys, arg.values)
                                      if _str(k) == "cuda" and (v := _str(val)) is not None}
    return {"lines": sorted(lines), "cuda_graph_name": sorted(names)}


def kv_cache_lines(root: Path) -> list[str]:
    """The templates of the KV pool's allocation line (``KV Cache is allocated. ... #tokens: {}, K size: ...``)."""
    return _templates(root, ("srt/mem_cache/memory_pool.py",), r"#tokens: \{\}, KV? size: ")


def load_weight_lines(root: Path) -> list[str]:
    """The templates of the model runner's ``Load weight end. elapsed=...`` line."""
    return _templates(root, ("srt/model_executor/model_runner.py",), r"^Load weight end\. elapsed=")


def nan_logits(root: Path) -> dict[str, Any]:
    """What the sampler logs for NaN in the logits: the templates of srt/layers/sampler.py and srt/utils/async_probe.py
    that say so (to 0.5.12 ``Detected errors during sampling! NaN in the logits.``, logged under
    --enable-nan-detection; 0.5.14+ ``NaN detected in %s; values were sanitized ...``), the message the sampler
    passes to ``sanitize_nan_logits`` (the ``%s``), and the defaults of the NaN switches of srt/environ.py."""
    lines = _templates(root, ("srt/layers/sampler.py", "srt/utils/async_probe.py"),
                       r"NaN in the logits|^NaN detected in ")
    sites = sorted({m for _, tree in _trees(root, "srt/layers/sampler.py") for n in ast.walk(tree)
                    if isinstance(n, ast.Call) and _name(n.func) == "sanitize_nan_logits" and len(n.args) > 1
                    and (m := _str(n.args[1])) is not None})
    env: dict[str, Any] = {}
    for _, tree in _trees(root, "srt/environ.py"):
        for n in ast.walk(tree):
            if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name) \
                    and re.search(r"(?:^|_)NAN(?:_|$)", n.targets[0].id) and isinstance(n.value, ast.Call) and n.value.args \
                    and isinstance(n.value.args[0], ast.Constant):
                env[n.targets[0].id] = n.value.args[0].value
    return {"lines": lines, "sanitize_messages": sites, "env_defaults": dict(sorted(env.items()))}


def _gpu_bound(test: ast.AST) -> int | None:
    """``N`` of ``gpu_mem < N * 1024`` (GiB), else None."""
    if isinstance(test, ast.Compare) and _name(test.left) == "gpu_mem" and len(test.ops) == 1 \
            and isinstance(test.ops[0], ast.Lt):
        c = test.comparators[0]
        if isinstance(c, ast.BinOp) and isinstance(c.op, ast.Mult) and _int(c.right) == 1024:
            return _int(c.left)
    return None


_BAND_NAMES = {"chunked_prefill_size": "chunked_prefill_size", "cuda_graph_max_bs": "cuda_graph_max_bs",
               "max_bs": "cuda_graph_max_bs"}


def _band(stmts: list[ast.stmt]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for s in stmts:
        for n in ast.walk(s):
            if isinstance(n, ast.Assign) and (value := _int(n.value)) is not None:
                for t in n.targets:
                    if (name := _name(t)) in _BAND_NAMES:
                        out.setdefault(_BAND_NAMES[name or ""], []).append(value)
            elif isinstance(n, ast.keyword) and n.arg in _BAND_NAMES and (value := _int(n.value)) is not None:
                out.setdefault(_BAND_NAMES[n.arg], []).append(value)
    return out


def gpu_memory_defaults(root: Path) -> list[dict[str, Any]]:
    """The defaults by GPU memory (``_handle_gpu_memory_settings``: server_args.py, 0.5.19+
    arg_groups/memory_hook.py): per band ``below_gib`` (None: the rest), the default chunked prefill size and the
    decode CUDA graph max batch sizes in source order (``[tp < 4, else]`` where they differ)."""
    for _, tree in _trees(root, *_ARG_FILES):
        for node in ast.walk(tree):
            if not (isinstance(node, ast.If) and _gpu_bound(node.test) == 20):
                continue
            bands = []
            while True:
                bands.append({"below_gib": _gpu_bound(node.test), **_band(node.body)})
                nxt = node.orelse[0] if len(node.orelse) == 1 else None
                if isinstance(nxt, ast.If) and _gpu_bound(nxt.test) is not None:
                    node = nxt
                    continue
                bands.append({"below_gib": None, **_band(node.orelse)})
                return bands
    return []


_MAX_BS = ("cuda_graph_max_bs", "max_bs")


def graph_bs_defaults(root: Path) -> dict[str, bool]:
    """How the default decode CUDA graph batch sizes are bounded: ``appends_max`` (the size list gets the max batch
    size itself when the steps skip it: ``if max_bs not in capture_bs``), ``capped_by_max_running_requests``
    (the default max batch size is lowered to --max-running-requests)."""
    appends = capped = False
    for _, tree in _trees(root, *_ARG_FILES):
        for fn in _functions(tree):
            lists = [n for n in ast.walk(fn) if isinstance(n, ast.List) and len(n.elts) == 5
                     and [getattr(e, "value", None) for e in n.elts] == [1, 2, 4, 8, 12]]
            if lists and any(isinstance(n, ast.Compare) and isinstance(n.ops[0], ast.NotIn)
                             and _name(n.comparators[0]) == "capture_bs" for n in ast.walk(fn)):
                appends = True
        for n in ast.walk(tree):  # if max_bs > max_running_requests: max_bs = max_running_requests
            if isinstance(n, ast.If) and any(
                    isinstance(c, ast.Compare) and isinstance(c.ops[0], ast.Gt) and _name(c.left) in _MAX_BS
                    and _name(c.comparators[0]) == "max_running_requests" for c in ast.walk(n.test)) \
                    and any(isinstance(a, ast.Assign) and _name(a.value) == "max_running_requests"
                            and any(_name(t) in _MAX_BS for t in a.targets) for s in n.body for a in ast.walk(s)):
                capped = True
    return {"appends_max": appends, "capped_by_max_running_requests": capped}


def _major_test(test: ast.AST) -> bool:
    return isinstance(test, ast.Compare) and _name(test.left) == "major" and isinstance(test.ops[0], ast.GtE) \
        and isinstance(test.comparators[0], ast.Constant) and test.comparators[0].value == 10


def _assigned_strings(node: ast.AST, ctx: str, out: dict[str, set[str]]) -> None:
    """The string constants assigned under ``node`` (assignments and their conditional expressions; not conditions,
    subscript keys or calls), by the ``major >= 10`` branch they are in: ``any``, ``sm100``, ``below_sm100``."""
    if isinstance(node, (ast.If, ast.IfExp)) and _major_test(node.test):
        for part in node.body if isinstance(node.body, list) else [node.body]:
            _assigned_strings(part, "sm100", out)
        for part in node.orelse if isinstance(node.orelse, list) else [node.orelse]:
            _assigned_strings(part, "below_sm100", out)
        return
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        out.setdefault(ctx, set()).add(node.value)
        return
    children: list[ast.AST] = []
    if isinstance(node, ast.Assign):
        children = [node.value]
    elif isinstance(node, ast.IfExp):
        children = [node.body, node.orelse]
    elif isinstance(node, ast.If):
        children = [*node.body, *node.orelse]
    for child in children:
        _assigned_strings(child, ctx, out)


def dsa_defaults(root: Path) -> dict[str, Any]:
    """The DSA (NSA before 0.5.13) defaults of the server arguments: ``attention_backend`` (the backend of the
    ``Use {} attention backend for DeepSeek with DSA.`` line), ``fp8`` (the backends the fp8 KV branch of the
    function that logs ``Set DSA backends for {} KV Cache`` assigns, by compute capability: ``sm100`` for
    ``major >= 10``, ``below_sm100``) and ``glm_fp8_sm120`` (the backends assigned where it logs ``Set DSA backends
    for GLM FP8 KV Cache on SM120/SM121``; 0.5.17+)."""
    attention = sorted({m.group(1) for t in _templates(root, _ARG_FILES, r"^Use \w+ attention backend for DeepSeek")
                        if (m := re.match(r"Use (\w+) attention", t))})
    fp8: dict[str, set[str]] = {}
    glm: set[str] = set()
    for _, tree in _trees(root, *_ARG_FILES):
        for fn in _functions(tree):
            texts = [t for _, t in _strings(fn)]
            if not any(re.match(r"Set [ND]SA backends for \{\} KV Cache", t) for t in texts):
                continue
            for n in ast.walk(fn):
                if isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and _name(n.test.left) == "kv_cache_dtype" \
                        and isinstance(n.test.ops[0], ast.Eq) and getattr(n.test.comparators[0], "value", None) == "fp8_e4m3":
                    for s in n.body:
                        _assigned_strings(s, "any", fp8)
                if isinstance(n, ast.If) and any(t.startswith("Set DSA backends for GLM FP8 KV Cache on SM120")
                                                 for s in n.body for _, t in _strings(s)):
                    found: dict[str, set[str]] = {}
                    for s in n.body:
                        _assigned_strings(s, "any", found)
                    glm |= found.get("any", set())
    both = fp8.get("any", set())
    return {"attention_backend": attention,
            "fp8": {"sm100": sorted(both | fp8.get("sm100", set())),
                    "below_sm100": sorted(both | fp8.get("below_sm100", set()))},
            "glm_fp8_sm120": sorted(glm)}


def prefill_throughput_tokens(root: Path) -> str | None:
    """Whose tokens the ``Prefill batch`` line's input throughput counts: ``previous_batch`` (the tokens of the
    batch logged before, ``self.last_prefill_tokens``) or ``this_batch`` (``prefill_stats.log_input_tokens``)."""
    for _, tree in _trees(root, "srt/managers", "srt/observability"):
        for n in ast.walk(tree):
            if isinstance(n, ast.Assign) and any(_name(t) == "last_input_throughput" for t in n.targets):
                names = {_name(x) for x in ast.walk(n.value)}
                if "last_prefill_tokens" in names:
                    return "previous_batch"
                if "log_input_tokens" in names:
                    return "this_batch"
    return None


def evidence(root: Path) -> dict[str, Any]:
    """The named facts of one release that the release-feature table (grid/releases/features.py) is held to."""
    return {
        "auth_exempt_prefixes": auth_exempt_prefixes(root),
        "cuda_graph_lines": cuda_graph_lines(root),
        "dsa_defaults": dsa_defaults(root),
        "flush_cache_failure_text": flush_cache_failure_text(root),
        "gpu_memory_defaults": gpu_memory_defaults(root),
        "graph_bs_defaults": graph_bs_defaults(root),
        "http_keys": http_keys(root),
        "kv_cache_lines": kv_cache_lines(root),
        "load_weight_lines": load_weight_lines(root),
        "meta_info_keys": meta_info_keys(root),
        "nan_logits": nan_logits(root),
        "prefill_throughput_tokens": prefill_throughput_tokens(root),
        "server_args_prog": server_args_prog(root),
    }


def release_record(wheel: Path, workdir: Path) -> dict[str, Any]:
    """The catalog record of one wheel (``sglang-<version>-...whl``), unpacking it under ``workdir``."""
    version = wheel.name.split("-")[1]
    root = unpack(wheel, workdir / version)
    options, how = server_options(root)
    return {
        "release": version,
        "wheel": wheel.name,
        **how,
        "options": options,
        "routes": routes(root),
        "metrics": metric_names(root),
        "log_formats": log_formats(root),
        "refusals": refusals(root),
        "evidence": evidence(root),
    }


def dumps(record: dict[str, Any]) -> str:
    """The committed JSON text (stable order, one option per line for readable diffs between releases)."""
    head = {k: v for k, v in record.items() if k != "options"}
    lines = ["{", '  "options": [']
    opts = record["options"]
    for i, opt in enumerate(opts):
        lines.append("    " + json.dumps(opt, sort_keys=False) + ("," if i < len(opts) - 1 else ""))
    lines.append("  ],")
    body = json.dumps(head, indent=2)
    lines.append(body[2:])  # drop the opening "{\n"
    return "\n".join(lines) + "\n"
