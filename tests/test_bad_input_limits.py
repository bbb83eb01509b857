"""Inputs past a limit: a GGUF file cut short and an arrival rate that would wait for hours. Each is
refused in one line before anything is stored or waited for. Server answers too large to read:
tests/test_bad_input_serving.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from fake_servers import free_port
from test_bad_input_cli import _served_suite, _stored_runs, _suite
from test_gguf import require

from specmoe.backends.gguf_layout import check_gguf_layout
from specmoe.cli import main
from specmoe.errors import SpecmoeError
from specmoe.suite.groups import MAX_SCHEDULE_S
from specmoe.suite.load import load_suite

# --- 4. a GGUF file is checked whole before any run ------------------------------------------------


def _small_gguf(path: Path) -> Path:
    gguf = require("gguf")
    import numpy as np

    writer = gguf.GGUFWriter(path, "llama")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.ones((16, 8), dtype=np.float32))
    writer.add_tensor("output.weight", np.ones((16, 8), dtype=np.float16))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def test_a_gguf_cut_anywhere_is_refused_in_one_line(tmp_path):
    whole = _small_gguf(tmp_path / "whole.gguf")
    check_gguf_layout(whole)  # complete: passes
    data = whole.read_bytes()
    cut = tmp_path / "cut.gguf"
    for keep, why in ((40, "its header runs past"), (len(data) - 1, "tensor output.weight ends at byte")):
        cut.write_bytes(data[:keep])
        with pytest.raises(SpecmoeError, match="truncated GGUF file") as err:
            check_gguf_layout(cut)
        assert why in str(err.value) and "\n" not in str(err.value)
        assert str(err.value).endswith("copy or export it again")


def test_a_truncated_gguf_in_a_later_group_stores_nothing(tiny_zoo, tmp_path, capsys):
    require("llama_cpp")
    from specmoe.zoo.gguf import zoo_gguf

    good = zoo_gguf(tiny_zoo, "draft-xs", "f16")
    truncated = tmp_path / "draft-cut.gguf"
    truncated.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    # The first group runs the good file alone; only the second group's draft is cut short.
    suite = _suite(tmp_path, "gguf-cut", good, truncated)
    db = tmp_path / "r.db"
    assert main(["bench", "run", suite, "--db", str(db), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "truncated GGUF file" in err and str(truncated) in err, err
    assert _stored_runs(db) == 0


# --- 5. an open-loop rate whose arrivals would take hours ------------------------------------------


def _open_loop_suite(folder: Path, rate: float | str, requests: int) -> Path:
    load = {"request_rate": rate, "requests": requests}
    return Path(_served_suite(folder, f"http://127.0.0.1:{free_port()}/v1", load))


def test_a_rate_whose_arrivals_would_take_hours_is_refused(tmp_path, capsys):
    suite, db = _open_loop_suite(tmp_path, 1e-7, 2), tmp_path / "open.db"
    assert main(["bench", "run", str(suite), "--db", str(db), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1, err
    assert "groups[0].request_rate: request_rate 1e-07 requests/s spaces 2 request(s) 1e+07 s apart" in err
    assert "beyond the limit of 24 hours; raise request_rate" in err
    assert not db.exists()  # refused on reading the suite: no store made, no request sent


@pytest.mark.parametrize(
    ("rate", "requests", "refused"),
    [(0.1, 1000, False), ("inf", 10**5, False), (1e-7, 1, True), (0.01, 900, True)],
)
def test_the_rate_limit_is_the_expected_span_of_the_arrivals(tmp_path, rate, requests, refused):
    path = _open_loop_suite(tmp_path, rate, requests)
    if refused:
        with pytest.raises(SpecmoeError, match=f"beyond the limit of {MAX_SCHEDULE_S // 3600} hours"):
            load_suite(path)
    else:
        assert load_suite(path).groups[0].request_rate != (None,)
