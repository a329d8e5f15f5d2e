"""Stage 1: capture what JAX knows at its VJP check sites, as avals, never arrays."""
