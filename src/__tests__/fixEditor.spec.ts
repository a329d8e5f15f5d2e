import { EditorView } from '@codemirror/view';
import {
  CodeMirrorEditorFactory,
  EditorExtensionRegistry,
  ybinding
} from '@jupyterlab/codemirror';
import { JSONObject } from '@lumino/coreutils';
import { Widget } from '@lumino/widgets';
import type { Text, UndoManager } from 'yjs';

import { NotebookCells } from '../cells';
import { FixEditor, IFixActions } from '../panels/diagnoses/fixEditor';
import { VjpvizPanel } from '../panel';
import { VerifyResult } from '../protocol';
import { FakeComm, body, modelOnKernel } from './fakes';

/**
 * A fix whose text would have a side effect if the kernel ever ran it: the
 * panel must only send it on a click (the kernel runs it on verify/apply only).
 */
const FIX =
  "def rule_bwd(res, g):\n    open('/tmp/vjpviz-pwned', 'w')\n    return (g,)\n";
const OTHER = 'def rule_bwd(res, g):\n    return (g.T,)\n';

/**
 * CodeMirror editors bound to their model, as JupyterLab's editor services make them.
 */
function editorFactory() {
  const extensions = new EditorExtensionRegistry();
  extensions.addExtension({
    name: 'binding',
    factory: ({ model }) => {
      const shared = model.sharedModel as unknown as {
        ysource: Text;
        undoManager: UndoManager | null;
      };
      return EditorExtensionRegistry.createImmutableExtension(
        ybinding({
          ytext: shared.ysource,
          undoManager: shared.undoManager ?? undefined
        })
      );
    }
  });
  return new CodeMirrorEditorFactory({ extensions }).newInlineEditor;
}

const factory = editorFactory();

const settle = () => new Promise(resolve => setTimeout(resolve, 0));

function button(root: HTMLElement, action: string): HTMLButtonElement {
  return root.querySelector(`button[data-vjpviz-action="${action}"]`)!;
}

/**
 * The CodeMirror view of the (one) fix editor under `root`.
 */
function codeView(root: HTMLElement): EditorView {
  return EditorView.findFromDOM(
    root.querySelector<HTMLElement>('.cm-editor')!
  )!;
}

function spyActions() {
  return {
    verify: jest.fn(async (code: string): Promise<VerifyResult> => ({
      pass: true
    })),
    apply: jest.fn(async (code: string) => ({ message: 'applied' })),
    copy: jest.fn(async (code: string) => undefined)
  } satisfies IFixActions;
}

/**
 * A fix editor attached to the page, and actions that record their calls.
 */
function attachedEditor() {
  const editor = new FixEditor(factory);
  Widget.attach(editor, document.body);
  return { editor, actions: spyActions() };
}

describe('FixEditor', () => {
  it('shows, switches and edits fixes without running any until a click', async () => {
    const { editor, actions } = attachedEditor();
    editor.setFixes(
      [
        { title: 'side effect', code: FIX },
        { title: 'other', code: OTHER }
      ],
      null,
      actions
    );
    expect(codeView(editor.node).state.doc.toString()).toBe(FIX);
    const picker = editor.node.querySelector('select')!;
    picker.value = '1';
    picker.dispatchEvent(new Event('change'));
    expect(editor.code).toBe(OTHER);
    editor.code = FIX;
    editor.setFixes([{ title: 'again', code: FIX }], FIX, actions);
    await settle();
    expect(actions.verify).not.toHaveBeenCalled();
    expect(actions.apply).not.toHaveBeenCalled();

    button(editor.node, 'verify').click();
    await settle();
    expect(actions.verify.mock.calls).toEqual([[FIX]]);
    expect(actions.apply).not.toHaveBeenCalled();
    button(editor.node, 'apply').click();
    await settle();
    expect(actions.apply.mock.calls).toEqual([[FIX]]);
    expect(actions.verify).toHaveBeenCalledTimes(1);
    editor.dispose();
  });
});

describe('FixEditor verdicts', () => {
  it('marks each fix with its verdict and shows the per-leaf error of a wrong one', async () => {
    const { editor, actions } = attachedEditor();
    editor.setFixes(
      [
        { title: 'Transpose', code: OTHER, exact: true, verdict: 'verified' },
        {
          title: 'Zeros (type-only: the gradient of `w` becomes zero)',
          code: FIX,
          verdict: 'type-only',
          note: 'the gradient of `w` becomes zero'
        },
        {
          title: 'Cast',
          code: OTHER,
          verdict: 'unverifiable',
          note: 'no oracle: round'
        }
      ],
      null,
      actions
    );
    const options = Array.from(editor.node.querySelectorAll('option'));
    expect(options.map(o => o.dataset.vjpvizVerdict)).toEqual([
      'verified',
      'type-only',
      'unverifiable'
    ]);
    expect(options[0].textContent?.startsWith('✓ ')).toBe(true);
    expect(options[1].textContent?.startsWith('✗ ')).toBe(true);
    const verdict = () =>
      editor.node.querySelector<HTMLElement>('.jp-Vjpviz-fixVerdict')!;
    expect(verdict().dataset.vjpvizVerdict).toBe('verified');
    const picker = editor.node.querySelector('select')!;
    picker.value = '1';
    picker.dispatchEvent(new Event('change'));
    expect(verdict().textContent).toBe(
      'Type-only: the gradient of `w` becomes zero'
    );
    picker.value = '2';
    picker.dispatchEvent(new Event('change'));
    expect(verdict().textContent).toBe('Unverifiable: no oracle: round');

    actions.verify.mockResolvedValueOnce({
      pass: false,
      summary: 'values differ',
      verdict: 'type-only',
      problems: [
        {
          id: 'p1',
          headline: 'values differ',
          kind: 'bwd_value',
          leaf_errors: [
            {
              name: '<img src=x onerror=alert(1)>',
              max_abs: 0.5,
              max_rel: 0.25,
              where: [1, 2],
              ok: false
            },
            { name: 'b', max_abs: 2, max_rel: null, got_zero: true, ok: false }
          ]
        }
      ]
    });
    button(editor.node, 'verify').click();
    await settle();
    const result = editor.node.querySelector('.jp-Vjpviz-verifyResult')!;
    expect(result.getAttribute('data-vjpviz-verdict')).toBe('type-only');
    const rows = Array.from(result.querySelectorAll('tr.jp-Vjpviz-leafError'));
    expect(
      rows.map(r =>
        Array.from(r.querySelectorAll('td')).map(td => td.textContent)
      )
    ).toEqual([
      ['<img src=x onerror=alert(1)>', '0.500', '0.25', '[1, 2]'],
      ['b', '2.00', 'zero, but the reference is not', '[]']
    ]);
    expect(result.querySelector('img')).toBeNull();
    editor.dispose();
  });
});

