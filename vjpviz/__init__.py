"""Alias package so that ``%load_ext vjpviz`` loads jupyter_vjpviz."""

from jupyter_vjpviz import load_ipython_extension, unload_ipython_extension
