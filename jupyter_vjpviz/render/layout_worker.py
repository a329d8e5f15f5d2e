"""The layout worker: a child process that runs libgraphviz (the pygraphviz wheel's).

Run as a script (``python -I layout_worker.py``), so it imports nothing of ours
and nothing of JAX. Layout runs here rather than in the kernel because
graphviz's C code holds the GIL and can't be interrupted: the kernel can kill
this process on a deadline and stays responsive. It stays alive between
requests because starting it (Python plus libgraphviz and fontconfig) costs
100-300 ms while a 30-box layout costs under 20 ms.

Protocol on stdin/stdout: an 8-byte big-endian length, then that many bytes;
requests are DOT, replies are ``b"ok\\n" + svg`` or ``b"error\\n" + message``.
"""
import struct
import sys


def main() -> None:
  try:
    import pygraphviz
  except ImportError as e:
    pygraphviz, failure = None, f"pygraphviz is not importable: {e}"
  src, dst = sys.stdin.buffer, sys.stdout.buffer
  while True:
    head = src.read(8)
    if len(head) < 8:
      return
    dot = src.read(struct.unpack(">Q", head)[0]).decode()
    try:
      if pygraphviz is None:
        raise RuntimeError(failure)
      reply = b"ok\n" + pygraphviz.AGraph(string=dot).draw(format="svg", prog="dot")
    except Exception as e:  # noqa: BLE001 - the kernel side decides what to show
      reply = f"error\n{type(e).__name__}: {e}".encode()
    dst.write(struct.pack(">Q", len(reply)) + reply)
    dst.flush()


if __name__ == "__main__":
  main()
