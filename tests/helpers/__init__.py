"""Programs and helpers for the tests that launch whole jobs (faults, SLURM)."""
