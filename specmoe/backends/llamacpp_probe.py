"""The llama.cpp self-test's child process: write a tiny GGUF model, load it and decode with it.

`specmoe.backends.llamacpp_check` runs this file as a script (`python llamacpp_probe.py FOLDER`), in a
process of its own, before a process's first use of llama.cpp: a llama.cpp build that executes
instructions this CPU cannot run dies here by a signal, and the caller says so in one line instead of
dying with it. The script imports no specmoe module, so it starts in the time its imports take.

The model is shaped like the matrices of real GGUF files, so the kernels they would run run here:
Q8_0 and Q4_0 weights 256 wide (whole blocks for ggml's AMX and repacked AVX kernels, which take
quantised weights whose widths are multiples of 32), an F16 embedding table, F32 norms. Its weights
are random: the test is whether a decode completes with finite logits, not what it computes.
Exit status 0: it ran; 1: llama.cpp refused the model or returned an error (a problem, but not one
that kills a process); death by a signal: the build cannot run on this machine.
"""

from __future__ import annotations

import sys
from pathlib import Path

VOCAB = 256
HIDDEN = 256
FFN = 256
HEADS = 4
CONTEXT = 32


def byte_tokens() -> list[str]:
    """The 256 byte-level BPE symbols in byte order: a printable byte stands for itself, the others
    for code points from 256 up, as GPT-2's byte-level vocabularies write them."""
    printable = {
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    }
    others = iter(range(256, 512))
    return [chr(byte) if byte in printable else chr(next(others)) for byte in range(256)]


def write_model(path: Path) -> None:
    """A one-layer llama-architecture GGUF of ~0.6 MB with a byte-level BPE vocabulary and no merges
    to speak of: any text tokenizes, a byte a token (tests use it as a tiny GGUF model too)."""
    import gguf
    import numpy as np
    from gguf.quants import quantize

    rng = np.random.default_rng(0)
    types = gguf.GGMLQuantizationType
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(CONTEXT)
    writer.add_embedding_length(HIDDEN)
    writer.add_block_count(1)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_vocab_size(VOCAB)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    tokens = byte_tokens()  # VOCAB = 256: every byte is a token, so any text tokenizes
    writer.add_token_list(tokens)
    writer.add_token_types([1] * VOCAB)
    writer.add_token_merges([f"{tokens[0]} {tokens[1]}"])  # llama.cpp requires the key; [] is not written
    writer.add_eos_token_id(0)

    def matrix(name: str, rows: int, cols: int, qtype) -> None:
        values = (rng.standard_normal((rows, cols)) * 0.05).astype(np.float32)  # [rows, cols]
        if qtype == types.F16:
            writer.add_tensor(name, values.astype(np.float16))
        else:
            writer.add_tensor(name, quantize(values, qtype), raw_dtype=qtype)

    matrix("token_embd.weight", VOCAB, HIDDEN, types.F16)
    writer.add_tensor("blk.0.attn_norm.weight", np.ones(HIDDEN, np.float32))
    for part in ("q", "k", "v", "output"):
        matrix(f"blk.0.attn_{part}.weight", HIDDEN, HIDDEN, types.Q8_0)
    writer.add_tensor("blk.0.ffn_norm.weight", np.ones(HIDDEN, np.float32))
    matrix("blk.0.ffn_gate.weight", FFN, HIDDEN, types.Q4_0)
    matrix("blk.0.ffn_up.weight", FFN, HIDDEN, types.Q4_0)
    matrix("blk.0.ffn_down.weight", HIDDEN, FFN, types.Q4_0)
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    matrix("output.weight", VOCAB, HIDDEN, types.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


def decode(path: Path) -> str | None:
    """Load the model and decode a 2-token block, then one more token (the decode loop's two shapes);
    None when every step worked, else what failed."""
    import math

    import llama_cpp as lib

    lib.llama_backend_init()
    model = lib.llama_model_load_from_file(str(path).encode(), lib.llama_model_default_params())
    if not model:
        return "llama.cpp could not load the self-test model"
    params = lib.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_threads, params.n_threads_batch = CONTEXT, CONTEXT, 1, 1
    ctx = lib.llama_init_from_model(model, params)
    if not ctx:
        return "llama.cpp could not create a context for the self-test model"
    for ids in ((1, 2), (3,)):
        tokens = (lib.llama_token * len(ids))(*ids)
        status = lib.llama_decode(ctx, lib.llama_batch_get_one(tokens, len(ids)))
        if status != 0:
            return f"llama_decode returned {status} on the self-test model"
    logits = lib.llama_get_logits_ith(ctx, -1)
    if not all(math.isfinite(logits[i]) for i in range(VOCAB)):
        return "the self-test model's logits are not finite"
    lib.llama_free(ctx)
    lib.llama_model_free(model)
    return None


def main(folder: str) -> int:
    path = Path(folder) / "self-test.gguf"
    write_model(path)
    problem = decode(path)
    if problem is not None:
        print(problem, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
