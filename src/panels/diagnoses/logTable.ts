import { Diagnosis, LogLeaf } from '../../protocol';

/**
 * One log leaf's type: `float32[4,3]`, as the text report writes it.
 */
export function logType(leaf: LogLeaf): string {
  return `${leaf.dtype}[${leaf.shape.join(',')}]`;
}

/**
 * One log leaf's numbers: each stacked slice's mean where JAX stacked it (per
 * iteration, per shard), then the whole log's range, or its values when it is
 * that small; under jit only its type is known.
 */
export function logValues(leaf: LogLeaf): string {
  if (leaf.traced) {
    return 'traced under jit: its values are the jitted call’s to return';
  }
  const parts: string[] = [];
  if (leaf.slices.length) {
    parts.push(`means ${leaf.slices.join(', ')}`);
  }
  const size = leaf.shape.reduce((a, b) => a * b, 1);
  if (
    leaf.mean !== null &&
    leaf.mean !== undefined &&
    size > leaf.first.length
  ) {
    parts.push(`min ${leaf.min}, max ${leaf.max}, mean ${leaf.mean}`);
  } else if (leaf.first.length) {
    parts.push(leaf.first.join(', '));
  }
  return parts.join('; ');
}

/**
 * The logs the rule wrote (`defvjp_with_logs`), beside its cotangents: one row per
 * leaf with its type, what each stacked axis stands for, and its numbers (text
 * only; kernel strings are never HTML). Null where the rule logged nothing.
 */
export function renderLogTable(d: Diagnosis): HTMLTableElement | null {
  const logs = d.logs ?? [];
  if (!logs.length) {
    return null;
  }
  const table = document.createElement('table');
  table.className = 'jp-Vjpviz-logs';
  const head = table.createTHead().insertRow();
  for (const label of ['log', 'type', 'stacked', 'values']) {
    const th = document.createElement('th');
    th.textContent = label;
    head.appendChild(th);
  }
  const body = table.createTBody();
  for (const leaf of logs) {
    const tr = body.insertRow();
    tr.setAttribute('data-vjpviz-log', leaf.name);
    for (const text of [
      leaf.name,
      logType(leaf),
      leaf.stacked.join('; '),
      logValues(leaf)
    ]) {
      tr.insertCell().textContent = text;
    }
  }
  return table;
}
