"""Shared utilities below the capture stage: every stage may import these, they import none."""