describe('the panel', () => {
  const ops = (comm: FakeComm) => comm.sent.map(m => m.op);

  function reply(comm: FakeComm, op: string, result: JSONObject): void {
    const request = comm.sent.filter(m => m.op === op).pop()!;
    comm.receive({
      v: 1,
      type: 'reply',
      request_id: request.request_id,
      ok: true,
      result
    });
  }

  /**
   * A panel attached to the page, showing the model of a fake kernel's notebook.
   */
  function attachedPanel() {
    const { kernel, model } = modelOnKernel();
    const panel = new VjpvizPanel({
      model,
      cells: new NotebookCells(),
      editorFactory: factory,
      copy: async () => undefined,
      openGraph: () => undefined
    });
    Widget.attach(panel, document.body);
    return { kernel, model, panel };
  }

  it('sends verify or apply for a pushed diagnosis only when clicked', async () => {
    const { kernel, model, panel } = attachedPanel();

    const d = {
      ...body(1),
      rule: 'rule_bwd',
      rule_source_text: FIX,
      rule_source_start: 1,
      fixes: [{ title: 'side effect', code: FIX }]
    };
    const comm = kernel.open({ v: 1, type: 'diagnosis', diagnosis: d });
    await settle();
    expect(ops(comm)).toEqual(['view']); // the graph, and nothing else
    reply(comm, 'view', {
      svg: '<svg xmlns="http://www.w3.org/2000/svg"/>',
      expanded: []
    });
    await panel.drawn;
    model.diagnoses.select('d1');
    await settle();
    const view = codeView(panel.node);
    expect(view.state.doc.toString()).toBe(FIX);
    view.dispatch({ changes: { from: 0, insert: '# edited\n' } }); // typing runs nothing
    await settle();
    expect(ops(comm)).toEqual(['view']);

    button(panel.node, 'verify').click();
    await settle();
    expect(ops(comm)).toEqual(['view', 'verify']);
    expect(comm.sent[1].args).toEqual({
      report_id: 'd1',
      code: `# edited\n${FIX}`
    });
    reply(comm, 'verify', { pass: true, summary: 'ok', problems: [] });
    await settle();
    expect(ops(comm)).toEqual(['view', 'verify']);

    button(panel.node, 'apply').click();
    await settle();
    expect(ops(comm)).toEqual(['view', 'verify', 'apply']);

    // A rule from a .py file: the kernel leaves the file alone and sends the patch to make.
    const patch =
      '--- rules.py\n+++ rules.py\n-    return <img src=x onerror=alert(1)>\n+    return g\n';
    reply(comm, 'apply', {
      applied: false,
      problems: [],
      patch,
      path: 'rules.py'
    });
    await settle();
    const shownPatch = panel.node.querySelector('.jp-Vjpviz-applyPatch');
    expect(shownPatch?.textContent).toBe(patch);
    expect(shownPatch?.querySelector('img')).toBeNull();
    expect(
      panel.node.querySelector('.jp-Vjpviz-verifyResult')?.textContent
    ).toContain('The rule lives in rules.py; the kernel left it unchanged');
    panel.dispose();
  });
  it('shows a pushed diagnosis whole: its fixes in the editor, its pushed graph drawn', async () => {
    const { kernel, panel } = attachedPanel();
    const fixes = [
      { title: 'side effect', code: FIX },
      { title: 'transpose', code: OTHER }
    ];
    const d = {
      ...body(1),
      rule: 'rule_bwd',
      rule_source_text: OTHER,
      rule_source_start: 1,
      fixes
    };
    const svg =
      '<svg xmlns="http://www.w3.org/2000/svg"><g id="pushed"/></svg>';
    const comm = kernel.open({
      v: 1,
      type: 'diagnosis',
      diagnosis: d,
      view: { svg, expanded: [], collapsed: [] }
    });
    await settle();
    expect(codeView(panel.node).state.doc.toString()).toBe(FIX);
    const picker =
      panel.node.querySelector<HTMLSelectElement>('.jp-Vjpviz-picker')!;
    expect(Array.from(picker.options).map(o => o.textContent)).toEqual([
      'side effect',
      'transpose'
    ]);
    expect(panel.node.querySelector('#pushed')).not.toBeNull();
    expect(ops(comm)).toEqual([]); // nothing asked of the kernel, nothing run
    panel.dispose();
  });
});
