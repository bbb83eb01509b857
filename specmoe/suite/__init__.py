"""Suite files: declarative, versioned sweeps, read, checked and expanded into runs (docs/suites.md).

Below the harness that measures them, above the zoo and the results store. The modules, one concept
each: `schema` (the format, as pydantic models), `load` (TOML, overrides, schema, models), `groups`
(groups checked into `Group`s), `expand` (groups into `RunSpec`s), `types` (the parsed types and the
grid's axes), `errors` (one line per problem), `size` (the runs counted before anything runs),
`overrides` (`--set`), `model_paths` (a model's spelling to its files), `shipped` (the suites shipped as
package data), `quick` (a sweep from command-line arguments), `legacy_keys` (stored runs keep their
keys).
"""
