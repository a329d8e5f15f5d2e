"""How the user named things: functions, arguments, pytree paths, library wrappers, frames.

A diagnosis speaks the user's words (``params[3].w``, the user's own fwd behind equinox's
wrapper), learned from the objects and code the user wrote, never from JAX's messages.
"""
