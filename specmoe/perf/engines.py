"""Engine profiles: what an engine adds to the hardware's roofline, as data.

The first-principles forward time is "stream the bytes at the hardware's bandwidth, or do the
FLOPs at its matrix rate, whichever is longer". Real engines differ from it in five ways, and a
profile gives each a number with its source:

    forward_s             fixed seconds per forward pass: graph launch, synchronisation, sampling
                          set-up (CUDA graphs make it small; eager PyTorch makes it large)
    layer_s               seconds per layer per forward: kernel launches and Python dispatch that
                          grow with depth (why a 0.5B draft does not run at 1/15 of an 8B's time)
    expert_s              seconds per activated expert per MoE layer: an expert loop's launches,
                          gathers and scatters (eager transformers), 0 for fused MoE kernels
    round_s               host seconds per SD round outside the forwards: acceptance, committing
                          tokens, rolling back the caches, switching between draft and target
    round_seq_s           host seconds per SD round and live sequence: per-request acceptance and
                          bookkeeping an engine does in Python, beyond what a plain step does
    step_s                host seconds per plain decode step outside the forward
    ngram_s               seconds per round an n-gram (prompt-lookup) drafter spends searching
    bandwidth_efficiency  achieved share of the nominal memory bandwidth in a decode step
    compute_efficiency    achieved share of the nominal matrix rate, per weight-format family
                          (quantised kernels dequantise on the fly and reach less)
    reread                μ per weight-format family: rows over which a kernel streams the weights
                          again (`specmoe.perf.model.weight_cost`); llama.cpp's quantised kernels
                          multiply a few rows as separate matrix-vector products, so a 5-token
                          verify costs several one-token steps there
    uncertainty           the factor the profile's predictions are known to miss by (its band)
    band_basis            where that band comes from: "held-out" (the 80th percentile of the
                          engine's leave-one-source-out error factors over `band_rows` published
                          rows, `specmoe calibrate`), "this CPU" (the spread of the check on
                          this machine) or "prior" (no held-out estimate: the priors' 1.5)
    max_shortfall         the largest factor by which a held-out prediction fell short of the
                          measured speedup (measured ÷ predicted); a NO-GO must survive it. Absent
                          (no held-out misses to go by): the band
    hybrid_rollback       how a hybrid model's linear-attention state goes back to the committed
                          tokens after a verify: "readvance", "per_position", "redecode" or "none"
                          (`specmoe.perf.rollback`, which prices each by the bytes it moves)
    rollback_by_draft     the method for drafters that roll back otherwise, by `--draft` method
                          (llama.cpp snapshots every verified position only for its head and block
                          drafters; a separate draft model still checkpoints and decodes again).
                          An older build is one line: `hybrid_rollback = "redecode"` in --engines
    expert_offload        whether the engine can keep routed experts in host memory (llama.cpp's
                          --n-cpu-moe; `specmoe.perf.offload`)

`specmoe/perf/engines.toml` ships the profiles: their descriptions, devices, rollback methods and
sources, with the numbers of the CUDA and Apple-silicon ones from `specmoe/perf/constants.toml`
(their one home: prior, fit range and fitted value); `--engines FILE` adds or replaces whole
profiles with the same keys. A user who can profile their own machine replaces all of this with a fit
(`specmoe profile` + `specmoe model fit`, then `specmoe advise FIT`).
"""

from __future__ import annotations

import math
import tomllib
from enum import StrEnum
from importlib import resources
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from specmoe.errors import SpecmoeError
from specmoe.perf.constants import SHIPPED as CONSTANTS
from specmoe.perf.constants import load_constants, profile_values
from specmoe.perf.drafts import DraftMethod
from specmoe.perf.formats import WeightFormat
from specmoe.perf.rollback import HybridRollback
from specmoe.user_files import read_user_text

DEVICES = ("cuda", "mps", "cpu")


class BandBasis(StrEnum):
    PRIOR = "prior"
    HELD_OUT = "held-out"
    THIS_CPU = "this CPU"


