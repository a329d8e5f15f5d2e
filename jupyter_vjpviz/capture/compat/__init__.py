"""JAX version compatibility: what differs between the JAX versions vjpviz supports.

Every private JAX name belongs here, resolved once per version with its fallback: a
missing name switches off the capability that needs it, in one line, never an
exception (``capabilities`` says what this JAX gets). Also the flags read as off when
a JAX predates them, internals whose signature changed, and the patch registry that
wraps a hook point only where JAX has it.
"""
