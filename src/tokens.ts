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
 * The diagnoses of the followed kernel, the one selected, and what its kernel
 * is asked about them (a fix verified or applied).
 */
export interface IDiagnosesModel {
  /**
   * The followed kernel's diagnoses, oldest first.
   */
  readonly items: readonly Diagnosis[];

  /**
   * The diagnosis selected: the one picked, else the newest; null when none.
   */
  readonly current: Diagnosis | null;

  /**
   * Emitted when the followed kernel's list changes (a push, its history, a
   * restart) or another notebook is followed.
   */
  readonly changed: ISignal<IDiagnosesModel, void>;

  /**
   * Emitted when the current diagnosis changes: another one, or none.
   */
  readonly currentChanged: ISignal<IDiagnosesModel, Diagnosis | null>;

  /**
   * Emitted for every new diagnosis any kernel pushes (after it is selected,
   * when it comes from the followed kernel).
   */
  readonly received: ISignal<IDiagnosesModel, IDiagnosisEvent>;

  /**
   * Select a diagnosis of the followed kernel.
   */
  select(id: string): void;

  /**
   * Select the diagnosis `step` places down the list (newest first); wraps around.
   */
  selectNext(step: 1 | -1): void;

  /**
   * Ask the followed kernel whether `code` fixes a diagnosis's rule.
   */
  verify(id: string, code: string): Promise<VerifyResult>;

  /**
   * Ask the followed kernel to rebind a diagnosis's rule to `code` (it verifies first).
   */
  apply(id: string, code: string): Promise<ApplyResult>;
}

/**
 * An item a kernel pushed that asks to be seen.
 */
export interface IArrivedEvent<T> {
  readonly kernelId: string;
  readonly item: T;
}

/**
 * What the followed kernel keeps of a feature, by id, and pushes as it changes.
 */
export interface IKeptItems<T> {
  /**
   * The followed kernel's items, oldest first.
   */
  readonly items: readonly T[];

  /**
   * Emitted when the followed kernel's items change (a push, a refresh, a restart)
   * or another notebook is followed.
   */
  readonly changed: ISignal<IKeptItems<T>, void>;

  /**
   * Emitted for a push of any kernel that asks to be seen, as a diagnosis does: a
   * vv.grads report (the user just asked for it), a watch's series with its first
   * event.
   */
  readonly arrived: ISignal<IKeptItems<T>, IArrivedEvent<T>>;

  /**
   * Ask the followed kernel for all of them (a panel opened after the pushes).
   */
  refresh(): Promise<void>;
}

/**
 * The followed kernel's vv.watch series, oldest watch first.
 */
export interface IWatchesModel extends IKeptItems<WatchSeries> {
  /**
   * Run vv.nans on a watched step's call in the followed kernel; a diagnosis it finds
   * joins the list, selected. Resolves with the kernel's one-line summary.
   */
  nans(watchId: string, step: number): Promise<string>;
}

/**
 * The followed kernel's vv.grads reports, oldest first (the kernel keeps its last 32).
 */
export type IGradsModel = IKeptItems<GradReport>;

/**
 * The VJP debugger's model: the notebook followed (the active one) and its
 * kernel, each panel feature's model (diagnoses, watches, grads), and the
 * graphs they draw. It holds no DOM: the panel and the commands render and
 * drive it.
 */
export interface IVjpviz {
  /**
   * Whether a notebook is followed (it may have no kernel yet).
   */
  readonly hasNotebook: boolean;

  /**
   * The kernel whose diagnoses, watches and reports are shown, or null.
   */
  readonly kernelId: string | null;

  /**
   * Follow a notebook (the active one) and its kernel, or none.
   */
  follow(notebook: { readonly kernelId: string | null } | null): void;

  /**
   * The kernel round trips of a diagnosis's (or a vv.grads report's) graph, or null
   * without a kernel.
   */
  graphRequests(id: string): IGraphRequests | null;

  /**
   * The diagnoses: list, selection, fixes.
   */
  readonly diagnoses: IDiagnosesModel;

  /**
   * The vv.watch series.
   */
  readonly watches: IWatchesModel;

  /**
   * The vv.grads reports.
   */
  readonly grads: IGradsModel;
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
