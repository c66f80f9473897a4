"""Load the tokenizer prompts are built with (``transformers.AutoTokenizer``; an optional dependency:
``pip install -e '.[tokenizer]'``).

``load_tokenizer(source)`` never raises: it returns the tokenizer, or None and the reason, so that a run without one
falls back to text prompts and says so. A source that names a folder on this machine is read from it; anything else
is a Hugging Face id, tried from the local cache first and then from the Hub.
"""

from __future__ import annotations

import functools
import os
from typing import Any

#: ``load.tokenizer`` value that disables loading one.
NO_TOKENIZER = "none"


@functools.lru_cache(maxsize=8)
def load_tokenizer(source: str) -> tuple[Any | None, str]:
    """(tokenizer, "") or (None, why not). Cached per process (one trial after another reuses it)."""
    if not source or source.lower() == NO_TOKENIZER:
        return None, "no tokenizer requested (load.tokenizer=none)"
    looks_local = os.path.isabs(source) or source.startswith((".", "~")) or os.path.exists(source)
    if looks_local and not os.path.isdir(os.path.expanduser(source)):
        return None, f"{source} is not a folder on this machine"
    try:
        from transformers import AutoTokenizer
    except ImportError:
        return None, "transformers is not installed (pip install transformers)"
    attempts = [{"local_files_only": True}] if looks_local else [{"local_files_only": True}, {}]
    error = ""
    for kwargs in attempts:
        try:
            return AutoTokenizer.from_pretrained(os.path.expanduser(source), **kwargs), ""
        except Exception as err:  # transformers raises OSError, ValueError, KeyError, ... for an unusable source
            error = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    return None, f"{source}: {error}"
