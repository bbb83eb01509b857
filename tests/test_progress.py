"""Suite progress: the time-left estimate as a pure function, and the lines written when stderr is not
a terminal (one per finished block, each SD arm's speedup on it). No test reads a clock's value."""

from __future__ import annotations

import logging
import re
from types import SimpleNamespace

import pytest

from specmoe.bench.plan import Block
from specmoe.bench.progress import SuiteProgress, apportion, block_line, block_results, duration, eta_seconds
from specmoe.bench.refusals import SkippedRun
from specmoe.cli import main
from specmoe.console import configure_logging
from specmoe.drafts import stored_gamma


@pytest.fixture
def restore_logging():
    root, ours = logging.getLogger(), logging.getLogger("specmoe")
    handlers, levels = list(root.handlers), (root.level, ours.level)
    yield
    root.handlers[:] = handlers
    root.setLevel(levels[0])
    ours.setLevel(levels[1])


def test_each_remaining_run_costs_its_own_arms_mean():
    finished = {"moe": [1.0, 3.0], "moe + draft g=4": [6.0]}
    remaining = {"moe": 2, "moe + draft g=4": 3}
    # 2 × 2 s + 3 × 6 s, where runs-left × mean-per-run would say 5 × 10/3 s
    assert eta_seconds(finished, remaining, elapsed=10.0) == pytest.approx(22.0)


def test_an_arm_with_no_finished_run_costs_the_overall_mean():
    finished = {"moe": [2.0, 2.0], "moe + draft g=2": [8.0]}
    assert eta_seconds(finished, {"moe + draft g=8": 3}, elapsed=12.0) == pytest.approx(3 * 4.0)


def test_runs_measured_side_by_side_shorten_the_wall_time_left():
    finished = {"moe": [4.0, 4.0, 4.0, 4.0]}  # 16 s of runs in 8 s of wall clock: two workers
    assert eta_seconds(finished, {"moe": 4}, elapsed=8.0) == pytest.approx(8.0)


def test_no_estimate_before_a_run_finished_and_none_needed_after_the_last():
    assert eta_seconds({}, {"moe": 3}, elapsed=5.0) is None
    assert eta_seconds({"moe": [1.0]}, {"moe": 0}, elapsed=1.0) == 0.0


def test_a_blocks_wall_time_is_split_by_its_runs_own_times():
    assert apportion(9.0, [1.0, 2.0]) == pytest.approx([3.0, 6.0])
    assert apportion(9.0, [1.0, None, 2.0]) == pytest.approx([3.0, 3.0, 3.0])  # unknown: evenly
    assert apportion(1.0, []) == []


def test_durations_read_as_a_person_says_them():
    assert [duration(s) for s in (None, 4.4, 65, 3725)] == ["?", "4 s", "1 min 05 s", "1 h 02 min"]


def spec(arm: str, batch: int, draft: str | None = None, gamma: int | None = None):
    where = {"group": "g", "concurrency": None, "batch_size": 1, "prompt_length": None, "repeat": 0}
    return SimpleNamespace(
        run_id=f"{arm}-{batch}",
        arm=arm,
        target="moe",
        draft=draft,
        gamma=gamma,
        prompt_set="/x/code.jsonl",
        prompt_batch=batch,
        baseline_key=f"b{batch}",
        **where,
    )


def row(spec, tokens_per_s: float):
    key = spec.baseline_key if spec.arm == "baseline" else f"{spec.baseline_key}-{spec.draft}"
    config = {"target": spec.target, "draft": spec.draft, "gamma": stored_gamma(spec.gamma)}
    return SimpleNamespace(
        arm=spec.arm,
        config=config,
        times=SimpleNamespace(wall_s=1.0),
        tokens_per_s=tokens_per_s,
        config_key=key,
        repeat=0,
    )


def blocks_and_rows():
    blocks = []
    for batch in range(2):
        specs = (spec("baseline", batch), spec("sd", batch, "draft-xs", 4))
        blocks.append((Block(specs), [row(specs[0], 100.0), row(specs[1], 150.0)]))
    return blocks


