"""Fixes for a Diagnosis: suggested (``suggest``), checked and applied (``verify``).

A fix is the full replacement text of the user's rule (or of their call), so it
can be read, edited, verified abstractly and applied as it stands.
"""
