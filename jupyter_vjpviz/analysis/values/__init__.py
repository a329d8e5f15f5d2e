"""The value side of analysis: everything that runs the user's code on vjpviz's account.

The rest of ``analysis`` builds the graph from types and never imports this package
(tests/test_architecture.py checks it). Here, every run goes through one door,
``replay`` (a deadline per failing call, loops capped, effects not repeated, small
draws): the oracle's reference derivatives (``oracle``, ``tangents``, ``on_mesh``), the
NaN search (``nonfinite`` and its evaluator and explanations), the gradient report's
walk (``grad_paths``, ``flows``, ``repeated_blocks``) and the partial VJPs they share
(``partial_vjp``).
"""
