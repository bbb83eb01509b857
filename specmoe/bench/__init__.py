"""The benchmark harness: declarative suites measured into a resumable store (docs/suites.md).

Below the report and findings, above zoo, perf and the engine's API; it drives servers through
`specmoe.serving`. The modules, one concept each:

- Suite files: `suite_schema` (the format, as pydantic models), `suite_load` (TOML, overrides,
  schema, models), `suite_groups` (groups checked into `Group`s), `suite_expand` (groups into
  `RunSpec`s), `suite` (the parsed types), `suite_errors` (one line per problem), `suite_size`,
  `suite_zoo` (the zoo a suite runs on), `overrides` (`--set`), `model_paths` (a model's spelling
  to its files), `shipped` (the suites in the source tree).
- Measuring: `preflight` (everything a suite needs, checked first), `plan` (blocks of paired arms in
  a seeded order), `suite_run` (the store's missing runs, block by block), `executors` (this process
  or Ray), `runner` (one engine path, one clock), `served` and `served_rows` (a run against a
  server), `batches` (the prompts a run decodes), `noise` (the noise guard), `env` (the machine,
  recorded), `weights_check` (weights unchanged since stored), `progress` (what a run shows).
- The store: `store` (SQLite, one row per finished run), `run_row` (the stored row), `run_config`
  (its configuration, typed), `legacy_keys`, `store_export` (CSV/JSON), `per_prompt`.
- Reading results: `audit` (every run against physics and counting), `summary` (SD against its
  baseline, per cell), `summary_table` and `summary_rich` (the result table), `latency` (server
  runs' percentiles), `story` (the demo's sentences).
- `quick`: a sweep from command-line arguments.
"""
