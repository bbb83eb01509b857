"""Weight and KV-cache storage formats as the performance model sees them: bits per weight, scales
included, and the dtype whose matrix rate the kernels run at.

A decode step streams every weight it touches, so what a format changes first is bytes. Block
formats store a scale (and sometimes a minimum or zero point) per block of weights; those bytes are
read too and are counted here:

    GGUF legacy blocks (32 weights)  q4_0 = 16 B of nibbles + fp16 scale = 18 B -> 4.5 bits
                                     q4_1 adds an fp16 minimum (5.0), q5_0 / q5_1 (5.5 / 6.0),
                                     q8_0 = 32 B + fp16 scale = 34 B -> 8.5 bits
    GGUF k-quant super-blocks (256)  q2_k 84 B (2.625), q3_k 110 B (3.4375), q4_k 144 B (4.5),
                                     q5_k 176 B (5.5), q6_k 210 B (6.5625)
    GGUF file mixes (_s/_m/_l)       a mix of the above per tensor; the average that llama.cpp's
                                     quantize tool reports for Llama-2-7B (q4_k_m 4.84, q5_k_m 5.68,
                                     q3_k_m 3.91, ...): a model's own mix differs by a few percent
    MLX affine (group 64)            b bits + an fp16 scale and an fp16 bias per 64 weights: b + 0.5
    AWQ / GPTQ int4 (group 128)      4 bits + an fp16 scale and a 4-bit zero per 128: 4.156
    MXFP4 (block 32)                 4 bits + an 8-bit shared exponent per 32: 4.25
    fp8 (e4m3), int8                 8 bits; per-channel or per-block scales are under 0.1%

`compute_dtype` names the rate in a hardware file's `flops_per_s` that the format's matrix products
run at: fp8 runs at the float8 rate where the device lists one, every weight-only format (GGUF,
MLX, int4) dequantises to float16 and runs at that rate. Engines reach a fraction of it, which is
theirs to say (`specmoe.perf.engines`).
"""

from __future__ import annotations

from dataclasses import dataclass

from specmoe.errors import SpecmoeError


@dataclass(frozen=True)
class WeightFormat:
    """How one weight (or one cached K/V element) is stored."""

    name: str
    bits: float  # per weight, block scales and minimums included
    compute_dtype: str  # the `flops_per_s` entry its matrix products run at
    family: str  # "float", "gguf", "mlx", "int", "fp8"

    @property
    def bytes_per_weight(self) -> float:
        return self.bits / 8


def _gguf(name: str, block_bytes: int, block_weights: int) -> WeightFormat:
    return WeightFormat(name, 8 * block_bytes / block_weights, "float16", "gguf")


def _gguf_mix(name: str, bits: float) -> WeightFormat:
    return WeightFormat(name, bits, "float16", "gguf")


_FORMATS: tuple[WeightFormat, ...] = (
    WeightFormat("float32", 32, "float32", "float"),
    WeightFormat("float16", 16, "float16", "float"),
    WeightFormat("bfloat16", 16, "bfloat16", "float"),
    WeightFormat("float64", 64, "float64", "float"),
    WeightFormat("fp8", 8, "float8", "fp8"),
    WeightFormat("int8", 8, "float16", "int"),
    WeightFormat("int4", 4 + (16 + 4) / 128, "float16", "int"),
    WeightFormat("mxfp4", 4 + 8 / 32, "float16", "mx"),
    _gguf("q4_0", 18, 32),
    _gguf("q4_1", 20, 32),
    _gguf("q5_0", 22, 32),
    _gguf("q5_1", 24, 32),
    _gguf("q8_0", 34, 32),
    _gguf("q2_k", 84, 256),
    _gguf("q3_k", 110, 256),
    _gguf("q4_k", 144, 256),
    _gguf("q5_k", 176, 256),
    _gguf("q6_k", 210, 256),
    _gguf_mix("q3_k_s", 3.50),
    _gguf_mix("q3_k_m", 3.91),
    _gguf_mix("q3_k_l", 4.27),
    _gguf_mix("q4_k_s", 4.58),
    _gguf_mix("q4_k_m", 4.84),
    _gguf_mix("q5_k_s", 5.52),
    _gguf_mix("q5_k_m", 5.68),
    WeightFormat("mlx-3bit", 3.5, "float16", "mlx"),
    WeightFormat("mlx-4bit", 4.5, "float16", "mlx"),
    WeightFormat("mlx-6bit", 6.5, "float16", "mlx"),
    WeightFormat("mlx-8bit", 8.5, "float16", "mlx"),
)
FORMATS: dict[str, WeightFormat] = {f.name: f for f in _FORMATS}

# Spellings users bring from other tools, mapped to the names above.
_ALIASES = {
    "fp32": "float32",
    "f32": "float32",
    "fp16": "float16",
    "f16": "float16",
    "half": "float16",
    "bf16": "bfloat16",
    "fp8_e4m3": "fp8",
    "float8": "fp8",
    "e4m3": "fp8",
    "w8a8": "int8",
    "w8a16": "int8",
    "awq": "int4",
    "gptq": "int4",
    "w4a16": "int4",
    "mlx-4": "mlx-4bit",
    "mlx-8": "mlx-8bit",
}


def weight_format(name: str, where: str = "--dtype") -> WeightFormat:
    """The format called `name` (case-insensitive, common aliases accepted) or one clear error."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in FORMATS:
        raise SpecmoeError(
            f"{where}: unknown weight format '{name}'; known: {', '.join(FORMATS)} "
            f"(aliases: {', '.join(sorted(_ALIASES))})"
        )
    return FORMATS[key]


def format_of_quantization(config: dict) -> WeightFormat | None:
    """The format a checkpoint's quantisation block describes: Hugging Face's `quantization_config`
    (fp8, AWQ, GPTQ) or MLX's `quantization` ({"group_size", "bits"}); None when it names nothing
    this table can cost (the caller then asks for --dtype)."""
    method = str(config.get("quant_method", "")).lower()
    bits = config.get("bits") or config.get("w_bit") or config.get("weight_bits")
    if method == "fp8" or str(config.get("fmt", "")).startswith("e4m3"):
        return FORMATS["fp8"]
    if method == "mxfp4":
        return FORMATS["mxfp4"]
    if method in ("awq", "gptq", "compressed-tensors") and bits in (4, 8):
        return FORMATS["int4" if bits == 4 else "int8"]
    group = config.get("group_size")
    if not method and isinstance(group, int) and group > 0 and bits in (2, 3, 4, 5, 6, 8):
        # MLX affine: b bits plus an fp16 scale and an fp16 bias per group
        return WeightFormat(f"mlx-{bits}bit", bits + 32 / group, "float16", "mlx")
    return None
