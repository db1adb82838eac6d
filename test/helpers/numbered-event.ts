/**
 * A change event numbered `n` in a test's history: position n × 0x100 (+ `sub`), committed at second n of 2026,
 * transaction `n`; `o` overrides any field (a key change's `before`, `missing`, `handover`, …).
 */
import { ENVELOPE_VERSION, type ChangeEvent, type Row } from '../../lambda/core/shared/event.ts';
import { makePosition } from '../../lambda/core/shared/position.ts';

export function numberedEvent(
  table: string,
  source: string,
  n: number,
  op: ChangeEvent['op'],
  key: Row,
  after: Row | null,
  o: Partial<ChangeEvent> = {},
  sub = 0,
): ChangeEvent {
  return {
    v: ENVELOPE_VERSION,
    source,
    table,
    op,
    key,
    after,
    before: null,
    missing: [],
    position: makePosition(BigInt(n) * 0x100n + BigInt(sub), 0),
    commitTs: new Date(Date.UTC(2026, 0, 1, 0, 0, n)).toISOString(),
    txId: String(n),
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
    ...o,
  };
}
