import { Token } from '@lumino/coreutils';
import { ISignal } from '@lumino/signaling';

import { IGraphRequests } from './graphView';
import { Diagnosis } from './protocol';

/**
 * The VJP debugger: the diagnoses of the active notebook's kernel and the one
 * shown, for other plugins and for the commands.
 */
export interface IVjpviz {
  /**
   * The kernel whose diagnoses are shown, or null.
   */
  readonly kernelId: string | null;

  /**
   * Its diagnoses, oldest first.
   */
  readonly diagnoses: readonly Diagnosis[];

  /**
   * The diagnosis shown, or null.
   */
  readonly current: Diagnosis | null;

  /**
   * Emitted when another diagnosis is shown, or none.
   */
  readonly currentChanged: ISignal<IVjpviz, Diagnosis | null>;

  /**
   * Show a diagnosis of the current kernel.
   */
  select(id: string): Promise<void>;

  /**
   * Show the diagnosis `step` places down the list (newest first); wraps around.
   */
  selectNext(step: 1 | -1): Promise<void>;

  /**
   * The kernel round trips of a diagnosis's graph, or null without a kernel.
   */
  graphRequests(id: string): IGraphRequests | null;

  /**
   * Verify the code in the fix editor of the diagnosis shown.
   */
  verify(): Promise<void>;

  /**
   * Apply the code in the fix editor to the kernel and the defining cell.
   */
  apply(): Promise<void>;
}

/**
 * The VJP debugger token.
 */
export const IVjpviz = new Token<IVjpviz>(
  'jupyter-vjpviz:IVjpviz',
  'The VJP debugger: the diagnoses of the active notebook and the one shown.'
);

/**
 * The command IDs of the VJP debugger (shortcuts: schema/plugin.json).
 */
export namespace CommandIDs {
  export const openPanel = 'vjpviz:open-panel';
  export const openGraph = 'vjpviz:open-graph';
  export const verify = 'vjpviz:verify';
  export const apply = 'vjpviz:apply';
  export const next = 'vjpviz:next-diagnosis';
  export const previous = 'vjpviz:previous-diagnosis';
}
