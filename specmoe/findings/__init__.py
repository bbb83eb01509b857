"""The studies' claims checked on measured runs: plan, numbers, verdicts and the findings document.

The top floor below the command line: it runs shipped suites through `specmoe.bench`, reads their
exports back, fits and predicts with `specmoe.perf`, and draws with `specmoe.report`. The modules:

- `plan`: which shipped suites `specmoe findings` measures, at which scale, and the passes it
  measures alone (`--pass`); `run` runs them, exports and reports each, and audits the study's own
  rows.
- `results`: exported CSVs read back as stored rows; `cells`: one SD configuration against its
  paired baseline, the shape every claim compares.
- `regime`: whether this machine can produce the regime a claim is about, checked first.
- `rules` (`rules.toml`): the written rules and their hash; `claims`: the six claims judged by them;
  `sensitivity`: every verdict under the rule's reasonable variants.
- `batch_claims`, `routing`: MoESD's claims on batch size and sparsity, and the experts a verify woke.
- `by_engine`: the claims per engine and weight type (`plan.ENGINE_SETUPS`); `real`: claims (c) and (d)
  on real weights.
- `wide`, `wide_predictions`, `wide_doc` (`moesd_paper.toml`): MoESD's claims (e) and (f) on the
  moesd-wide pass, where a step is bound by reading weights; the model's prediction of each of its
  cells made before it runs; MoESD's own figures beside the verdicts.
- `hybrid`: the claims on the study's own architecture, the hybrid zoo's pass.
- `mtp`, `mtp_predictions`, `mtp_doc`: the target's own MTP module against separate drafts (the
  study-hybrid-mtp pass): the rule's call, the model's prediction of each cell made before it runs,
  and the pass's section of the document.
- `predictions`, `model_check`: the performance model's predictions beside measurements, cell by cell.
- `notes`: what the first measurement pass taught, beside this one.
- `document` (`template.md`): every value computed from the exports, set into docs/findings.md;
  `checkout`: where that document and its results live (a checkout, never an installed package).
"""
