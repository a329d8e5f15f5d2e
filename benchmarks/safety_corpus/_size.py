"""The corpus programs' size knob: SAFETY_CORPUS_QUICK=1 picks the small instance."""
import os

QUICK = os.environ.get("SAFETY_CORPUS_QUICK") == "1"


def pick(full, quick):
  return quick if QUICK else full
