"""Whether this is the hooked run (SAFETY_CORPUS_HOOKED=1): a program that asks vjpviz for
a check (vv.nans, vv.grads) takes the plain gradient instead when run plain."""
import os

HOOKED = os.environ.get("SAFETY_CORPUS_HOOKED") == "1"
