# Convenience targets; each is one specmoe command (see README).
.PHONY: findings findings-full findings-doc

# The studies' claims measured on this machine (about an hour on one CPU core): docs/findings.md.
findings:
	specmoe findings --scale cpu

# The suites as shipped (hours on a CPU).
findings-full:
	specmoe findings --scale full --out docs/results/full/findings --doc docs/results/full/findings.md

# Rewrite docs/findings.md from the shipped results without measuring.
findings-doc:
	specmoe findings --render-only
