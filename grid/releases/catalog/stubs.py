"""Import one module of an unpacked SGLang release with its heavy dependencies replaced by stub modules.

Used only by the catalog generator (``python -m grid.releases.catalog.generate``), never at run time. SGLang's
``sglang.srt.server_args`` builds its command line from plain Python (argparse, dataclasses and, from 0.5.20, msgspec),
but the module imports torch, transformers, triton and SGLang's own kernels to reach helpers it does not call while the
parser is built. A meta-path finder answers every such import with a :class:`StubModule` whose attributes are
:class:`Stub` classes that can be called, subclassed, decorated with, combined with ``|`` and compared, so the module
body runs and ``ServerArgs.add_cli_args(argparse.ArgumentParser())`` registers the real options.

Stdlib modules, the packages in :data:`REAL_PACKAGES` (installed from PyPI when the generator runs: small and pure) and
the release's own ``sglang`` package are imported for real. ``sglang/__init__.py`` and ``sglang/srt/__init__.py`` are
not executed (their re-exports pull in the whole runtime); the packages are created empty with the unpacked folder as
their ``__path__``.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator, Literal

#: Third-party packages imported for real: msgspec (0.5.20+ ServerArgs is a msgspec-validated dataclass),
#: the typing helpers and yaml (grid depends on them). pydantic is stubbed: real pydantic rejects stubbed field types.
REAL_PACKAGES = frozenset({"msgspec", "typing_extensions", "yaml",
                           "packaging", "orjson"})


class _StubMeta(type):
    """Metaclass of :class:`Stub`: attribute access, calls and operators on the class itself give more stubs."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(f"{cls.__qualname__}.{name}")

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        # ``@stub`` used as a decorator keeps the decorated function; any other call returns a stub.
        if len(args) == 1 and not kwargs and callable(args[0]) and not isinstance(args[0], _StubMeta):
            return args[0]
        return _stub_class(f"{cls.__qualname__}()")

    def __or__(cls, other: Any) -> Any:
        return cls

    __ror__ = __or__

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __iter__(cls) -> Iterator[Any]:
        return iter(())

    def __len__(cls) -> int:
        return 0

    def __bool__(cls) -> bool:
        return False

    def __lt__(cls, other: Any) -> bool:
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def __eq__(cls, other: Any) -> bool:
        return cls is other

    def __hash__(cls) -> int:
        return id(cls)

    def __int__(cls) -> int:
        return 0

    def __index__(cls) -> int:
        return 0

    def __float__(cls) -> float:
        return 0.0

    def __mro_entries__(cls, bases: tuple) -> tuple:
        return (cls,)

    def __enter__(cls) -> Any:
        return cls

    def __exit__(cls, *exc: Any) -> Literal[False]:
        return False

    def __contains__(cls, item: Any) -> bool:
        return False


class Stub(metaclass=_StubMeta):
    """A stand-in for any object of a stubbed module (its classes can be subclassed)."""


def _stub_class(name: str) -> type:
    return _StubMeta(name.rsplit(".", 1)[-1] or "Stub", (Stub,), {"__qualname__": name, "__module__": "stub"})


class StubModule(types.ModuleType):
    """A module whose every attribute is a stub; it is also a package, so submodule imports succeed."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.__path__: list[str] = []
        self.__version__ = "0.0.0"
        self.__file__ = f"<stub {name}>"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _stub_class(f"{self.__name__}.{name}")
        setattr(self, name, value)
        return value


class _StubLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        return StubModule(spec.name)

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class _FallbackLoader(importlib.abc.Loader):
    """Runs an SGLang module for real; when its body fails (it touches a stubbed kernel library at import time), the
    module becomes a :class:`StubModule` that keeps the names it had defined, and its name is recorded."""

    def __init__(self, real: importlib.abc.Loader, fallbacks: list[str]) -> None:
        self.real, self.fallbacks = real, fallbacks

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
        return self.real.create_module(spec)

    def exec_module(self, module: types.ModuleType) -> None:
        try:
            self.real.exec_module(module)
        except Exception:
            module.__class__ = StubModule
            self.fallbacks.append(module.__name__)


class _StubFinder(importlib.abc.MetaPathFinder):
    """Answers imports of everything that is neither stdlib, nor real, nor the release's ``sglang``; wraps SGLang's own
    modules (except those in ``strict``) in :class:`_FallbackLoader`."""

    def __init__(self, strict: frozenset[str]) -> None:
        self.strict, self.fallbacks = strict, []  # type: ignore[var-annotated]

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        top = fullname.split(".", 1)[0]
        if top == "sglang":
            spec = importlib.machinery.PathFinder.find_spec(fullname, path)
            if spec is not None and spec.loader is not None and fullname not in self.strict:
                spec.loader = _FallbackLoader(spec.loader, self.fallbacks)
            return spec
        if top in sys.stdlib_module_names:
            return None
        if top in REAL_PACKAGES and importlib.machinery.PathFinder.find_spec(top) is not None:
            return None
        return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)


def _empty_package(name: str, folder: Path) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__path__ = [str(folder)]
    mod.__file__ = str(folder / "__init__.py")
    mod.__package__ = name
    mod.__spec__ = importlib.machinery.ModuleSpec(name, None, is_package=True)
    mod.__spec__.submodule_search_locations = [str(folder)]
    return mod


@contextmanager
def stubbed_release(root: Path, strict: tuple[str, ...] = ()) -> Iterator[list[str]]:
    """Within the block, ``import sglang.srt.X`` loads the release unpacked under ``root`` (``root/sglang/...``) with
    stubbed heavy dependencies. Modules named in ``strict`` must import for real (their errors propagate); any other
    SGLang module whose body fails becomes a stub, and the yielded list collects their names. Every module imported
    inside is removed from ``sys.modules`` afterwards, so the next release starts clean."""
    before = set(sys.modules)
    finder = _StubFinder(frozenset(strict))
    sys.meta_path.insert(0, finder)
    sys.modules["sglang"] = _empty_package("sglang", root / "sglang")
    sys.modules["sglang.srt"] = _empty_package("sglang.srt", root / "sglang" / "srt")
    importlib.invalidate_caches()
    try:
        yield finder.fallbacks
    finally:
        sys.meta_path.remove(finder)
        for name in set(sys.modules) - before:
            del sys.modules[name]
