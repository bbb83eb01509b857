"""Reading and writing the performance model's JSON files, and parsing count lists such as "1,2,4".

Every file carries `schema` and `kind` ("specmoe-profile", "specmoe-fit", "specmoe-hardware") so
that passing one where another is expected fails in one line instead of deep inside a formula.
"""

from __future__ import annotations

import json
from pathlib import Path

from specmoe.canonical import json_value
from specmoe.errors import SpecmoeError
from specmoe.user_files import read_user_text

SCHEMA = 1
# The longest draft a prediction or an advice scores, per round: far past any engine's draft length
# (vLLM, SGLang and llama.cpp draft a handful of tokens), and short enough that scoring every γ up to
# it stays quick (the composed schedule grows with γ²: 10,000 took longer than anyone waits).
MAX_GAMMA = 64
# The largest batch a profile, prediction or advice takes: past any engine's concurrent sequences
# (vLLM's max_num_seqs defaults to 256, SGLang's running requests to a few thousand) and the suites'
# own limit; a batch of millions has a KV cache no machine holds, so its roofline answers nothing.
MAX_BATCH = 4096
# The most cached tokens per sequence a prediction or an advice prices: ten times the longest
# context any released model accepts (10M tokens); past it the KV cache of even one sequence
# outgrows every machine, and at 1e30 the roofline's times overflow.
MAX_CONTEXT = 100_000_000


def check_context(context: int) -> int:
    """--context: cached tokens per sequence, a whole number in [0, MAX_CONTEXT]."""
    if not 0 <= context <= MAX_CONTEXT:
        raise SpecmoeError(f"--context must be between 0 and {MAX_CONTEXT:,} tokens, got {context}")
    return context


def read_json(path: Path, kinds: tuple[str, ...], hint: str) -> dict:
    """The parsed file, which must be one of `kinds`; `hint` says how to make a good one."""
    path = Path(path)
    try:
        data = json_value(read_user_text(path))
    except FileNotFoundError:
        raise SpecmoeError(f"'{path}' not found; {hint}") from None
    except UnicodeDecodeError:
        raise SpecmoeError(f"'{path}' is not UTF-8 text, so not a specmoe JSON file; {hint}") from None
    except json.JSONDecodeError as err:
        raise SpecmoeError(f"'{path}' is not valid JSON ({err.msg}, line {err.lineno}); {hint}") from None
    kind = data.get("kind") if isinstance(data, dict) else None
    if kind not in kinds:
        raise SpecmoeError(
            f"'{path}' is a {kind or 'JSON file of unknown kind'}, expected {' or '.join(kinds)}; {hint}"
        )
    if data.get("schema") != SCHEMA:
        raise SpecmoeError(f"'{path}' has schema {data.get('schema')!r}, this specmoe reads {SCHEMA}; {hint}")
    return data


def write_json(path: Path, data: dict) -> Path:
    """Write `data` as indented JSON, creating parent folders. Errors propagate: results must not vanish."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def parse_counts(
    text: str | list[int] | tuple[int, ...], name: str, minimum: int = 1, maximum: int | None = None
) -> list[int]:
    """ "1,2,4" (or a list) as sorted distinct integers in [minimum, maximum]; `name` is the option,
    for errors."""
    items = text.split(",") if isinstance(text, str) else list(text)
    values = []
    for item in items:
        try:
            value = int(str(item).strip())
        except ValueError:
            raise SpecmoeError(f"{name}: '{item}' is not an integer; pass a list such as 1,2,4") from None
        if value < minimum:
            raise SpecmoeError(f"{name}: {value} is not allowed, every value must be an integer >= {minimum}")
        if maximum is not None and value > maximum:
            raise SpecmoeError(f"{name}: {value} is above the limit of {maximum}; pass values <= {maximum}")
        values.append(value)
    if not values:
        raise SpecmoeError(f"{name} is empty; pass a list such as 1,2,4")
    return sorted(set(values))


def parse_fractions(text: str | list[float], name: str) -> list[float]:
    """ "0.6,0.8" (or a list) as floats in [0, 1], in the given order."""
    items = text.split(",") if isinstance(text, str) else list(text)
    values = []
    for item in items:
        try:
            value = float(str(item).strip())
        except ValueError:
            raise SpecmoeError(f"{name}: '{item}' is not a number; pass fractions such as 0.6,0.8") from None
        if not 0.0 <= value <= 1.0:
            raise SpecmoeError(f"{name}: {value} is outside [0, 1]; acceptance 80% is 0.8")
        values.append(value)
    if not values:
        raise SpecmoeError(f"{name} is empty; pass fractions such as 0.6,0.8")
    return values
