import { definitionEdit, definitionSpan } from '../cells';

const cell = `import jax

@jax.custom_vjp
def softclip(x):
    return x

def softclip_bwd(res, g):
    x, w = res
    return (g @ w).T,

def softclip_bwd(res, g):
    x, w = res
    return (g @ w).T,

softclip.defvjp(softclip_fwd, softclip_bwd)
`;

/** The kernel's fields for the definition at 1-based lines first..last of `source`. */
const at = (source: string, first: number, last: number) => ({
  rule_source_text: source.split('\n').slice(first - 1, last).join('\n') + '\n',
  rule_source_start: first,
  rule_source_end: last
});

describe('cells', () => {
  it('finds the definition at the lines the kernel names', () => {
    const bwd = at(cell, 7, 9);
    const span = definitionSpan(cell, bwd)!;
    expect(cell.slice(span.start, span.end)).toBe(
      'def softclip_bwd(res, g):\n    x, w = res\n    return (g @ w).T,'
    );
  });

  it('finds it where it moved, and not in a cell that does not hold it as it ran', () => {
    const bwd = at(cell, 7, 9);
    const moved = '# a line added since it ran\n' + cell;
    const span = definitionSpan(moved, bwd)!;
    expect(moved.slice(span.start, span.end)).toBe(cell.split('\n').slice(6, 9).join('\n'));
    expect(definitionSpan(cell.split('x, w = res').join('w, x = res'), bwd)).toBeNull();
    expect(definitionSpan(cell, { rule_source_text: null })).toBeNull();
  });

  it('replaces the definition that ran, not another of the same text', () => {
    // Two identical bodies: the kernel's lines (11..13) pick the second.
    const second = { ...at(cell, 11, 13) };
    const fix = 'def softclip_bwd(res, g):\n    x, w = res\n    return g @ w.T,\n';
    const [start, end, text] = definitionEdit(cell, second, fix)!;
    const out = cell.slice(0, start) + text + cell.slice(end);
    expect(out.split('\n').slice(10, 13).join('\n')).toBe(fix.replace(/\n$/, ''));
    expect(out.split('\n').slice(6, 9)).toEqual(cell.split('\n').slice(6, 9));
  });

  it('re-indents a fix for a nested def', () => {
    const src = 'def outer():\n    def bwd(res, g):\n        return g\n    return bwd\n';
    const [start, end, text] = definitionEdit(src, at(src, 2, 3), 'def bwd(res, g):\n    return -g\n')!;
    expect(src.slice(0, start) + text + src.slice(end)).toBe(
      'def outer():\n    def bwd(res, g):\n        return -g\n    return bwd\n'
    );
  });
});
