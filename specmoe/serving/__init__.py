"""A driver for models behind OpenAI-compatible servers (vLLM, SGLang, llama-server and others).

specmoe does not run distributed inference itself: a suite model with `backend = "openai"` names a
server, and this package sends prompts to it at a controlled concurrency, timing each streamed
response and reading the server's speculative-decoding counters around the run. It sits beside the
backends, below bench, and knows nothing of suites, runs or the store: a served suite run and its
store row are bench's (`bench.served`, `bench.served_rows`). The modules, one concept each:

- `spec`: where a served model is and how to talk to it (`ServerSpec`).
- `servers`: which counters and response fields each serving engine exposes, one table.
- `prometheus`: reading those counters from a `/metrics` text.
- `sse`: reading a streamed response (server-sent events, OpenAI chunk objects).
- `trust`: what a response's token counts must satisfy before a run stores a number made of them.
- `client`: HTTP with timeouts, retries and one-line errors.
- `arrivals`: when each request of an open-loop run is sent (Poisson arrivals at `request_rate`).
- `load`: one run: N requests at concurrency c (or on an open-loop schedule), counters read around it.
- `llama_server`: starting llama-server processes (baseline and SD) from one spec.
- `server_log`: llama-server's own per-request draft counts, from its log, against stored ones.
"""
