"""Stage 5: deliver diagnoses to the user: IPython rich output, console text, the panel."""
