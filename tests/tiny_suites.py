"""Suite files for tests: the tiny zoo's MoE with draft-xs at γ 2, defaults given per test."""

from __future__ import annotations

from pathlib import Path


def tiny_sd_suite(directory: Path, name: str, defaults: str) -> Path:
    """Write `<name>.toml`: one group, MoE target, draft-xs at γ 2, float32, and the given
    [defaults] lines (TOML text); returns its path."""
    path = directory / f"{name}.toml"
    path.write_text(
        f'schema = 1\nname = "{name}"\n[zoo]\npreset = "tiny"\n[defaults]\ndtype = "float32"\n{defaults}\n'
        '[models.moe]\nzoo = "moe"\n[models.draft-xs]\nzoo = "draft-xs"\n'
        '[[groups]]\nname = "g"\ntarget = ["moe"]\ndraft = ["draft-xs"]\ngamma = [2]\n',
        encoding="utf-8",
    )
    return path