class EngineProfile(BaseModel):
    """One engine on one kind of device; every time in seconds, every share in (0, 1]."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = ""
    description: str
    device: str = Field(pattern="^(cuda|mps|cpu)$")
    forward_s: float = Field(0.0, ge=0, lt=1)
    layer_s: float = Field(0.0, ge=0, lt=1)
    expert_s: float = Field(0.0, ge=0, lt=1)
    round_s: float = Field(0.0, ge=0, lt=1)
    round_seq_s: float = Field(0.0, ge=0, lt=1)
    step_s: float = Field(0.0, ge=0, lt=1)
    ngram_s: float = Field(0.0, ge=0, lt=1)
    bandwidth_efficiency: float = Field(1.0, gt=0, le=1)
    compute_efficiency: dict[str, float] = Field(default_factory=dict)
    reread: dict[str, float] = Field(default_factory=dict)
    sharpness: float | None = Field(None, ge=1)  # None: the hard roofline
    uncertainty: float = Field(1.5, ge=1)
    band_basis: BandBasis = BandBasis.PRIOR
    band_rows: int = Field(0, ge=0)  # held-out rows behind a "held-out" band
    max_shortfall: float | None = Field(None, ge=1)
    # how the engine rolls a hybrid model's linear-attention state back (`specmoe.perf.rollback`)
    hybrid_rollback: HybridRollback = HybridRollback.READVANCE
    rollback_by_draft: dict[DraftMethod, HybridRollback] = Field(default_factory=dict)
    expert_offload: bool = False
    sources: dict[str, str] = Field(default_factory=dict)

    def rollback_for(self, method: DraftMethod) -> HybridRollback:
        """The rollback this engine runs on a hybrid model with `method` drafting."""
        return self.rollback_by_draft.get(method, self.hybrid_rollback)

    def overhead_s(self, layers: int) -> float:
        """Fixed seconds of one forward of a `layers`-deep network."""
        return self.forward_s + self.layer_s * layers

    def compute_share(self, weights: WeightFormat) -> float:
        return _by_format(self.compute_efficiency, weights, 1.0)

    def reread_rows(self, weights: WeightFormat) -> float:
        return max(1.0, _by_format(self.reread, weights, 1.0))

    @property
    def band_text(self) -> str:
        """The band and where it comes from, for a reader."""
        if self.band_basis is BandBasis.HELD_OUT:
            rows = self.band_rows
            text = f"×/÷ {self.uncertainty:g}, the 80th percentile of {rows} held-out published rows"
            if self.shortfall > self.uncertainty:
                text += f"; NO-GO only below 1× even ×{self.shortfall:g}, the largest held-out shortfall"
            return text
        if self.band_basis is BandBasis.THIS_CPU:
            return f"×/÷ {self.uncertainty:g}, the spread of the check on this CPU"
        return f"×/÷ {self.uncertainty:g}, a prior: no held-out estimate for this engine"

    @property
    def shortfall(self) -> float:
        """The factor a NO-GO must survive (`breakeven.verdict`): never below the band."""
        return max(self.uncertainty, self.max_shortfall or self.uncertainty)

    @property
    def roofline_sharpness(self) -> float:
        return math.inf if self.sharpness is None else self.sharpness


def _by_format(table: dict[str, float], weights: WeightFormat, default: float) -> float:
    """A per-format value: the format's own name first, then its family, then "default"."""
    for key in (weights.name, weights.family, "default"):
        if key in table:
            return table[key]
    return default


_SHIPPED = "engines.toml"


def _parse(raw: dict, where: str, constants: dict | None = None) -> dict[str, EngineProfile]:
    """The profiles of an engines file; `constants` (engine -> key -> Constant, the shipped
    constants.toml) gives the shipped profiles their numbers, which engines.toml must not repeat."""
    engines = raw.get("engines")
    if not isinstance(engines, dict) or not engines:
        raise SpecmoeError(f"{where}: no [engines.NAME] tables; see specmoe/perf/engines.toml for the keys")
    profiles = {}
    for name, table in engines.items():
        values = profile_values((constants or {}).get(name, {}))
        if isinstance(table, dict) and (twice := sorted(set(values) & set(table))):
            raise SpecmoeError(
                f"{where}: engines.{name}.{twice[0]} is also in {CONSTANTS}; a value has one home, there"
            )
        try:
            profiles[name] = EngineProfile(name=name, **values, **table)
        except ValidationError as err:
            first = err.errors()[0]
            key = ".".join(str(part) for part in first["loc"])
            raise SpecmoeError(f"{where}: engines.{name}.{key}: {first['msg']}") from None
        except TypeError as err:
            raise SpecmoeError(f"{where}: engines.{name} must be a table of keys ({err})") from None
    return profiles


def load_engines(extra: Path | None = None) -> dict[str, EngineProfile]:
    """The shipped profiles, with those of `extra` (a TOML file of the same shape) added or replacing."""
    text = resources.files("specmoe.perf").joinpath(_SHIPPED).read_text(encoding="utf-8")
    profiles = _parse(tomllib.loads(text), _SHIPPED, load_constants())
    if extra is not None:
        path = Path(extra)
        try:
            raw = tomllib.loads(read_user_text(path))
        except FileNotFoundError:
            raise SpecmoeError(
                f"engine file '{path}' not found; pass a TOML file of [engines.NAME] tables"
            ) from None
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as err:
            raise SpecmoeError(f"engine file '{path}' is not valid TOML ({err})") from None
        except RecursionError:  # the parser recurses per level; a profile nests one
            raise SpecmoeError(
                f"engine file '{path}' nests arrays or tables too deeply to read; write [engines.NAME] "
                "tables of numbers"
            ) from None
        profiles.update(_parse(_over_shipped(raw, profiles), str(path)))
    return profiles


def _over_shipped(raw: dict, shipped: dict[str, EngineProfile]) -> dict:
    """A user's table without a `description` for a shipped engine changes only the keys it gives
    (`[engines.llamacpp-cuda] hybrid_rollback = "redecode"` for an older build); any other table
    is a whole profile."""
    engines = raw.get("engines")
    if not isinstance(engines, dict):
        return raw
    merged = {}
    for name, table in engines.items():
        if isinstance(table, dict) and "description" not in table and name in shipped:
            base = shipped[name].model_dump(exclude={"name"}, exclude_defaults=True, mode="json")
            table = {**base, **table}
        merged[name] = table
    return {**raw, "engines": merged}


def engine_profile(name: str, device: str | None = None, extra: Path | None = None) -> EngineProfile:
    """The profile called `name`; `device` (the hardware file's) must be the one it runs on."""
    profiles = load_engines(extra)
    if name not in profiles:
        raise SpecmoeError(f"unknown engine '{name}'; available: {', '.join(profiles)} (or --engines FILE)")
    profile = profiles[name]
    if device is not None and _device_kind(device) != profile.device:
        same = [n for n, p in profiles.items() if p.device == _device_kind(device)]
        raise SpecmoeError(
            f"engine '{name}' runs on {profile.device}, the hardware file is a {_device_kind(device)} "
            f"device; pick one of: {', '.join(same) or 'none shipped'}"
        )
    return profile


def _device_kind(device: str) -> str:
    """ "cuda:0" -> "cuda"; anything unknown is taken as a CPU."""
    kind = str(device).split(":", 1)[0].lower()
    return kind if kind in DEVICES else "cpu"
