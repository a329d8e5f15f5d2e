/**
 * A performance mark (the browser tests read them to time the panel).
 */
export function mark(name: string): void {
  if (typeof performance !== 'undefined' && performance.mark) {
    performance.mark(name);
  }
}
