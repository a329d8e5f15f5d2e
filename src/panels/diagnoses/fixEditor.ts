import { CodeEditor, CodeEditorWrapper } from '@jupyterlab/codeeditor';
import { Panel, Widget } from '@lumino/widgets';

import { FixVerdict, Fix, LeafError, VerifyResult } from '../../protocol';

/**
 * How each verdict reads in the picker and above the editor.
 */
const VERDICTS: Record<string, { mark: string; label: string }> = {
  verified: {
    mark: '✓ ',
    label: "Verified: equal to the primal's own derivative"
  },
  'type-only': { mark: '✗ ', label: 'Type-only' },
  unverifiable: { mark: '? ', label: 'Unverifiable' }
};

/**
 * One line saying what a verdict means for this fix (the note says what it
 * breaks, or why it could not be judged).
 */
export function verdictText(
  verdict: FixVerdict | undefined,
  note?: string
): string {
  const known = verdict ? VERDICTS[verdict] : undefined;
  if (!known) {
    return '';
  }
  return verdict === 'verified' || !note
    ? known.label
    : `${known.label}: ${note}`;
}

/**
 * The per-leaf errors of a fix whose values differ from the primal's derivative.
 */
export function renderLeafErrors(
  leaves: readonly LeafError[]
): HTMLTableElement {
  const table = document.createElement('table');
  table.className = 'jp-Vjpviz-leafErrors';
  const head = table.createTHead().insertRow();
  for (const label of ['input', 'max abs error', 'max rel error', 'at']) {
    const th = document.createElement('th');
    th.textContent = label;
    head.appendChild(th);
  }
  const body = table.createTBody();
  for (const leaf of leaves) {
    const tr = body.insertRow();
    tr.className = `jp-Vjpviz-leafError jp-mod-${leaf.ok ? 'ok' : 'bad'}`;
    tr.setAttribute('data-vjpviz-leaf', leaf.name);
    const rel = leaf.got_zero
      ? 'zero, but the reference is not'
      : leaf.max_rel === null || leaf.max_rel === undefined
        ? '—'
        : leaf.max_rel.toPrecision(2);
    for (const text of [
      leaf.name,
      leaf.max_abs.toPrecision(3),
      rel,
      `[${(leaf.where ?? []).join(', ')}]`
    ]) {
      tr.insertCell().textContent = text;
    }
  }
  return table;
}

/**
 * What the fix editor needs from its owner.
 */
export interface IFixActions {
  verify(code: string): Promise<VerifyResult>;
  apply(code: string): Promise<IApplied>;
  copy(code: string): Promise<void>;
}

/**
 * What Apply did; `patch` is the change (a unified diff) to make by hand in a
 * rule's `.py` file, which the kernel never writes.
 */
export interface IApplied {
  readonly message: string;
  readonly patch?: string | null;
}

/**
 * A JupyterLab code editor prefilled with the best fix, a picker for the
 * others, and Verify / Apply to cell / Copy. Nothing runs without a click.
 */
export class FixEditor extends Panel {
  constructor(factory: CodeEditor.Factory) {
    super();
    this.addClass('jp-Vjpviz-fix');

    this._header = new Widget();
    this._header.addClass('jp-Vjpviz-fixHeader');
    this._picker = document.createElement('select');
    this._picker.className = 'jp-mod-styled jp-Vjpviz-picker';
    this._picker.setAttribute('aria-label', 'Fix suggestions');
    this._picker.addEventListener('change', () =>
      this._choose(Number(this._picker.value))
    );
    this._verdict = document.createElement('div');
    this._verdict.className = 'jp-Vjpviz-fixVerdict';
    this._reason = document.createElement('div');
    this._reason.className = 'jp-Vjpviz-fixReason';
    this._header.node.append(this._picker, this._verdict, this._reason);
    this.addWidget(this._header);

    this._model = new CodeEditor.Model({ mimeType: 'text/x-python' });
    this._editor = new CodeEditorWrapper({
      factory,
      model: this._model,
      editorOptions: { config: { lineNumbers: true } }
    });
    this._editor.addClass('vjpviz-fix-editor');
    this._editor.addClass('jp-Vjpviz-editor');
    this.addWidget(this._editor);

    const footer = new Widget();
    footer.addClass('jp-Vjpviz-fixButtons');
    footer.node.append(
      this._button('Verify', 'verify', true, () => void this.verify()),
      this._button('Apply to cell', 'apply', false, () => void this.apply()),
      this._button('Copy', 'copy', false, () => void this._copy())
    );
    this._result = document.createElement('div');
    this._result.className = 'jp-Vjpviz-verifyResult';
    this._result.setAttribute('role', 'status');
    footer.node.appendChild(this._result);
    this.addWidget(footer);
  }

  /**
   * The current editor text.
   */
  get code(): string {
    return this._model.sharedModel.getSource();
  }

  set code(value: string) {
    this._model.sharedModel.setSource(value);
  }

