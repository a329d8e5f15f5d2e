"""Stage 2: turn captured records into Diagnoses over the forward program's graph."""
