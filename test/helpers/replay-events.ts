/** The replay tests' event: an update of `table`'s row `id` to value `v` at `position`, from source `src`. */
import { ENVELOPE_VERSION, type ChangeEvent } from '../../lambda/core/shared/event.ts';

export function replayEvent(table: string, id: number, position: string, v: number): ChangeEvent {
  return {
    v: ENVELOPE_VERSION,
    source: 'src',
    table,
    op: 'update',
    key: { id },
    after: { id, v },
    before: null,
    missing: [],
    position,
    commitTs: '2026-12-01T00:00:00.000Z',
    txId: '1',
    schemaVersion: 1,
    capture: 'slot',
    synthetic: false,
  };
}
