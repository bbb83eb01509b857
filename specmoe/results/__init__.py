"""Measured results: the store, its row model and what is read from it (docs/suites.md).

Below the harness that writes it and the report and findings that read it; it imports nothing that
needs torch, so reading a results database loads no model runtime. The modules, one concept each:

- `store` (SQLite, one row per finished run), `run_row` (the stored row), `run_config` (its
  configuration, typed), `export` (CSV, Parquet), `per_prompt` (one record per prompt).
- `run_audit` (every run against physics and counting), `compare` (SD against its baseline, per
  cell), `latency` (server runs' percentiles), `noisy` (what a run flagged noisy means).
"""
