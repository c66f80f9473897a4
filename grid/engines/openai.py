"""``engine=openai``: benchmark a server that is already running at ``engine.base_url`` (any OpenAI-compatible
engine: vLLM, SGLang, ...; or an SGLang server with its native /generate). Nothing is launched or stopped: the trial
measures it through grid/server/external.py, with the same load points, Parquet tables and report as a launched
server.

The server's own settings are whatever it was started with; the sweep's settings only label the trial. What grid
uses comes from the server itself (grid.server.external.discover):

* the model: the id ``/v1/models`` serves (used instead of conf/model's ``name`` when that is not served);
* the prompts' tokenizer: ``load.tokenizer``, else the path the server reports as the model's ``root`` when it loads
  here (transformers installed, the folder or HF cache present); without one, prompts are text and their lengths
  are estimates (the server's ``usage.prompt_tokens`` is what the metrics use);
* the version: SGLang's ``/server_info``, vLLM's ``/version``; ``engine.version`` overrides; else ``"external"``.
"""

from __future__ import annotations

import functools
import logging
import socket
from typing import ClassVar
from urllib.parse import urlparse

from grid.engines.base import Engine, EngineUnavailable, LaunchPlan, register
from grid.plan import TrialPlan
from grid.server.handle import ServerHandle
from grid.versions import ServerIdentity


CONNECT_CHECK_S = 5.0  # real seconds the pre-flight TCP connect to engine.base_url may take

log = logging.getLogger("grid.engines.openai")


@register
class OpenAIEngine(Engine):
    kind = "openai"
    external = True
    ids_trusted: ClassVar[bool] = False  # conf/model's vocab_size need not be the served model's

    def _url(self) -> str:
        url = getattr(self.spec.engine, "base_url", None)
        if not url:
            raise EngineUnavailable("engine=openai needs engine.base_url=http://HOST:PORT of a running server")
        return str(url).rstrip("/")

    @functools.cached_property
    def facts(self):
        """What the server says about itself (grid.server.external.ServerFacts), read once per engine object."""
        from grid.server.external import discover

        return discover(self._url(), self.spec.engine.api_key)

    def version(self) -> str:
        """The ``engine_version`` label (grid.versions.ServerIdentity.label): ``0.5.23``, ``vllm 0.32.0``, ``external``."""
        return self.identity().label

    def identity(self) -> ServerIdentity:
        """``engine.version`` when set (an SGLang release: the config check parses it as one), else what the server
        says about itself (grid.server.external.discover)."""
        if self.spec.engine.version:
            return ServerIdentity.of_sglang(self.spec.engine.version)
        return self.facts.identity

    def served_model(self) -> str:
        """conf/model's ``name`` when the server serves it, else the first id ``/v1/models`` lists (else the name)."""
        ids = [m.id for m in self.facts.models]
        if not ids or self.spec.model.name in ids:
            return self.spec.model.name
        return ids[0]

    def context_limit(self, trial: TrialPlan) -> tuple[int, str] | None:
        """The served model's ``max_model_len`` as ``/v1/models`` reports it (vLLM, SGLang and the twin do); None
        when the server does not say."""
        served = self.served_model()
        n = next((m.max_model_len for m in self.facts.models if m.id == served and m.max_model_len), None)
        if n is None:
            return None
        return n, f"the {n}-token context the server at {self._url()} serves {served!r} with (/v1/models max_model_len)"

    def context_hint(self, trial: TrialPlan) -> str:
        return ", or restart the server with a longer context (vLLM --max-model-len, SGLang --context-length)"

    def tokenizer_source(self, load) -> str | None:
        """``load.tokenizer``, else the served model's ``root`` as /v1/models reports it (None when it does not)."""
        if load.tokenizer:
            return load.tokenizer
        served = self.served_model()
        return next((m.root for m in self.facts.models if m.id == served and m.root), None)

    def workload_notes(self, load) -> list[str]:
        """What grid took from the server: the model name, the tokenizer (or that lengths are estimates), and why
        /v1/models could not be read. Raises ``EngineUnavailable`` for a ``load.tokenizer`` that does not load."""
        notes = []
        facts = self.facts
        ids = [m.id for m in facts.models]
        if facts.error:
            notes.append(f"{self._url()}: {facts.error}; requests name the model {self.spec.model.name!r} "
                         "(conf/model's name)")
        elif self.served_model() != self.spec.model.name:
            notes.append(f"the server at {self._url()} serves {', '.join(repr(i) for i in ids)} (/v1/models), not "
                         f"conf/model's {self.spec.model.name!r}: requests name {self.served_model()!r} (set "
                         "model.name to choose)")
        form = self.prompt_form(load)
        if form.tokenizer is not None:
            notes.append(f"prompts are built with the server's tokenizer from {form.source} "
                         f"({len(form.tokenizer)} tokens; token ids stay inside its vocabulary)")
        else:
            from grid.loadgen.tokenizer import load_tokenizer

            source = self.tokenizer_source(load)
            why = load_tokenizer(source)[1] if source else "the server reports no model path (/v1/models root)"
            if form.text:
                notes.append(f"no tokenizer for the served model ({why}; set load.tokenizer=PATH): prompts are "
                             "random words, their input lengths are estimates (about one token per word); the "
                             "server's usage.prompt_tokens is recorded as each request's input length")
            else:
                notes.append(f"no tokenizer for the served model ({why}): token ids are drawn below "
                             f"model.vocab_size={self.spec.model.vocab_size}, which must not exceed the served "
                             "model's vocabulary")
        for note in notes:
            log.info(note)
        return notes

    def check_runnable(self) -> None:
        """Raises ``EngineUnavailable`` for a malformed URL, and when nothing listens at its host and port (the
        connection is refused or times out within ``CONNECT_CHECK_S``): every configuration would otherwise wait
        ``engine.startup_timeout_s`` for it in turn."""
        url = urlparse(self._url())
        if url.scheme not in ("http", "https") or not url.hostname:
            raise EngineUnavailable(f"engine.base_url={self._url()!r}: expected http://HOST:PORT")
        port = url.port or (443 if url.scheme == "https" else 80)
        try:
            socket.create_connection((url.hostname, port), timeout=CONNECT_CHECK_S).close()
        except OSError as err:
            raise EngineUnavailable(
                f"engine.base_url={self._url()}: nothing answers at {url.hostname}:{port} ({err}); start the server "
                "first (grid measures it as it runs), or use engine=sim / engine=sglang to have grid launch one"
            ) from None

    def launch_plan(self, trial: TrialPlan, port: int) -> LaunchPlan:
        url = urlparse(self._url())
        return LaunchPlan([], {}, url.hostname or "127.0.0.1", url.port or port, 1.0, 1.0)

    def server(self) -> ServerHandle:
        """The ServerHandle the trial uses instead of the node's actor: the server at ``engine.base_url``."""
        from grid.server.external import ExternalServer

        return ExternalServer(self._url(), self.spec.engine.api_key, self.spec.engine.startup_timeout_s)
