"""The embedded SGLang twin (a server process that models SGLang's behaviour and performance without GPUs)."""

#: Version of the twin's model of performance, scheduling and failures. It is part of every twin configuration's
#: identity (``grid.sweep.space.config_hash``): bump it with any change under grid/twin/ that changes what the twin
#: measures (a constant of grid/twin/perf.py, a scheduling rule, a failure mode), so that a resumed run measures
#: such configurations again instead of mixing results of two models. Real servers (``engine=sglang|openai``) do
#: not carry it.
MODEL_VERSION = "7"  # 2: new-token-ratio decay and retraction, DP-attention prefill steps, decode ETA_FLOPS 0.50;
#                      3: tensor parallelism across nodes (grid/twin/crossnode.py; --nnodes was refused before);
#                      4: kernel-requirement failures where grid/releases/checks.py RULES say (fa3 off SM90, aiter
#                      on NVIDIA only), no tilelang+fp8 rejection at 0.5.22, no *_created metric series;
#                      5: SGLang's radix cache (grid/twin/radix.py: prompt + output less its last token cached at the
#                      end, whole-leaf LRU eviction; was 16-token block hashes of prompts), lpm by cached prefix,
#                      #cached-token per admitted request, speculative decoding's launch rewrites (48-request cap);
#                      6: release behaviour read in every wheel (grid/releases/features.py): a NaN failure logs what
#                      its release logs (0.5.13+: nothing by default, so it is recorded as garbage output), the DSA
#                      backends' fp8 defaults per release and GPU, the CUDA graph and KV pool lines per release;
#                      the DP LM head refused only with DP replicas, mixed chunk + speculative decoding and PD role
#                      switching with what it cannot rebuild refused;
#                      7: mixed chunked prefill with speculative decoding no longer refused (no release refuses it:
#                      each algorithm's handler turns it off first, or keeps it where supports_mixed_chunk)
