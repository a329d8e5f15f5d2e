"""The corpus of ``benchmarks/fix_quality.py``: correct custom_vjp rules, their mutants, the judge."""
