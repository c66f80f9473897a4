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
