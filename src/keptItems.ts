/**
 * What the watches and grads features share: items of each kernel by id (a
 * vv.watch's series, a vv.grads report), the followed kernel's shown. A push
 * replaces the item of its id (a series carries all steps so far); the newest
 * `limit` are kept, as many as the kernel keeps.
 */
import { ISignal, Signal } from '@lumino/signaling';

import { VjpvizChannels } from './channel';
import { IArrivedEvent, IKeptItems, IVjpviz } from './tokens';

/**
 * The model of a feature whose kernel keeps items by id: each kernel's as pushed
 * or asked for (`ask`, the feature's request for all of them), the followed one's shown.
 */
export abstract class KeptItems<
  T extends { readonly id: string }
> implements IKeptItems<T> {
  constructor(
    protected readonly channels: VjpvizChannels,
    protected readonly owner: Pick<IVjpviz, 'kernelId'>,
    private readonly _limit = Infinity
  ) {}

  get items(): readonly T[] {
    const kernelId = this.owner.kernelId;
    return kernelId ? [...(this._kernels.get(kernelId)?.values() ?? [])] : [];
  }

  get changed(): ISignal<this, void> {
    return this._changed;
  }

  get arrived(): ISignal<this, IArrivedEvent<T>> {
    return this._arrived;
  }

  async refresh(): Promise<void> {
    if (this.owner.kernelId) {
      await this.ask(this.owner.kernelId);
    }
  }

  /**
   * Ask a kernel for all its items (a refresh, or once its history is loaded).
   */
  abstract ask(kernelId: string): Promise<void>;

  /**
   * Another notebook is followed: its kernel's items show.
   */
  followed(): void {
    this._changed.emit();
  }

  /**
   * A kernel restarted: its items are gone.
   */
  forget(kernelId: string): void {
    this._kernels.delete(kernelId);
    this._changed.emit();
  }

  /**
   * The item of that id a kernel sent last, if kept.
   */
  protected kept(kernelId: string, id: string): T | undefined {
    return this._kernels.get(kernelId)?.get(id);
  }

  /**
   * Say that a pushed item asks to be seen (`arrived`).
   */
  protected announce(kernelId: string, item: T): void {
    this._arrived.emit({ kernelId, item });
  }

  /**
   * Keep items a kernel sent, each replacing the one of its id.
   */
  protected keep(kernelId: string, items: readonly T[]): void {
    const kept = this._kernels.get(kernelId) ?? new Map<string, T>();
    this._kernels.set(kernelId, kept);
    for (const item of items) {
      kept.set(item.id, item);
      dropOldest(kept, this._limit);
    }
    if (kernelId === this.owner.kernelId) {
      this._changed.emit();
    }
  }

  private _kernels = new Map<string, Map<string, T>>();
  private _changed = new Signal<this, void>(this);
  private _arrived = new Signal<this, IArrivedEvent<T>>(this);
}

/**
 * Drop the first-set entries of `map` beyond `limit`.
 */
export function dropOldest(map: Map<string, unknown>, limit: number): void {
  for (const old of map.keys()) {
    if (map.size <= limit) {
      break;
    }
    map.delete(old);
  }
}
