import { Widget } from '@lumino/widgets';
import { ISignal, Signal } from '@lumino/signaling';

import { Diagnosis } from '../../protocol';

/**
 * The diagnoses of one kernel, newest first, with error/warning badges.
 */
export class DiagnosisList extends Widget {
  constructor() {
    super({ node: document.createElement('ul') });
    this.addClass('jp-Vjpviz-list');
    this.node.setAttribute('role', 'listbox');
    this.node.setAttribute('aria-label', 'Diagnoses');
  }

  /**
   * Emitted with a diagnosis id when the user picks one.
   */
  get selected(): ISignal<this, string> {
    return this._selected;
  }

  /**
   * Show `diagnoses` (oldest first, as kept) newest first.
   */
  setItems(diagnoses: readonly Diagnosis[], selectedId: string | null): void {
    this.node.textContent = '';
    for (const d of [...diagnoses].reverse()) {
      const f = d;
      const li = document.createElement('li');
      li.className = 'jp-Vjpviz-item';
      li.tabIndex = 0;
      li.setAttribute('role', 'option');
      li.dataset.vjpvizId = f.id;
      li.setAttribute('data-vjpviz-kind', f.kind);
      li.setAttribute('data-vjpviz-function', f.function ?? '');
      li.setAttribute('aria-selected', String(f.id === selectedId));
      if (f.id === selectedId) {
        li.classList.add('jp-mod-selected');
      }
      const badge = document.createElement('span');
      badge.className = `jp-Vjpviz-badge jp-Vjpviz-badge-${f.severity === 'warning' ? 'warning' : 'error'}`;
      badge.textContent = f.severity === 'warning' ? 'warning' : 'error';
      const name = document.createElement('span');
      name.className = 'jp-Vjpviz-itemFunction';
      name.textContent = f.function ?? '(unknown function)';
      const kind = document.createElement('span');
      kind.className = 'jp-Vjpviz-itemKind';
      kind.textContent = f.kind;
      li.append(badge, name, kind);
      li.title = f.headline;
      li.addEventListener('click', () => this._selected.emit(f.id));
      li.addEventListener('keydown', e => {
        if (e.key === 'Enter' || e.key === ' ') {
          e.preventDefault();
          this._selected.emit(f.id);
        } else if (e.key === 'ArrowDown') {
          (li.nextElementSibling as HTMLElement | null)?.focus();
        } else if (e.key === 'ArrowUp') {
          (li.previousElementSibling as HTMLElement | null)?.focus();
        }
      });
      this.node.appendChild(li);
    }
  }

  private _selected = new Signal<this, string>(this);
}
