"""What the capture tests ask of a failing call: the exception it raised, and its diagnosis."""
import pytest

import jupyter_vjpviz as vv


def raises(thunk):
  """The exception ``thunk()`` raised (it must raise)."""
  with pytest.raises(Exception) as info:
    thunk()
  return info.value


def only(kind):
  """The first diagnosis of ``kind`` (there must be one)."""
  found = [d for d in vv.diagnoses() if d.kind == kind]
  assert found, [d.kind for d in vv.diagnoses()]
  return found[0]


def plain_and_hooked(run):
  """The exception ``run()`` raises with the hook off, then on again (it must raise both times)."""
  vv.uninstall()
  plain = raises(run)
  vv.install()
  return plain, raises(run)
