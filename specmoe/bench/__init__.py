"""The benchmark harness: declarative suites measured into a resumable store (docs/suites.md).

Below the report and findings, above zoo, perf, the results store and the engine's API; it drives
servers through `specmoe.serving`. The modules, one concept each:

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
- Rows: `spec_row` (a finished run's stored row, built from its spec), `legacy_keys` (stored runs
  keep their keys); the store and its row model are `specmoe.results`.
- Reading results: `summary_table` and `summary_rich` (the result table), `story` (the demo's
  sentences).
- `quick`: a sweep from command-line arguments.
"""
