"""Audits of speedup claims in result sets that other tools produced (`specmoe audit`, docs/audit.md).

Each claim is held against the timing-free SD bound of `specmoe.theory` and gets one verdict:
consistent, impossible, unverifiable or invalid. Nothing here measures anything or reads the
results store, so the package needs only the theory and the error type; the audit of specmoe's own
runs, which reads stored rows, stays with them (`specmoe.results.run_audit`). The modules, one concept
each:

- `foreign`: the verdicts and the audit row; the MoE SD study's results CSV and folders of
  llama.cpp logs; the table and JSON `specmoe audit` prints.
- `llamacpp_logs`: what llama.cpp's tools print (llama-speculative, llama-bench, plain decoding),
  read by meaning rather than by line position.
- `vllm`: vLLM's serving-benchmark results (`vllm bench serve --save-result`), paired by setting.
- `sglang`: SGLang's `bench_speculative.py` records, paired by batch size within one sweep.
- `study_csv`: the study's results CSV read, refusing empty, header-only and wrongly separated files.
- `inputs`: what `specmoe audit PATH` reads: each file sent to the reader its content fits, under
  a size cap.
"""
