"""Write a tiny word-level Hugging Face tokenizer (no download) that any transformers AutoTokenizer can load.

``python make_tokenizer.py DIR``. Whitespace-split words; vocabulary: the benchmark server's output word ``t``, a few
hundred filler words, [UNK]; so the server's text ``#<id># t t ...`` is exactly one token per streamed token.
"""

import sys

from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast

words = ["[UNK]", "[BOS]", "[EOS]", "[PAD]", "t"] + [f"w{i}" for i in range(4091)]
# unknown words map to the ordinary token "w0", so decoding a prompt never drops them as special tokens
tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="w0"))
tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
tok.decoder = decoders.WordPiece(prefix="##")  # joins tokens with spaces
fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", bos_token="[BOS]", eos_token="[EOS]",
                               pad_token="[PAD]", model_max_length=32768)
fast.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}"
fast.save_pretrained(sys.argv[1])
