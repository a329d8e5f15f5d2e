import { applyEdits, definedNames, findFunction, replacementEdits } from '../cells';

const cell = `import jax

@jax.custom_vjp
def softclip(x):
    return x

def softclip_bwd(res, g):
    x, w = res
    return (g @ w).T,

softclip.defvjp(softclip_fwd, softclip_bwd)
`;

describe('cells', () => {
  it('lists the defs of a fix', () => {
    expect(definedNames('def a(x):\n  return x\n\ndef b(\n  y):\n  pass\n')).toEqual(['a', 'b']);
  });

  it('finds a function with its decorators and body', () => {
    const span = findFunction(cell, 'softclip')!;
    expect(cell.slice(span.start, span.end)).toBe(
      '@jax.custom_vjp\ndef softclip(x):\n    return x'
    );
    const bwd = findFunction(cell, 'softclip_bwd')!;
    expect(cell.slice(bwd.start, bwd.end)).toBe(
      'def softclip_bwd(res, g):\n    x, w = res\n    return (g @ w).T,'
    );
    expect(findFunction(cell, 'soft')).toBeNull();
  });

  it('replaces only the functions the fix defines', () => {
    const fix = 'def softclip_bwd(res, g):\n    x, w = res\n    return g @ w.T,\n';
    const out = applyEdits(cell, replacementEdits(cell, fix));
    expect(out).toBe(cell.replace('return (g @ w).T,', 'return g @ w.T,'));
    expect(replacementEdits(cell, 'def other():\n  pass\n')).toEqual([]);
  });

  it('re-indents a fix for a nested def', () => {
    const src = 'def outer():\n    def bwd(res, g):\n        return g\n    return bwd\n';
    const out = applyEdits(src, replacementEdits(src, 'def bwd(res, g):\n    return -g\n'));
    expect(out).toBe('def outer():\n    def bwd(res, g):\n        return -g\n    return bwd\n');
  });
});
