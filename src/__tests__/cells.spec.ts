import type { Notebook } from '@jupyterlab/notebook';

import {
  NotebookCells,
  applyFix,
  definitionEdit,
  definitionSpan
} from '../cells';
import { ApplyResult } from '../protocol';

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
  rule_source_text:
    source
      .split('\n')
      .slice(first - 1, last)
      .join('\n') + '\n',
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
    expect(moved.slice(span.start, span.end)).toBe(
      cell.split('\n').slice(6, 9).join('\n')
    );
    expect(
      definitionSpan(cell.split('x, w = res').join('w, x = res'), bwd)
    ).toBeNull();
    expect(definitionSpan(cell, { rule_source_text: null })).toBeNull();
  });

  it('replaces the definition that ran, not another of the same text', () => {
    // Two identical bodies: the kernel's lines (11..13) pick the second.
    const second = { ...at(cell, 11, 13) };
    const fix =
      'def softclip_bwd(res, g):\n    x, w = res\n    return g @ w.T,\n';
    const [start, end, text] = definitionEdit(cell, second, fix)!;
    const out = cell.slice(0, start) + text + cell.slice(end);
    expect(out.split('\n').slice(10, 13).join('\n')).toBe(
      fix.replace(/\n$/, '')
    );
    expect(out.split('\n').slice(6, 9)).toEqual(cell.split('\n').slice(6, 9));
  });

  it('re-indents a fix for a nested def', () => {
    const src =
      'def outer():\n    def bwd(res, g):\n        return g\n    return bwd\n';
    const [start, end, text] = definitionEdit(
      src,
      at(src, 2, 3),
      'def bwd(res, g):\n    return -g\n'
    )!;
    expect(src.slice(0, start) + text + src.slice(end)).toBe(
      'def outer():\n    def bwd(res, g):\n        return -g\n    return bwd\n'
    );
  });
});

/**
 * A notebook of code and markdown cells holding `sources`, as far as the
 * cells handler reads and edits it.
 */
function notebookOf(...sources: [string, string][]) {
  const widgets = sources.map(([type, text]) => {
    let source = text;
    return {
      model: {
        type,
        sharedModel: {
          getSource: () => source,
          updateSource: (start: number, end: number, value: string) => {
            source = source.slice(0, start) + value + source.slice(end);
          }
        }
      }
    };
  });
  const content = {
    widgets,
    activeCellIndex: -1,
    scrollToCell: jest.fn(async () => undefined)
  };
  const cells = new NotebookCells();
  cells.notebook = {
    content: content as unknown as Notebook,
    activate: jest.fn()
  };
  return {
    cells,
    content,
    source: (i: number) => widgets[i].model.sharedModel.getSource()
  };
}

describe('NotebookCells', () => {
  const bwd = at(cell, 7, 9);
  const fix =
    'def softclip_bwd(res, g):\n    x, w = res\n    return g @ w.T,\n';

  it('writes a fix into the code cell that holds the rule as it ran, and reveals it', () => {
    const { cells, content, source } = notebookOf(
      ['markdown', cell],
      ['code', 'x = 1'],
      ['code', cell]
    );
    expect(cells.write(bwd, fix)).toBe(
      'Applied to the cell that defines the rule.'
    );
    expect(source(2).split('\n').slice(6, 9).join('\n')).toBe(
      fix.replace(/\n$/, '')
    );
    expect(source(0)).toBe(cell); // markdown is never edited
    expect(content.activeCellIndex).toBe(2);
    expect(content.scrollToCell).toHaveBeenCalledTimes(1);
  });

  it('says so when no cell holds it, and writes nothing', () => {
    const { cells, source } = notebookOf(['code', 'x = 1']);
    expect(cells.write(bwd, fix)).toBe(
      'No cell of this notebook holds the rule as it ran.'
    );
    expect(source(0)).toBe('x = 1');
    expect(new NotebookCells().write(bwd, fix)).toBe(
      'No cell of this notebook holds the rule as it ran.'
    );
  });

  it('goes to the cell IPython named by its execution count, at its line', () => {
    const { cells, content } = notebookOf(['code', 'x = 1'], ['code', cell]);
    const cursor = jest.fn();
    Object.assign(content.widgets[1], {
      editor: { setCursorPosition: cursor }
    });
    (content.widgets[1].model as any).executionCount = 4;
    expect(cells.goTo({ text: 'Cell In[4], line 7', cell: 4, line: 7 })).toBe(
      true
    );
    expect(content.activeCellIndex).toBe(1);
    expect(cursor).toHaveBeenCalledWith({ line: 6, column: 0 });
    expect(cells.goTo({ text: 'Cell In[9], line 1', cell: 9, line: 1 })).toBe(
      false
    );
  });

  it('jumps to the defining cell and focuses the notebook', () => {
    const { cells, content } = notebookOf(['code', 'x = 1'], ['code', cell]);
    cells.jumpTo(bwd);
    expect(content.activeCellIndex).toBe(1);
    expect(cells.notebook!.activate).toHaveBeenCalled();
  });
});

describe('applyFix', () => {
  const bwd = at(cell, 7, 9);
  const fix = 'def softclip_bwd(res, g):\n    return g,\n';
  const kernel = (result: ApplyResult | Error) => async () => {
    if (result instanceof Error) {
      throw result;
    }
    return result;
  };

  it('writes the cell once the kernel took the fix', async () => {
    const { cells, source } = notebookOf(['code', cell]);
    const applied = await applyFix(
      kernel({ applied: true, problems: [] }),
      cells,
      bwd,
      fix
    );
    expect(applied.message).toBe(
      'Applied to the cell that defines the rule. The kernel now uses the fixed rule.'
    );
    expect(source(0)).toContain('    return g,');
  });

  it('writes nothing when the fix still fails', async () => {
    const { cells, source } = notebookOf(['code', cell]);
    const stillFails = kernel({
      applied: false,
      problems: [{ headline: 'still float16' }]
    } as ApplyResult);
    await expect(applyFix(stillFails, cells, bwd, fix)).rejects.toThrow(
      'the fix still fails: still float16'
    );
    expect(source(0)).toBe(cell);
  });

  it('still writes the cell when the kernel could not take it, saying to re-run it', async () => {
    const { cells, source } = notebookOf(['code', cell]);
    const applied = await applyFix(
      kernel(new Error('no open vjpviz comm')),
      cells,
      bwd,
      fix
    );
    expect(applied.message).toBe(
      'Applied to the cell that defines the rule. The kernel could not apply it (no open vjpviz comm); re-run the cell.'
    );
    expect(source(0)).toContain('    return g,');
  });
});
