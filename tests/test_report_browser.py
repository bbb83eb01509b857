"""The rendered report in a real browser: headless Chromium, driven from the command line.

A copy of report.html gets a probe script as the first element of <head>, so it runs before
anything else on the page: it records console.error calls, uncaught errors and failed resource
loads, and on the load event writes them, with every image's naturalWidth, whether the audit section
exists, the headings and the table cells, as JSON into a <pre id="probe">. `chromium --dump-dom`
prints the DOM after the page has loaded, and the test reads the probe back. No Python dependency
beyond the standard library.

Chromium comes from the Debian package `chromium`. Without it the test skips, unless the
environment variable CI is set: there a missing browser is a failure, not a skip.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from test_report import build_store, study_specs  # tests/ is on sys.path under pytest's default import mode
from test_report_explain import served_rows
from test_report_timing import write_small_report

from specmoe.report import write_report
from specmoe.results.store import Store

PROBE = """<script>
(() => {
  const problems = [];
  const originalError = console.error;
  console.error = (...args) => { problems.push("console.error: " + args.join(" ")); originalError(...args); };
  window.addEventListener("error", (event) => {
    const el = event.target;
    problems.push(el && el !== window ? "failed to load " + (el.src || el.href) : "error: " + event.message);
  }, true);
  window.addEventListener("unhandledrejection", (event) => problems.push("rejection: " + event.reason));
  window.addEventListener("load", () => {
    const probe = document.createElement("pre");
    probe.id = "probe";
    probe.textContent = JSON.stringify({
      problems,
      images: Array.from(document.images, (img) => ({src: img.getAttribute("src"), width: img.naturalWidth})),
      audit: document.getElementById("audit") !== null,
      headings: Array.from(document.querySelectorAll("h2, h3"), (h) => h.textContent),
      cells: Array.from(document.querySelectorAll("td"), (td) => td.textContent),
    });
    document.body.appendChild(probe);
  });
})();
</script>"""
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--virtual-time-budget=10000",
)


def chromium() -> str:
    path = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
    if path is None:
        reason = "chromium is not installed (Debian: apt-get install -y chromium)"
        if os.environ.get("CI", "").lower() not in ("", "0", "false"):
            pytest.fail(f"{reason}; CI is set, so the browser check may not be skipped")
        pytest.skip(reason)
    return path


def probe_page(report: Path, tmp_path: Path, extra_body: str = "") -> dict:
    """Load a probed copy of the report folder in Chromium; returns what the probe recorded."""
    copy = tmp_path / "page"
    shutil.copytree(report.parent, copy)
    page = copy / report.name
    text = report.read_text(encoding="utf-8").replace("<head>", "<head>\n" + PROBE, 1)
    page.write_text(text.replace("</body>", extra_body + "</body>", 1), encoding="utf-8")
    result = subprocess.run(
        [chromium(), *FLAGS, f"--user-data-dir={tmp_path / 'profile'}", "--dump-dom", page.as_uri()],
        capture_output=True,
        text=True,
        timeout=120,
    )
    found = re.search(r'<pre id="probe">(.*?)</pre>', result.stdout, re.S)
    assert found, f"no probe output (exit {result.returncode}); stderr tail: {result.stderr[-2000:]}"
    return json.loads(html.unescape(found.group(1)))


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    chromium()  # skip (or fail under CI) before spending time on the report
    folder = tmp_path_factory.mktemp("browser")
    build_store(folder / "results.sqlite", study_specs(), failing=study_specs()[1].run_id)
    return write_report(folder / "results.sqlite", folder / "out")


def test_report_loads_cleanly_in_chromium(report, tmp_path):
    seen = probe_page(report, tmp_path)
    assert seen["problems"] == []
    assert seen["images"], "the report shows no image"
    assert [i["src"] for i in seen["images"] if i["width"] <= 0] == []
    assert seen["audit"]


def test_serving_report_loads_cleanly_in_chromium(tmp_path):
    chromium()
    with Store(tmp_path / "served.sqlite") as store:
        for row in served_rows():
            store.add(row)
    report = write_report(tmp_path / "served.sqlite", tmp_path / "out")
    seen = probe_page(report, tmp_path)
    assert seen["problems"] == []
    sources = [i["src"] for i in seen["images"]]
    assert {"figures/speedup_vs_concurrency.png", "figures/latency_cdf.png"} <= set(sources)
    assert [i["src"] for i in seen["images"] if i["width"] <= 0] == []


def test_time_views_heatmap_intervals_and_noisy_notice_render_in_chromium(tmp_path):
    chromium()
    report = write_small_report(tmp_path)  # a γ × B grid, an UNSTABLE configuration, an all-noisy one
    seen = probe_page(report, tmp_path)
    assert seen["problems"] == []
    sources = {i["src"]: i["width"] for i in seen["images"]}
    for view in ("decode_ms_per_token", "prefill_ttft", "gamma_batch_speedup"):
        assert sources.get(f"figures/{view}.png", 0) > 0, view
    for heading in (
        "Decode time per output token: draft, verify, overhead",
        "Prefill and time to first token (local runs)",
        "Decode time per output token, by configuration",
        "Prefill and time to first token, by configuration",
        "Speedup over γ × batch size",
        "Speedup over γ × batch size, cell by cell",
    ):
        assert seen["headings"].count(heading) == 1, heading
    notices = [c for c in seen["cells"] if "all 2 runs flagged noisy: no number" in c]
    assert len(notices) >= 5  # baseline and SD rows, time per token and prompt phase, the SD table
    assert any(c.startswith("UNSTABLE: ") for c in seen["cells"])


def test_probe_catches_a_broken_image_and_console_errors(report, tmp_path):
    # The negative control: without it, a probe that never ran would pass the test above.
    broken = '<img src="figures/missing.png" alt="missing"><script>console.error("boom")</script>'
    seen = probe_page(report, tmp_path, extra_body=broken)
    assert any("missing.png" in p for p in seen["problems"])
    assert "console.error: boom" in seen["problems"]
    assert [i["src"] for i in seen["images"] if i["width"] <= 0] == ["figures/missing.png"]
