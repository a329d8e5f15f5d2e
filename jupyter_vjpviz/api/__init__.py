"""The public entry points, one module each: ``pipeline`` (the hook's sessions through
analysis and fixes, the history), ``check``, ``gradcheck``, ``nans``, ``grads`` and
``watch``. The package top (``vv.check`` ...) imports them on first use; living here, a
module's import never rebinds the package's function of the same name."""
