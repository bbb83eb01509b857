"""The studies' claims checked on measured runs: plan, numbers, verdicts and the findings document."""