def run_progress(blocks) -> None:
    specs = [s for block, _ in blocks for s in block.specs]
    with SuiteProgress(specs, skipped=3, baselines={}) as progress:
        for block, rows in blocks:
            progress.started(block)
            progress.finished(block, rows)


def test_without_a_terminal_each_finished_block_is_one_plain_line(capsys, restore_logging):
    configure_logging(0, terminal=False)
    run_progress(blocks_and_rows())
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 4 and "\r" not in "".join(lines)
    assert all(re.match(r"\d\d:\d\d:\d\d INFO specmoe\.bench\.progress: ", line) for line in lines)
    assert lines[0].endswith("4 runs to measure (3 already stored)")
    assert (
        "[2/4] g: moe B=1 code batch 0 repeat 0 | baseline 100.0 tok/s | draft-xs g=4 150.0 tok/s 1.50×"
        in lines[1]
    )
    assert "[4/4]" in lines[2] and "left" in lines[2]
    assert "4 of 4 runs measured in" in lines[3]


def test_a_block_a_model_refused_counts_as_skipped_not_measured(capsys, restore_logging):
    configure_logging(0, terminal=False)
    (measured, rows), (refused, _) = blocks_and_rows()
    skipped = [SkippedRun(s.run_id, "g", "moe", "refused") for s in refused.specs]
    with SuiteProgress([*measured.specs, *refused.specs], skipped=0, baselines={}) as progress:
        progress.finished(measured, rows)
        progress.finished(refused, [], skipped)
        assert progress.remaining == {"moe": 0, "moe + draft-xs g=4": 0}
    lines = capsys.readouterr().err.splitlines()
    assert "[4/4] g: moe B=1 code batch 1 repeat 0 | 2 run(s) skipped |" in lines[2]
    assert "2 of 4 runs measured, 2 skipped in" in lines[3]


def test_quiet_shows_no_progress(capsys, restore_logging):
    configure_logging(-1, terminal=False)
    run_progress(blocks_and_rows())
    assert capsys.readouterr().err == ""


def test_an_sd_run_whose_baseline_is_stored_is_compared_with_it():
    (_, rows), _ = blocks_and_rows()
    base, arms = block_results(rows[1:], baseline=rows[0])
    assert base == 100.0 and arms[0].speedup == pytest.approx(1.5)
    assert block_results(rows[1:], baseline=None)[1][0].speedup is None
    line = block_line(2, 4, "g: moe", base, arms, elapsed=5.0, eta=None)
    assert (
        line
        == "[2/4] g: moe | baseline 100.0 tok/s | draft-xs g=4 150.0 tok/s 1.50× | 5 s elapsed, about ? left"
    )


def test_a_suite_run_without_a_terminal_logs_each_block_and_prints_the_summary(
    tiny_zoo, tmp_path, capsys, restore_logging, monkeypatch
):
    from tiny_suites import tiny_sd_suite

    monkeypatch.setenv("SPECMOE_NOISE_GUARD", "0")
    path = tiny_sd_suite(tmp_path, "tiny", {"prompts": 2, "max_new_tokens": 4, "repeats": 1, "warmup": 0})
    argv = [
        "bench",
        "run",
        str(path),
        "--db",
        str(tmp_path / "r.db"),
        "--zoo",
        str(tiny_zoo),
        "--threads",
        "1",
    ]
    assert main(argv) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "specmoe.bench.progress" in line]
    assert [re.search(r"\[(\d/\d)\]", line).group(1) for line in lines[1:-1]] == ["2/4", "4/4"]
    assert all(re.search(r"draft-xs g=2 [\d.]+ tok/s [\d.]+×", line) for line in lines[1:-1])
    assert "\r" not in captured.err
    assert (
        "speedup [interval] level n" in captured.out and "progress" not in captured.out
    )  # the table on stdout