  /**
   * Show the suggestions of a diagnosis (the first is the best).
   */
  setFixes(
    fixes: readonly Fix[],
    fallback: string | null,
    actions: IFixActions | null
  ): void {
    this._fixes = fixes.length
      ? [...fixes]
      : fallback
        ? [{ title: 'The rule as written (edit it)', code: fallback }]
        : [];
    this._actions = actions;
    this._picker.textContent = '';
    this._fixes.forEach((fix, i) => {
      const option = document.createElement('option');
      option.value = String(i);
      option.textContent = `${VERDICTS[fix.verdict ?? '']?.mark ?? ''}${fix.title}`;
      option.dataset.vjpvizVerdict = fix.verdict ?? '';
      this._picker.appendChild(option);
    });
    this._picker.hidden = this._fixes.length < 2;
    this._clearResult();
    this._choose(0);
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this._model.dispose();
    super.dispose();
  }

  private _choose(i: number): void {
    const fix = this._fixes[i];
    this.code = fix?.code ?? '';
    this._verdict.textContent = verdictText(fix?.verdict, fix?.note);
    this._verdict.className = `jp-Vjpviz-fixVerdict${fix?.verdict ? ` jp-mod-${fix.verdict}` : ''}`;
    this._verdict.dataset.vjpvizVerdict = fix?.verdict ?? '';
    this._reason.textContent = fix
      ? (fix.reason ?? '')
      : 'No suggestion for this diagnosis.';
    this._clearResult();
  }

  private _button(
    label: string,
    action: string,
    primary: boolean,
    onClick: () => void
  ): HTMLButtonElement {
    const b = document.createElement('button');
    b.className = `jp-Button jp-mod-styled ${primary ? 'jp-mod-accept' : 'jp-mod-reject'}`;
    b.textContent = label;
    b.dataset.vjpvizAction = action;
    b.addEventListener('click', onClick);
    return b;
  }

  private _clearResult(): void {
    this._result.textContent = '';
    this._result.removeAttribute('data-vjpviz-verify');
    this._result.removeAttribute('data-vjpviz-verdict');
    this._result.removeAttribute('data-vjpviz-copied');
    this._result.className = 'jp-Vjpviz-verifyResult';
  }

  private _say(text: string, state?: 'pass' | 'fail' | 'busy'): void {
    this._result.textContent = text;
    this._result.className = `jp-Vjpviz-verifyResult${state ? ` jp-mod-${state}` : ''}`;
  }

  /**
   * Ask the kernel whether the editor's code fixes the rule; says so below.
   */
  async verify(): Promise<void> {
    if (!this._actions) {
      return;
    }
    this._clearResult();
    this._say('Verifying…', 'busy');
    try {
      const result = await this._actions.verify(this.code);
      const state = result.pass ? 'pass' : 'fail';
      this._say(
        result.pass
          ? `Pass: ${result.summary ?? 'the edited rule type-checks'}`
          : `Still failing: ${result.summary ?? ''}`,
        state
      );
      this._result.setAttribute('data-vjpviz-verify', state);
      this._result.setAttribute('data-vjpviz-verdict', result.verdict ?? '');
      const leaves = ([] as LeafError[]).concat(
        ...(result.problems ?? []).map(p => p.leaf_errors ?? [])
      );
      if (leaves.length) {
        this._result.appendChild(renderLeafErrors(leaves));
      }
    } catch (error) {
      this._say(`Could not verify: ${(error as Error).message}`, 'fail');
      this._result.setAttribute('data-vjpviz-verify', 'fail');
    }
  }

  /**
   * Rebind the rule in the kernel and write the code into its cell.
   */
  async apply(): Promise<void> {
    if (!this._actions) {
      return;
    }
    this._say('Applying…', 'busy');
    try {
      const applied = await this._actions.apply(this.code);
      this._say(applied.message, 'pass');
      if (applied.patch) {
        const patch = document.createElement('pre');
        patch.className = 'jp-Vjpviz-applyPatch';
        patch.textContent = applied.patch;
        this._result.appendChild(patch);
      }
      this._result.setAttribute('data-vjpviz-applied', 'true');
    } catch (error) {
      this._say(`Not applied: ${(error as Error).message}`, 'fail');
      this._result.setAttribute('data-vjpviz-applied', 'false');
    }
  }

  private async _copy(): Promise<void> {
    if (!this._actions) {
      return;
    }
    this._clearResult();
    try {
      await this._actions.copy(this.code);
      this._say('Copied to the clipboard.');
      this._result.setAttribute('data-vjpviz-copied', 'true');
    } catch (error) {
      this._say(`Could not copy: ${(error as Error).message}`, 'fail');
      this._result.setAttribute('data-vjpviz-copied', 'false');
    }
  }

  private _header: Widget;
  private _picker: HTMLSelectElement;
  private _verdict: HTMLElement;
  private _reason: HTMLElement;
  private _model: CodeEditor.Model;
  private _editor: CodeEditorWrapper;
  private _result: HTMLElement;
  private _fixes: Fix[] = [];
  private _actions: IFixActions | null = null;
}
