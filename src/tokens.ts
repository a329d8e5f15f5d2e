import { Token } from '@lumino/coreutils';
import { ISignal } from '@lumino/signaling';

import {
  ApplyResult,
  Diagnosis,
  GradReport,
  VerifyResult,
  View,
  WatchSeries
} from './protocol';

/**
 * The kernel round trips of a diagnosis's graph (what the graph view asks).
 */
export interface IGraphRequests {
  view(state: IViewState): Promise<View>;
  expand(node: string, state: IViewState): Promise<View>;
  collapse(node: string, state: IViewState): Promise<View>;
  search(
    query: string,
    state: IViewState
  ): Promise<{ matches: string[]; view: View }>;
}

/**
 * What the user opened and closed: the graph view keeps it and sends it with every request.
 */
export interface IViewState {
  expanded: string[];
  collapsed: string[];
}

/**
 * A diagnosis received from one kernel.
 */
export interface IDiagnosisEvent {
  readonly kernelId: string;
  readonly diagnosis: Diagnosis;
}

/**
 * The VJP debugger's model: the diagnoses of every kernel, the notebook
 * followed (the active one), the diagnosis selected and the requests to its
 * kernel. It holds no DOM: the panel and the commands render and drive it.
 */
export interface IVjpviz {
  /**
   * Whether a notebook is followed (it may have no kernel yet).
   */
  readonly hasNotebook: boolean;

  /**
   * The kernel whose diagnoses are shown, or null.
   */
  readonly kernelId: string | null;

  /**
   * Its diagnoses, oldest first.
   */
  readonly diagnoses: readonly Diagnosis[];

  /**
   * The diagnosis selected: the one picked, else the newest; null when none.
   */
  readonly current: Diagnosis | null;

  /**
   * Emitted when the followed kernel's list changes (a push, its history, a
   * restart) or another notebook is followed.
   */
  readonly diagnosesChanged: ISignal<IVjpviz, void>;

  /**
   * Emitted when the current diagnosis changes: another one, or none.
   */
  readonly currentChanged: ISignal<IVjpviz, Diagnosis | null>;

  /**
   * Emitted for every new diagnosis any kernel pushes (after it is selected,
   * when it comes from the followed kernel).
   */
  readonly diagnosisReceived: ISignal<IVjpviz, IDiagnosisEvent>;

  /**
   * Follow a notebook (the active one) and its kernel, or none.
   */
  follow(notebook: { readonly kernelId: string | null } | null): void;

  /**
   * Select a diagnosis of the followed kernel.
   */
  select(id: string): void;

  /**
   * Select the diagnosis `step` places down the list (newest first); wraps around.
   */
  selectNext(step: 1 | -1): void;

  /**
   * The kernel round trips of a diagnosis's (or a vv.grads report's) graph, or null
   * without a kernel.
   */
  graphRequests(id: string): IGraphRequests | null;

  /**
   * Ask the followed kernel whether `code` fixes a diagnosis's rule.
   */
  verify(id: string, code: string): Promise<VerifyResult>;

  /**
   * The followed kernel's vv.watch series, oldest watch first.
   */
  readonly watches: readonly WatchSeries[];

  /**
   * Emitted when the followed kernel's watches change (a push, a refresh, a restart).
   */
  readonly watchesChanged: ISignal<IVjpviz, void>;

  /**
   * Ask the followed kernel for every watch's series (a panel opened after the pushes).
   */
  refreshWatches(): Promise<void>;

  /**
   * Run vv.nans on a watched step's call in the followed kernel; a diagnosis it finds
   * joins the list, selected. Resolves with the kernel's one-line summary.
   */
  watchNans(watchId: string, step: number): Promise<string>;

  /**
   * The followed kernel's vv.grads reports, oldest first (the kernel keeps its last 32).
   */
  readonly grads: readonly GradReport[];

  /**
   * Emitted when the followed kernel's reports change (a push, a refresh, a restart).
   */
  readonly gradsChanged: ISignal<IVjpviz, void>;

  /**
   * Ask the followed kernel for the vv.grads reports it keeps.
   */
  refreshGrads(): Promise<void>;

  /**
   * Ask the followed kernel to rebind a diagnosis's rule to `code` (it verifies first).
   */
  apply(id: string, code: string): Promise<ApplyResult>;
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
