"""Benchmarking models behind OpenAI-compatible servers (vLLM, SGLang, llama-server and others).

specmoe does not run distributed inference itself: a suite model with `backend = "openai"` names a
server, and the harness sends the suite's prompts to it at a controlled concurrency, timing each
streamed response and reading the server's speculative-decoding counters around the run. The
modules, one concept each (what a suite says of a server lives below, in the suite's layer:
`bench.server_spec` for where a served model is and how to talk to it, `bench.server_engines` for
which counters and response fields each engine exposes):

- `prometheus`: reading those counters from a `/metrics` text.
- `sse`: reading a streamed response (server-sent events, OpenAI chunk objects).
- `client`: HTTP with timeouts, retries and one-line errors.
- `arrivals`: when each request of an open-loop run is sent (Poisson arrivals at `request_rate`).
- `load`: one run: N requests at concurrency c (or on an open-loop schedule), counters read around it.
- `rows`: a run as a store row, with the same columns and metric definitions as local runs.
- `run`: what the harness calls per suite run: check the server once, warm up, measure, make the row.
"""
