"""The benchmark harness: suites measured into a resumable results store (docs/suites.md).

Below the findings; above the suites (`specmoe.suite`), zoo, perf, the results store
(`specmoe.results`) and the decode loop's API, and beside the report, which it never imports; it drives
servers through `specmoe.serving`. The modules, one concept each:

- Measuring: `preflight` (everything a suite needs, checked first), `plan` (blocks of paired arms in
  a seeded order), `suite_run` (the store's missing runs, block by block), `suite_zoo` (the zoo a
  suite runs on), `executors` (this process or Ray), `runner` (one decoding path, one clock), `served`
  and `served_rows` (a run against a server), `batches` (the prompts a run decodes), `noise` (the
  noise guard), `env` (the machine, recorded), `weights_check` (weights unchanged since stored),
  `progress` (what a run shows), `spec_row` (a finished run's stored row, built from its spec),
  `refusals` (runs a model refuses: SD arms on a target that cannot roll back, B > 1 on a model
  that cannot decode a batch exactly).

The result table and the demo's account of a run are `specmoe.report`'s.
"""
